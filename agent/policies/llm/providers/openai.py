"""OpenAI chat completions with tools (also any OpenAI-compatible server: vLLM, llama.cpp, Ollama)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from crashcart.agent.policies.llm import _messages
from crashcart.agent.policies.llm._messages import ModelResponse, ToolCallRequest, ToolChoice, ToolDef, Usage
from crashcart.agent.policies.llm.providers._base import SDKModel
from crashcart.agent.policies.llm.providers._errors import model_error


class OpenAIChatModel(SDKModel):
    provider, key_env, public_host = "openai", "OPENAI_API_KEY", "api.openai.com"

    def _make_client(self, key: str | None) -> Any:
        import openai

        return openai.OpenAI(base_url=self._base_url, api_key=key, timeout=self._timeout, max_retries=0)

    def request(self, messages: list[dict[str, Any]], tools: list[ToolDef], tool_choice: ToolChoice = "auto",
                max_tokens: int = 2048) -> ModelResponse:
        kwargs: dict[str, Any] = {"model": self.model, "messages": to_openai(messages), "max_tokens": max_tokens}
        if tools:
            kwargs["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                                 "parameters": t.parameters}} for t in tools]
            kwargs["tool_choice"] = (tool_choice if tool_choice in {"auto", "required"}
                                     else {"type": "function", "function": {"name": tool_choice}})
        _messages.check_allowed("openai", self._base_url or os.environ.get("OPENAI_BASE_URL"))
        if self.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        try:
            resp = self.client.chat.completions.create(**kwargs)
            return from_openai_stream(resp, self.on_text) if self.stream else from_openai(resp)
        except Exception as e:  # noqa: BLE001 - every SDK failure becomes a ModelError
            if type(e).__module__.startswith("openai"):
                raise model_error("openai", e) from None
            raise


def to_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            # "" rather than null: OpenAI takes either, llama.cpp's server only a string.
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
            if m.get("tool_calls"):
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in m["tool_calls"]]
            out.append(msg)
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["id"], "content": m["content"]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def from_openai(resp: Any) -> ModelResponse:
    choices = getattr(resp, "choices", None) or []
    if not choices:
        return ModelResponse(model=getattr(resp, "model", "") or "", finish_reason="no_choices")
    choice = choices[0]
    message = choice.message
    calls = []
    for i, c in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(c, "function", None)
        if fn is None:
            continue
        args = fn.arguments
        calls.append(ToolCallRequest(id=c.id or f"call_{i}", name=fn.name or "",
                                     arguments=args if isinstance(args, str) else json.dumps(args)))
    usage = getattr(resp, "usage", None)
    return ModelResponse(
        text=message.content or "", tool_calls=calls, model=getattr(resp, "model", "") or "",
        usage=Usage(getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0),
        finish_reason=choice.finish_reason,
    )


def from_openai_stream(chunks: Any, on_text: Callable[[str], None] | None = None) -> ModelResponse:
    """A streamed answer put back together: text deltas, tool calls by index, usage at the end."""
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    out = ModelResponse()
    for chunk in chunks:
        out.model = getattr(chunk, "model", "") or out.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            out.usage = Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0)
        for choice in getattr(chunk, "choices", None) or []:
            delta = choice.delta
            piece = getattr(delta, "content", None) or ""
            text.append(piece)
            if piece and on_text is not None:
                on_text(piece)
            for c in getattr(delta, "tool_calls", None) or []:
                slot = calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = c.id or slot["id"]
                if c.function is not None:
                    slot["name"] += c.function.name or ""
                    slot["arguments"] += c.function.arguments or ""
            out.finish_reason = choice.finish_reason or out.finish_reason
    out.text = "".join(text)
    out.tool_calls = [ToolCallRequest(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"])
                      for i, c in sorted(calls.items())]
    return out
