"""A model's investigation, turn by turn: what it said, each tool call beside its result.

`render_model_turns` draws it after the fact (a transcript, `incidents show`); `LiveTurns`
draws the same lines while the incident runs, each turn as the model answers and each
result as the cluster returns it, with a spinner while a request is out.
"""

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
            _decided(console, note)
    for o in observations[:first]:
        _observation(console, o, trim)
    for i, n in enumerate(turns, 1):
        _turn(console, n, i, trim)
        for c in n.get("tool_calls") or []:
            _call(console, c, n, trim)
            o = _result_of(c, n, observations)
            if o is not None:
                _result(console, o, trim)
        _trimmed(console, n)
    for note in state.get("policy_log") or []:
        if note.get("kind") == "gave_up":
            _gave_up(console, note)


class LiveTurns:
    """A policy that prints its investigation as it goes; everything else is the policy's own."""

    def __init__(self, policy: Any, console: Console, trim):
        self.policy, self.console, self.trim = policy, console, trim
        self.shown = 0  # observations already printed
        self.turns = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    @property
    def model(self) -> Any:
        return getattr(getattr(self.policy, "llm", self.policy), "model", None)

    def step(self, state: dict[str, Any], now: Any, backend: str) -> tuple[list[Any], list[dict[str, Any]]]:
        self.show_results(state)
        model, heard = self.model, []
        head = f"model turn {self.turns + 1}: "
        # Under auto, the playbooks investigate until (and unless) they hand the incident over.
        handed = getattr(self.policy, "name", "") != "auto" or any(
            n.get("kind") == "decided" and n.get("by") == "llm" for n in state.get("policy_log") or [])
        waiting = f"waiting for {getattr(model, 'name', 'the model')}" if handed else "the playbooks are reading"
        with self.console.status(Text(head + waiting if handed else waiting)) as status:
            def hear(piece: str) -> None:  # a streamed answer's words, as they arrive
                heard.append(piece)
                status.update(Text(head + "".join(heard)[-160:].replace("\n", " ")))

            if hasattr(model, "on_text"):
                model.on_text = hear
            try:
                calls, notes = self.policy.step(state, now, backend)
            finally:
                if hasattr(model, "on_text"):
                    model.on_text = None
        for note in notes:
            if note.get("kind") == "decided":
                _decided(self.console, note)
            elif note.get("kind") == "turn":
                self.turns += 1
                _turn(self.console, note, self.turns, self.trim)
                for c in note.get("tool_calls") or []:
                    _call(self.console, c, note, self.trim)  # a result from the cluster comes next round
                _trimmed(self.console, note)
            elif note.get("kind") == "gave_up":
                _gave_up(self.console, note)
        return calls, notes

    def show_results(self, state: dict[str, Any]) -> None:
        """What the cluster returned since the last round (the calls printed above)."""
        observations = state.get("observations") or []
        for o in observations[self.shown:]:
            _result(self.console, o, self.trim) if self.turns else _observation(self.console, o, self.trim)
        self.shown = len(observations)


def _result_of(call: dict[str, Any], note: dict[str, Any], observations: list[dict[str, Any]]) -> dict[str, Any] | None:
    if call["id"] not in note.get("ran", []):
        return None
    j = note["obs_before"] + note["ran"].index(call["id"])
    return observations[j] if j < len(observations) else None


def _decided(console: Console, note: dict[str, Any]) -> None:
    console.print(Text(f"decided by {note['by']}: {note['why']}", style="bold cyan"), highlight=False)


def _observation(console: Console, o: dict[str, Any], trim) -> None:
    console.print(Text(f"#{o['seq']:>2} {o['tool']}({_args(o.get('args'))})", style="bold blue"), highlight=False)
    body = trim(o.get("text") or "", 12) if o["ok"] else f"error: {o.get('error')}"
    console.print(Text(body, style="dim" if o["ok"] else "red"), highlight=False)


def _turn(console: Console, n: dict[str, Any], i: int, trim) -> None:
    usage = n.get("usage") or {}
    head = f"model turn {i} ({n.get('model')}, {usage.get('input', 0)} in / {usage.get('output', 0)} out"
    head += f", {n.get('latency_ms', 0):.0f} ms" + (f", {n['retries']} retries" if n.get("retries") else "") + ")"
    console.print(Text(head, style="bold magenta"), highlight=False)
    if n.get("text"):
        console.print(Text(f"  {n['text'].strip()[:1500]}", style="italic"), highlight=False)


def _call(console: Console, c: dict[str, Any], n: dict[str, Any], trim) -> None:
    console.print(Text(f"  -> {c['name']}({c['arguments'][:200]})", style="bold blue"), highlight=False)
    if c["id"] in n.get("replies", {}):
        content, error = n["replies"][c["id"]]
        console.print(Text(f"     {'error: ' if error else ''}{trim(content, 6)}", style="red" if error else "dim"),
                      highlight=False)


def _result(console: Console, o: dict[str, Any], trim) -> None:
    body = trim(o.get("text") or "", 8) if o["ok"] else f"error: {o.get('error')}"
    console.print(Text(f"     #{o['seq']} {o['tool']}: {body}", style="dim" if o["ok"] else "red"), highlight=False)


def _trimmed(console: Console, n: dict[str, Any]) -> None:
    if n.get("trimmed"):
        console.print(Text(f"  [{n['trimmed']} oldest tool results trimmed to fit the context budget]", style="yellow"))


def _gave_up(console: Console, note: dict[str, Any]) -> None:
    console.print(Text(f"the model did not conclude: {note['why']}", style="bold red"), highlight=False)


def _args(args: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in (args or {}).items())
