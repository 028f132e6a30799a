"""Record every tool call and its result to a tape, and serve a run back from it.

A live incident runs on `RecordingBackend(live, tape)`; `crashcart replay` re-runs the
agent on `ReplayBackend(tape)` and shows where its decisions now differ; `crashcart
export` turns the tape into a scenario file. A tape is plain JSON lines, one entry per call.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from crashcart.tools._spec import REGISTRY, ToolCall, ToolError, ToolInput, ToolSpec
from crashcart.tools.backends.base import ActionTarget, Backend


def call_key(tool: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool": tool, "args": args}, sort_keys=True, default=str)


@dataclass
class TapeEntry:
    kind: str
    """'call' (a tool ran), 'target' (the facts a guard decision read) or 'clock'."""
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] | None = None
    error: str | None = None
    at: str | None = None


@dataclass
class Tape:
    backend: str
    entries: list[TapeEntry] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    """What a replay needs besides the calls: the trigger, the cluster's name, the guard policy."""

    def to_jsonl(self) -> str:
        head = json.dumps({"tape": 1, "backend": self.backend, "meta": self.meta}, default=str)
        return "\n".join([head] + [json.dumps(dataclasses.asdict(e), default=str) for e in self.entries]) + "\n"

    @classmethod
    def from_jsonl(cls, text: str, source: str = "<tape>") -> Tape:
        lines = [l for l in text.splitlines() if l.strip()]
        try:
            head = json.loads(lines[0])
            tape = cls(backend=head["backend"], meta=head.get("meta") or {})
            for n, line in enumerate(lines[1:], start=2):
                tape.entries.append(TapeEntry(**json.loads(line)))
        except (IndexError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{source}: not a crashcart tape ({type(e).__name__}: {e})") from None
        return tape

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_jsonl(), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Tape:
        return cls.from_jsonl(Path(path).read_text(encoding="utf-8"), str(path))

    def calls(self) -> list[TapeEntry]:
        return [e for e in self.entries if e.kind == "call"]


class RecordingBackend(Backend):
    """Runs every call on the live backend and writes it, with its result, to the tape."""

    def __init__(self, inner: Backend, tape: Tape | None = None):
        self.inner = inner
        self.kind = inner.kind
        self.tape = tape or Tape(backend=inner.kind)
        self._last_clock: str | None = None

    def now(self) -> datetime:
        now = self.inner.now()
        if now.isoformat() != self._last_clock:
            self._last_clock = now.isoformat()
            self.tape.entries.append(TapeEntry(kind="clock", at=self._last_clock))
        return now

    def run(self, spec: ToolSpec, args: ToolInput) -> BaseModel:
        plain = args.model_dump(mode="json", exclude_defaults=True)
        try:
            out = self.inner.run(spec, args)
        except ToolError as e:
            self.tape.entries.append(TapeEntry(kind="call", tool=spec.name, args=plain, error=str(e)))
            raise
        self.tape.entries.append(TapeEntry(kind="call", tool=spec.name, args=plain, output=out.model_dump(mode="json")))
        return out

    def target(self, call: ToolCall) -> ActionTarget:
        facts = self.inner.target(call)
        self.tape.entries.append(TapeEntry(kind="target", tool=call.tool, args=call.args,
                                           output=dataclasses.asdict(facts)))
        return facts

    def __getattr__(self, name: str) -> Any:
        # Anything else a live backend offers (polling, its cluster) passes through.
        return getattr(self.inner, name)


class ReplayBackend(Backend):
    """Serves a recorded run: the same call gets the same answer; a new call is an error."""

    def __init__(self, tape: Tape):
        self.kind = tape.backend
        self._calls: dict[str, TapeEntry] = {}
        self._targets: dict[str, TapeEntry] = {}
        clocks = [e.at for e in tape.entries if e.kind == "clock" and e.at]
        self._now = datetime.fromisoformat(clocks[0]) if clocks else None
        for e in tape.entries:
            if e.kind == "call":
                self._calls.setdefault(call_key(e.tool, e.args), e)
            elif e.kind == "target":
                self._targets.setdefault(call_key(e.tool, e.args), e)

    def now(self) -> datetime:
        if self._now is None:
            raise ToolError("the tape recorded no clock")
        return self._now

    def run(self, spec: ToolSpec, args: ToolInput) -> BaseModel:
        plain = args.model_dump(mode="json", exclude_defaults=True)
        entry = self._calls.get(call_key(spec.name, plain))
        if entry is None:
            raise ToolError(f"{spec.name}({plain}) is not on the tape: the recorded run never made this call")
        if entry.error is not None:
            raise ToolError(entry.error)
        return REGISTRY.get(spec.name).output.model_validate(entry.output)

    def target(self, call: ToolCall) -> ActionTarget:
        entry = self._targets.get(call_key(call.tool, call.args))
        if entry is None:
            raise ToolError(f"{call.tool} {call.args} is not on the tape: the recorded run never planned it")
        facts = dict(entry.output or {})
        if facts.get("last_checkpoint"):
            facts["last_checkpoint"] = datetime.fromisoformat(facts["last_checkpoint"])
        return ActionTarget(**facts)
