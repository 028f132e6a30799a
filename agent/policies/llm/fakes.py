"""Deterministic models for tests and demos: no network, no key, no cost.

- `ScriptedModel` follows a script: each turn is a list of tool calls (or a final text);
  when the script runs out it concludes with what it was given.
- `FunctionModel` hands the messages and tools to a function that returns the response:
  a test decides each turn from what the model would have seen.
- `RecordedModel` says again, in order, what a recorded incident's model said (its turns in
  the store): `crashcart replay` re-runs the agent without asking a provider anything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from crashcart.agent.policies.llm._messages import ModelError, ModelResponse, ToolCallRequest, ToolChoice, ToolDef, Usage


def _estimate_tokens(messages: list[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or [])) for m in messages) // 4


class FunctionModel:
    def __init__(self, fn: Callable[[list[dict[str, Any]], list[ToolDef], ToolChoice], ModelResponse],
                 name: str = "function:test"):
        self.fn = fn
        self.name = name
        self.requests: list[dict[str, Any]] = []
        """Every request as it was made (messages, tool names, tool_choice), for assertions."""

    def request(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice = "auto",
                max_tokens: int = 2048) -> ModelResponse:
        self.requests.append({"messages": [dict(m) for m in messages], "tools": [t.name for t in tools],
                              "tool_choice": tool_choice})
        resp = self.fn(messages, tools, tool_choice)
        if not resp.usage.input_tokens:
            resp.usage = Usage(_estimate_tokens(messages), _estimate_tokens([resp.as_message()]))
        resp.model = resp.model or self.name
        return resp


Turn = list[tuple[str, dict[str, Any] | str]] | str
"""A scripted turn: [(tool, args or raw JSON text), ...], or plain text."""


class ScriptedModel(FunctionModel):
    def __init__(self, turns: list[Turn], conclusion: dict[str, Any] | None = None, name: str = "test:scripted"):
        self.turns = list(turns)
        self.conclusion = conclusion
        self._n = 0
        super().__init__(self._next, name=name)

    def _next(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice) -> ModelResponse:
        self._n += 1
        forced = tool_choice not in {"auto", "required"}
        if self.turns and not forced:
            turn = self.turns.pop(0)
            if isinstance(turn, str):
                return ModelResponse(text=turn, finish_reason="stop")
            return ModelResponse(tool_calls=[
                ToolCallRequest(id=f"call_{self._n}_{i}", name=name,
                                arguments=args if isinstance(args, str) else json.dumps(args))
                for i, (name, args) in enumerate(turn)], finish_reason="tool_calls")
        if self.conclusion is None:
            return ModelResponse(text="I have nothing more to add.", finish_reason="stop")
        return ModelResponse(tool_calls=[ToolCallRequest(id=f"call_{self._n}_c", name="conclude",
                                                         arguments=json.dumps(self.conclusion))],
                             finish_reason="tool_calls")


class RecordedModel(FunctionModel):
    def __init__(self, turns: list[dict[str, Any]]):
        """`turns`: the policy's "turn" notes, as the store keeps them."""
        self.recorded = list(turns)
        self._n = 0
        name = (turns[0].get("model") if turns else None) or "recorded:model"
        super().__init__(self._next, name=name)

    def _next(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice) -> ModelResponse:
        if self._n >= len(self.recorded):
            # The replayed incident went further than the recorded one: the difference is the answer.
            raise ModelError(f"the recording has no model turn {self._n + 1} (it has {len(self.recorded)})",
                             retriable=False)
        turn = self.recorded[self._n]
        self._n += 1
        usage = turn.get("usage") or {}
        return ModelResponse(
            text=turn.get("text") or "", model=self.name,
            tool_calls=[ToolCallRequest(id=c["id"], name=c["name"], arguments=c["arguments"])
                        for c in turn.get("tool_calls") or []],
            usage=Usage(usage.get("input", 0), usage.get("output", 0)),
            finish_reason="tool_calls" if turn.get("tool_calls") else "stop")
