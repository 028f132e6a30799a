"""What a tool is: typed input, typed output, a description for a model, an effect.

Tools are declared once, here in the abstract; each backend implements the
ones that make sense for its kind of cluster. The registry is how the agent,
the guard and the LLM schemas find them by name.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from crashcart.tools.yamlio import describe_validation_error

Effect = Literal["read", "write"]
BackendKind = Literal["slurm", "kubernetes", "ray"]
ALL_BACKENDS: tuple[BackendKind, ...] = ("slurm", "kubernetes", "ray")


class ToolError(Exception):
    """A tool could not run: bad arguments, an unknown node or job, a backend failure.

    The message is for a person and a model alike: it names what and where.
    """


class ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WriteInput(ToolInput):
    reason: str
    """Why this action is taken; journaled with the guard's decision."""


class ToolCall(BaseModel):
    """One call as the policy asked for it (plain data: it lives in graph state)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    args: dict[str, Any] = {}

    @property
    def action_id(self) -> str:
        """A stable id for this exact action, binding an approval to it."""
        blob = json.dumps({"tool": self.tool, "args": self.args}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input: type[ToolInput]
    output: type[BaseModel]
    effect: Effect
    backends: tuple[BackendKind, ...] = ALL_BACKENDS

    def parse_args(self, args: dict[str, Any]) -> ToolInput:
        try:
            return self.input.model_validate(args)
        except ValidationError as e:
            problems = describe_validation_error(e, args, unknown="unknown argument")
            raise ToolError(f"{self.name}: bad arguments: {problems}") from None

    def json_schema(self) -> dict[str, Any]:
        """The function schema a model sees (OpenAI/Anthropic tool calling)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.input.model_json_schema(),
        }


@dataclass
class ToolRegistry:
    specs: dict[str, ToolSpec] = field(default_factory=dict)

    def add(self, spec: ToolSpec) -> ToolSpec:
        if spec.name in self.specs:
            raise ValueError(f"tool {spec.name!r} is declared twice")
        self.specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ToolSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise ToolError(f"unknown tool {name!r}; known: {', '.join(sorted(self.specs))}") from None

    def for_backend(self, backend: str) -> list[ToolSpec]:
        return [s for s in self.specs.values() if backend in s.backends]


REGISTRY = ToolRegistry()


def tool(
    name: str,
    *,
    input: type[ToolInput],
    output: type[BaseModel],
    effect: Effect = "read",
    backends: tuple[BackendKind, ...] = ALL_BACKENDS,
    description: str,
) -> ToolSpec:
    return REGISTRY.add(ToolSpec(name, " ".join(description.split()), input, output, effect, backends))
