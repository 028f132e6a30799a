"""OpenAI's Responses API with function tools: for OpenAI's own newer models, where it is the
better fit (reasoning items stay on OpenAI's side); `openai_api: responses` in the llm settings."""

from __future__ import annotations

import json
import os
from typing import Any

from crashcart.agent.policies.llm import _messages
from crashcart.agent.policies.llm._messages import ModelResponse, ToolCallRequest, ToolChoice, ToolDef, Usage
from crashcart.agent.policies.llm.providers._errors import model_error
from crashcart.agent.policies.llm.providers.openai import OpenAIChatModel


class OpenAIResponsesModel(OpenAIChatModel):
    def request(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice = "auto",
                max_tokens: int = 2048) -> ModelResponse:
        instructions, items = to_responses(messages)
        kwargs: dict[str, Any] = {"model": self.model, "input": items, "max_output_tokens": max_tokens}
        if instructions:
            kwargs["instructions"] = instructions
        if tools:
            kwargs["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                                "parameters": t.parameters, "strict": False} for t in tools]
            kwargs["tool_choice"] = (tool_choice if tool_choice in {"auto", "required"}
                                     else {"type": "function", "name": tool_choice})
        _messages.check_allowed("openai", self._base_url or os.environ.get("OPENAI_BASE_URL"))
        try:
            resp = self.client.responses.create(**kwargs)
        except Exception as e:  # noqa: BLE001 - every SDK failure becomes a ModelError
            if type(e).__module__.startswith("openai"):
                raise model_error("openai", e) from None
            raise
        return from_responses(resp)


def to_responses(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    instructions = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "assistant":
            if m.get("content"):
                items.append({"role": "assistant", "content": m["content"]})
            items += [{"type": "function_call", "call_id": c["id"], "name": c["name"], "arguments": c["arguments"]}
                      for c in m.get("tool_calls") or []]
        elif m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["id"], "output": m["content"]})
        else:
            items.append({"role": "user", "content": m["content"]})
    return instructions, items


def from_responses(resp: Any) -> ModelResponse:
    text, calls = [], []
    for item in getattr(resp, "output", None) or []:
        kind = getattr(item, "type", None)
        if kind == "message":
            text += [getattr(c, "text", "") or "" for c in item.content or [] if getattr(c, "type", "") == "output_text"]
        elif kind == "function_call":
            args = item.arguments
            calls.append(ToolCallRequest(id=item.call_id, name=item.name or "",
                                         arguments=args if isinstance(args, str) else json.dumps(args)))
    usage = getattr(resp, "usage", None)
    return ModelResponse(
        text="\n".join(text), tool_calls=calls, model=getattr(resp, "model", "") or "",
        usage=Usage(getattr(usage, "input_tokens", 0) or 0, getattr(usage, "output_tokens", 0) or 0),
        finish_reason=getattr(resp, "status", None),
    )
