"""Anthropic Messages with tool use."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from crashcart.agent.policies.llm import _messages
from crashcart.agent.policies.llm._messages import ModelResponse, ToolCallRequest, ToolChoice, ToolDef, Usage
from crashcart.agent.policies.llm.providers._base import SDKModel
from crashcart.agent.policies.llm.providers._errors import model_error


class AnthropicModel(SDKModel):
    provider, key_env, public_host = "anthropic", "ANTHROPIC_API_KEY", "api.anthropic.com"

    def _make_client(self, key: str | None) -> Any:
        import anthropic

        return anthropic.Anthropic(base_url=self._base_url, api_key=key, timeout=self._timeout, max_retries=0)

    def request(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice = "auto",
                max_tokens: int = 2048) -> ModelResponse:
        system, wire = to_anthropic(messages)
        kwargs: dict[str, Any] = {"model": self.model, "messages": wire, "max_tokens": max_tokens}
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                               for t in tools]
            kwargs["tool_choice"] = ({"type": "auto"} if tool_choice == "auto" else {"type": "any"}
                                     if tool_choice == "required" else {"type": "tool", "name": tool_choice})
        _messages.check_allowed("anthropic", self._base_url or os.environ.get("ANTHROPIC_BASE_URL"))
        try:
            if self.stream:
                return from_anthropic_stream(self.client.messages.create(**kwargs, stream=True), self.on_text)
            return from_anthropic(self.client.messages.create(**kwargs))
        except Exception as e:  # noqa: BLE001 - every SDK failure becomes a ModelError
            if type(e).__module__.startswith("anthropic"):
                raise model_error("anthropic", e) from None
            raise


def _input(arguments: str) -> dict[str, Any]:
    # Anthropic carries tool input as an object; text that never parsed is sent back as what it was.
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"unparsed_arguments": arguments[:500]}
    return value if isinstance(value, dict) else {"value": value}


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, messages): tool results ride in user turns, and turns alternate."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": list(blocks)})

    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": _input(c["arguments"])}
                       for c in m.get("tool_calls") or []]
            add("assistant", blocks or [{"type": "text", "text": "(no text)"}])
        elif m["role"] == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m["id"], "content": m["content"],
                          "is_error": bool(m.get("error"))}])
        else:
            add("user", [{"type": "text", "text": m["content"]}])
    return system, out


def from_anthropic(resp: Any) -> ModelResponse:
    text, calls = [], []
    for block in getattr(resp, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            text.append(block.text or "")
        elif kind == "tool_use":
            calls.append(ToolCallRequest(id=block.id, name=block.name or "",
                                         arguments=json.dumps(block.input if block.input is not None else {})))
    usage = getattr(resp, "usage", None)
    return ModelResponse(
        text="\n".join(text), tool_calls=calls, model=getattr(resp, "model", "") or "",
        usage=Usage(getattr(usage, "input_tokens", 0) or 0, getattr(usage, "output_tokens", 0) or 0),
        finish_reason=getattr(resp, "stop_reason", None),
    )


def from_anthropic_stream(events: Any, on_text: Callable[[str], None] | None = None) -> ModelResponse:
    """A streamed answer put back together from its server-sent events, block by block."""
    blocks: dict[int, dict[str, Any]] = {}
    out = ModelResponse()
    for event in events:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            out.model = event.message.model or ""
            out.usage.input_tokens = getattr(event.message.usage, "input_tokens", 0) or 0
        elif kind == "content_block_start":
            b = event.content_block
            blocks[event.index] = {"type": b.type, "text": getattr(b, "text", "") or "", "id": getattr(b, "id", ""),
                                   "name": getattr(b, "name", ""), "json": ""}
        elif kind == "content_block_delta":
            d = event.delta
            block = blocks.setdefault(event.index, {"type": "text", "text": "", "json": ""})
            if d.type == "text_delta":
                block["text"] += d.text
                if on_text is not None:
                    on_text(d.text)
            elif d.type == "input_json_delta":
                block["json"] += d.partial_json
        elif kind == "message_delta":
            out.finish_reason = getattr(event.delta, "stop_reason", None) or out.finish_reason
            out.usage.output_tokens = getattr(event.usage, "output_tokens", 0) or 0
    ordered = [blocks[i] for i in sorted(blocks)]
    out.text = "\n".join(b["text"] for b in ordered if b["type"] == "text" and b["text"])
    out.tool_calls = [ToolCallRequest(id=b["id"], name=b["name"], arguments=b["json"] or "{}")
                      for b in ordered if b["type"] == "tool_use"]
    return out
