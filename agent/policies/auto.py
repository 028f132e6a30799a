"""The hybrid policy `auto`: the playbooks first; a model where they run out.

The playbook investigates and concludes as it always does. The model takes over, with
everything the playbook read, when no label matched with enough confidence, when the
trigger is a person's question, or when the playbook's remedy could not be computed.
Which policy decided, and why, is written into the diagnosis (`decided_by`) and the log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from crashcart.agent.graph import MAX_ROUNDS
from crashcart.agent.guard import Review
from crashcart.agent.policies.llm import LLMPolicy
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.state import Diagnosis
from crashcart.tools._spec import ToolCall

POLICY = "auto"
NO_VERDICT = {"unrecognized"}


class AutoPolicy:
    name = POLICY

    def __init__(self, llm: LLMPolicy, playbook: PlaybookPolicy | None = None, handover_confidence: float | None = None):
        self.llm = llm
        self.playbook = playbook or llm.playbook
        self.threshold = llm.settings.handover_confidence if handover_confidence is None else handover_confidence
        self.max_rounds = llm.max_rounds

    def next_calls(self, state: dict[str, Any], now: datetime | None, backend: str) -> list[ToolCall]:
        return self.step(state, now, backend)[0]

    def step(self, state: dict[str, Any], now: datetime | None, backend: str) -> tuple[list[ToolCall], list[dict]]:
        decided = decision_note(state)
        if decided is None:
            if state.get("rounds", 0) < MAX_ROUNDS:
                calls = self.playbook.next_calls(state, now, backend)
                if calls:
                    return calls, []
            verdict, _ = self.playbook.diagnose(state, now)
            why = self.why_model(verdict, state)
            if why is None:
                return [], [{"policy": POLICY, "kind": "decided", "by": "playbook",
                             "why": f"{verdict.label} matched with confidence {verdict.confidence}"}]
            note = {"policy": POLICY, "kind": "decided", "by": "llm", "why": why,
                    "playbook": {"label": verdict.label, "remedy": verdict.remedy, "confidence": verdict.confidence}}
            calls, notes = self.llm.step(state, now, backend)
            return calls, [note, *notes]
        if decided["by"] == "playbook":
            return [], []
        return self.llm.step(state, now, backend)

    def why_model(self, verdict: Diagnosis, state: dict[str, Any]) -> str | None:
        """Why the model should take over from this playbook verdict, or None."""
        if (state.get("trigger") or {}).get("kind") == "chat":
            return "the trigger is a person's question"
        if verdict.label in NO_VERDICT or verdict.confidence < self.threshold:
            return (f"no playbook label matched with enough confidence ({verdict.label}, "
                    f"{verdict.confidence} < {self.threshold})" if verdict.label not in NO_VERDICT
                    else "no playbook label matched")
        if verdict.remedy == "resubmit_with_changes" and not verdict.changes:
            return f"the playbook's remedy for {verdict.label} could not be computed from the evidence"
        return None

    def diagnose(self, state: dict[str, Any], now: datetime | None) -> tuple[Diagnosis, list[ToolCall]]:
        decided = decision_note(state)
        if decided is not None and decided["by"] == "llm":
            diagnosis, plan = self.llm.diagnose(state, now)
            diagnosis.decided_by = f"{diagnosis.decided_by}: {decided['why']}"
            return diagnosis, plan
        diagnosis, plan = self.playbook.diagnose(state, now)
        why = decided["why"] if decided else "the investigation ended before the handover check"
        diagnosis.decided_by = f"playbook: {why}"
        return diagnosis, plan

    def review(self, state: dict[str, Any], call: ToolCall) -> Review | None:
        decided = decision_note(state)
        return self.llm.review(state, call) if decided is not None and decided["by"] == "llm" else None


def decision_note(state: dict[str, Any]) -> dict[str, Any] | None:
    return next((n for n in state.get("policy_log") or [] if n.get("policy") == POLICY and n["kind"] == "decided"), None)
