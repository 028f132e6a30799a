"""The incident summary a person reads first (the store keeps it; Slack and the CLI show it)."""

from __future__ import annotations

from typing import Any

VERB = {"allow": "done", "dry_run": "proposed (dry run)", "needs_approval": "waiting for approval", "deny": "refused"}


def incident_summary(state: dict[str, Any], status: str) -> str:
    d = state.get("diagnosis") or {}
    trigger = state.get("trigger") or {}
    subject = trigger.get("job") or trigger.get("node") or trigger.get("text") or trigger.get("kind")
    lines = [
        f"Incident {state.get('incident_id')} ({status}): {trigger.get('kind')} {subject}",
        f"Diagnosis: {d.get('label')} [{d.get('family')}], root cause {d.get('root_cause') or 'unknown'}, "
        f"confidence {d.get('confidence')}",
        f"{d.get('summary', '')}",
    ]
    if d.get("evidence"):
        lines.append("Evidence:")
        lines += [f"  {e}" for e in d["evidence"][:6]]
    actions = state.get("actions") or []
    if actions:
        lines.append("Actions:")
        for a in actions:
            target = a["args"].get("node") or a["args"].get("job") or a["args"].get("team") or a["args"].get("to") or ""
            lines.append(f"  {a['tool']} {target}: {VERB.get(a['decision'], a['decision'])}"
                         + (f" ({a['reason']})" if a["decision"] in {"deny", "needs_approval"} else ""))
    lines.append(f"Investigated with {len(state.get('observations') or [])} tool calls.")
    if d.get("decided_by"):
        turns = [n for n in state.get("policy_log") or [] if n.get("kind") == "turn"]
        spent = (f" ({len(turns)} model requests, {sum(n['usage']['input'] for n in turns)} tokens in, "
                 f"{sum(n['usage']['output'] for n in turns)} out)") if turns else ""
        lines.append(f"Decided by {d['decided_by']}{spent}.")
    return "\n".join(lines)
