"""The playbooks as the model's runbook: what they match, what they would look at, what they conclude."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from crashcart.agent.policies.playbook import PlaybookPolicy


def runbook(playbook: PlaybookPolicy, state: dict[str, Any], now: datetime | None, backend: str) -> dict[str, Any]:
    from crashcart.agent.policies.evidence import build_evidence

    observations = state.get("observations") or []
    ev = build_evidence(observations, state["trigger"], now)
    matches = playbook._candidates(ev)
    verdict, plan = playbook.diagnose(state, now)
    candidates = []
    for m in matches[:5]:
        label = m.entry.label
        candidates.append({
            "label": m.name, "title": label.title, "family": m.entry.family, "remedy": label.remedy.kind,
            "retriable": label.retriable, "symptom": label.symptom,
            "investigate": [f"{s.tool} ({s.scope})" for s in label.investigate],
            "advice": label.remedy.advice,
        })
    out = verdict.model_dump(mode="json", include={
        "label", "family", "root_cause", "remedy", "confidence", "retriable", "summary", "changes", "team"})
    out["evidence"] = verdict.evidence  # quoted lines and facts derived from the same results
    return {
        "verdict": out,
        "plan": [c.model_dump() for c in plan],
        "candidates": candidates,
        "next_calls": [c.model_dump() for c in playbook.next_calls(state, now, backend)][:16],
    }


def render_runbook(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)
