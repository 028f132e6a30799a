"""The conversation as crashcart keeps it: plain dicts, the same for every provider.

A provider adapter turns these into its SDK's wire format and its response back
into a `ModelResponse`, so the loop, the budgets and the fakes never see an SDK.

Messages:
- {"role": "system" | "user", "content": str}
- {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments"}]}
  (`arguments` is the JSON text exactly as the model wrote it, parseable or not)
- {"role": "tool", "id": str, "name": str, "content": str, "error": bool}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

ALLOW_MODEL_REQUESTS = True
"""False in crashcart's tests: a request to anything but a loopback server is refused
(a test opts in with the `allow_model_requests` marker), so no test spends money by accident."""

ToolChoice = Literal["auto", "required"] | str
"""auto, required (some tool), or the name of the one tool the model must call."""


@dataclass
class ToolCallRequest:
    id: str
    name: str
    arguments: str


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class ModelResponse:
    text: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None

    def as_message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.text, "tool_calls": [asdict(c) for c in self.tool_calls]}


@dataclass
class ToolDef:
    name: str
    description: str
    parameters: dict[str, Any]


class ModelError(Exception):
    """A model request failed. `retriable` for rate limits, 5xx, timeouts and lost connections."""

    def __init__(self, message: str, *, retriable: bool, status: int | None = None):
        super().__init__(message)
        self.retriable = retriable
        self.status = status


class Model(Protocol):
    name: str
    """provider:model, as the user named it (the price table and the store use it)."""

    def request(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice = "auto",
                max_tokens: int = 2048) -> ModelResponse:
        """One model turn. Raises ModelError, never an SDK's own exception."""


def check_allowed(provider: str, base_url: str | None) -> None:
    from urllib.parse import urlparse

    host = urlparse(base_url).hostname if base_url else None
    if not ALLOW_MODEL_REQUESTS and host not in {"127.0.0.1", "localhost", "::1"}:
        raise ModelError(f"{provider}: requests to real models are blocked here ({base_url or 'the provider'}); "
                         "use a fake model or a loopback server", retriable=False)
