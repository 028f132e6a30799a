"""A model's investigation, turn by turn: what it said, each tool call beside its result."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text


def model_turns(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in state.get("policy_log") or [] if n.get("kind") == "turn"]


def render_model_turns(console: Console, state: dict[str, Any], trim) -> None:
    observations = state.get("observations") or []
    turns = model_turns(state)
    first = turns[0]["obs_before"] if turns else len(observations)
    for note in state.get("policy_log") or []:
        if note.get("kind") == "decided":
            console.print(Text(f"decided by {note['by']}: {note['why']}", style="bold cyan"))
    for o in observations[:first]:
        console.print(Text(f"#{o['seq']:>2} {o['tool']}({_args(o.get('args'))})", style="bold blue"))
        body = trim(o.get("text") or "", 12) if o["ok"] else f"error: {o.get('error')}"
        console.print(Text(body, style="dim" if o["ok"] else "red"), highlight=False)
    for i, n in enumerate(turns, 1):
        usage = n.get("usage") or {}
        head = f"model turn {i} ({n.get('model')}, {usage.get('input', 0)} in / {usage.get('output', 0)} out"
        head += f", {n.get('latency_ms', 0):.0f} ms" + (f", {n['retries']} retries" if n.get("retries") else "") + ")"
        console.print(Text(head, style="bold magenta"))
        if n.get("text"):
            console.print(Text(f"  {n['text'].strip()[:1500]}", style="italic"), highlight=False)
        for c in n.get("tool_calls") or []:
            console.print(Text(f"  -> {c['name']}({c['arguments'][:200]})", style="bold blue"), highlight=False)
            if c["id"] in n.get("replies", {}):
                content, error = n["replies"][c["id"]]
                console.print(Text(f"     {'error: ' if error else ''}{trim(content, 6)}", style="red" if error else "dim"),
                              highlight=False)
            elif c["id"] in n.get("ran", []):
                j = n["obs_before"] + n["ran"].index(c["id"])
                if j < len(observations):
                    o = observations[j]
                    body = trim(o.get("text") or "", 8) if o["ok"] else f"error: {o.get('error')}"
                    console.print(Text(f"     #{o['seq']} {body}", style="dim" if o["ok"] else "red"), highlight=False)
        if n.get("trimmed"):
            console.print(Text(f"  [{n['trimmed']} oldest tool results trimmed to fit the context budget]", style="yellow"))
    for note in state.get("policy_log") or []:
        if note.get("kind") == "gave_up":
            console.print(Text(f"the model did not conclude: {note['why']}", style="bold red"), highlight=False)


def _args(args: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in (args or {}).items())
