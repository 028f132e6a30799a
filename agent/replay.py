"""`crashcart replay`: run the agent again on a recorded incident's tape and show what changed.

The calls are served from the tape, so the cluster is exactly as it was; what may differ is
the agent (new playbooks, a new policy) and so its diagnosis, its actions and the guard's
decisions on them. A call the recorded run never made cannot be answered and shows up as a
failed observation, which is itself a difference worth seeing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.tools.tape import ReplayBackend, Tape

COMPARED = ("label", "family", "root_cause", "remedy")


@dataclass
class ReplayResult:
    incident_id: str
    differences: list[str] = field(default_factory=list)
    recorded: dict[str, Any] = field(default_factory=dict)
    replayed: dict[str, Any] = field(default_factory=dict)
    policy: str = "playbook"
    """What re-decided: the playbooks, or the recorded model turns (`llm`, `auto`)."""


def _actions(decisions: list[tuple[str, dict[str, Any], str]]) -> dict[str, str]:
    out = {}
    for tool, args, decision in decisions:
        key = f"{tool} " + ", ".join(f"{k}={v}" for k, v in sorted(args.items()) if k not in {"reason", "summary", "evidence"})
        out[key] = decision
    return out


def _last_decisions(decisions: list[Any]) -> list[tuple[str, dict[str, Any], str]]:
    last: dict[str, tuple[str, dict[str, Any], str]] = {}
    for d in decisions:
        last[d.action_id] = (d.tool, d.args, d.decision)
    return list(last.values())


def _policy(store: IncidentStore, incident_id: str, policy_name: str) -> tuple[Any, str]:
    """An incident a model decided replays with that model's recorded turns, not the playbooks
    (and without asking the provider again); one the playbooks decided, with today's playbooks."""
    notes = store.policy_notes(incident_id)
    turns = [n for n in notes if n.get("kind") == "turn"]
    if not turns:
        return make_policy(policy_name), policy_name
    from crashcart.agent.policies.llm import RecordedModel

    name = "auto" if any(n.get("policy") == "auto" for n in notes) else "llm"
    return make_policy(name, RecordedModel(turns)), f"{name} ({len(turns)} recorded model turns of {turns[0].get('model')})"


def replay_incident(store: IncidentStore, incident_id: str, policy_name: str = "playbook") -> ReplayResult:
    detail = store.get_incident(incident_id)
    text = store.load_tape(incident_id)
    if detail is None:
        raise LookupError(f"incident {incident_id!r} is not in the store")
    if text is None:
        raise LookupError(f"incident {incident_id!r} has no tape (it was not recorded)")
    tape = Tape.from_jsonl(text, incident_id)
    backend = ReplayBackend(tape)
    # The incident's own stored policy; a tape recorded before incidents kept theirs carries it too.
    stored = store.incident_policy(incident_id)
    guard_policy = policy_from_dict(stored.policy if stored else tape.meta.get("guard") or {},
                                    source=f"{incident_id}: recorded guard")
    scratch = IncidentStore(":memory:")
    policy, described = _policy(store, incident_id, policy_name)
    deps = make_deps(backend, policy, guard_policy, scratch, cluster=tape.meta.get("cluster", "replay"))
    run = start_incident(deps, tape.meta.get("trigger") or detail.incident.trigger or {},
                         cluster=tape.meta.get("cluster", "replay"), source=f"replay:{incident_id}")
    before = detail.incident.diagnosis or {}
    after = run.state.get("diagnosis") or {}
    result = ReplayResult(incident_id, recorded=before, replayed=after, policy=described)
    for key in COMPARED:
        if before.get(key) != after.get(key):
            result.differences.append(f"{key}: was {before.get(key)!r}, now {after.get(key)!r}")
    # Journal against journal: a write refused before the guard (a node the cluster does not
    # have) is in neither, so it is not a difference.
    was = _actions(_last_decisions(detail.decisions))
    now = _actions(_last_decisions(scratch.get_incident(run.incident_id).decisions))
    for key in sorted(was.keys() | now.keys()):
        if was.get(key) != now.get(key):
            result.differences.append(f"action {key}: was {was.get(key) or 'not planned'}, now {now.get(key) or 'not planned'}")
    return result
