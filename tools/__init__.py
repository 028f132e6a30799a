"""Typed tools and the cluster backends they run on."""

from crashcart.tools import catalog as catalog  # registers every tool
from crashcart.tools._spec import REGISTRY, ToolCall, ToolError, ToolInput, ToolSpec
from crashcart.tools.backends.base import ActionTarget, Backend

__all__ = ["REGISTRY", "ActionTarget", "Backend", "ToolCall", "ToolError", "ToolInput", "ToolSpec", "catalog"]
