"""What a policy does: pick the next tool calls, then conclude with a diagnosis and a plan."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from crashcart.agent.state import Diagnosis
from crashcart.tools._spec import ToolCall


class Policy(Protocol):
    name: str

    def next_calls(self, state: dict[str, Any], now: datetime | None, backend: str) -> list[ToolCall]:
        """Read calls to make next; an empty list means the investigation is done."""

    def diagnose(self, state: dict[str, Any], now: datetime | None) -> tuple[Diagnosis, list[ToolCall]]:
        """The diagnosis and the write actions that would fix it (the guard decides on each)."""
