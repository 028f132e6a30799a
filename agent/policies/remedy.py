"""Turn a diagnosis into write actions: the playbook's remedy made concrete.

Only facts the tools returned go into an action (the job's own config, the
node the evidence points at); nothing is copied from a log's prose.
"""

from __future__ import annotations

from typing import Any

from crashcart.agent.policies.computed import COMPUTE, PER_KEY, relocated_path
from crashcart.agent.policies.config_keys import Found, Key, from_canonical, load_key_table, parse_duration, parse_size, to_canonical
from crashcart.agent.policies.evidence import Evidence, RUNNING_STATES
from crashcart.agent.policies.matching import LabelMatch
from crashcart.playbooks._model import Change, Remedy
from crashcart.tools._spec import ToolCall
from crashcart.tools.backends.base import held_after_failed_launch

ESCALATION_TEAM = {
    "escalate_hardware": "hardware", "escalate_user": "user", "escalate_credentials": "credentials",
    "escalate_network": "network", "escalate_storage": "storage", "escalate_infra": "infra",
}


def captured_values(match: LabelMatch | None) -> dict[str, str]:
    """Named groups the label's evidence captured, the first hit's value for each name."""
    found: dict[str, str] = {}
    # The failure's own texts first; an earlier run's log only fills a name they did not.
    for hit in [*match.hits, *match.history] if match else []:
        for name, value in hit.captures.items():
            found.setdefault(name, value)
    return found


def compute_changes(remedy: Remedy, ev: Evidence, job: str, captures: dict[str, str] | None = None,
                    backend: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The config changes for a resubmit, on the keys the job's config uses (wherever it nests
    them), in their units; and notes on what could not be computed (a change the job cannot read
    is no change). `backend` says where an env var goes in a job that carries none yet."""
    config = ev.configs.get(job, {})
    table = load_key_table()
    changes: dict[str, Any] = {}
    notes: list[str] = []
    changed_by: dict[str, list[str]] = {}
    for name, rule in remedy.changes.items():
        setting = table.settings.get(name)
        if setting is None:
            # A literal key (an environment variable the runtime reads): added when absent.
            kind = "text" if rule.set is not None else "count"
            targets = table.locate(config, name)
            if not targets:
                if rule.only_if_present:
                    continue
                targets = [Found(table.new_path(config, name, backend), None, Key(key=name))]
        else:
            kind = setting.kind
            # A key holding a block (DeepSpeed's `bf16: {enabled: ...}`) is not this key's value.
            # A key the config declares without a value (`ckpt_step: null`) is still one the job reads.
            targets = [f for f in table.find(config, name) if kind == "mapping" or not isinstance(f.value, dict)]
            if not targets and setting.add and not rule.only_if_present:
                added = next(k for k in setting.keys if k.key == setting.add)
                targets = [Found(table.new_path(config, added.key, backend), None, added)]
            if not targets:
                if not rule.only_if_present:
                    notes.append(f"the job's config has no key for {name} ({setting.description})")
                continue
        for found in targets:
            current = found.value
            value = _value_for(rule, found, kind, ev, job, captures or {})
            if value is None:
                notes.append(f"cannot compute {found.path} (current value {current!r})")
            elif not _same(value, current):
                changes[found.path] = value
                changed_by.setdefault(name, []).append(found.path)
    for name, rule in remedy.changes.items():
        if rule.along_with and rule.along_with not in changed_by:
            for key in changed_by.get(name, []):
                changes.pop(key, None)
    return changes, notes


def _value_for(rule: Change, found: Found, kind: str, ev: Evidence, job: str, captures: dict[str, str]) -> Any:
    key, current = found.key, found.value
    base = to_canonical(current, key, kind)
    if rule.compute == "path_on_roomiest_disk" and isinstance(current, str):
        # Each directory key moves its own path (a cache and a scratch dir are not one path).
        return relocated_path(ev, job, current)
    if rule.compute:
        value = COMPUTE[rule.compute](ev, job, captures, rule.margin)
        if rule.compute in PER_KEY:
            value = value.get(found.path)  # each key its own value (one Ray Data stage of several)
        if rule.compute == "above_peak" and isinstance(base, (int, float)) and value is not None and value <= base:
            value = None  # the job already had more than that peak: it is not what killed it
        if value is not None:
            return from_canonical(value, key, kind, current, raising=True)
        if not (rule.divide or rule.multiply or rule.set is not None):
            return None  # nothing to compute from: never a guess
        # The rule's arithmetic is its stated fallback (twice the limit that was hit).
    if rule.previous_checkpoint:
        return COMPUTE["newest_complete_checkpoint"](ev, job, captures, None)
    if rule.capture and captures.get(rule.capture) is not None:
        # The component's own number beats the arithmetic, which is for when it said none.
        captured = parse_number(captures[rule.capture])
        return from_canonical(captured, key, kind, current, raising=False) if isinstance(captured, (int, float)) else captured
    if rule.set is not None:
        if key.means is not None:
            return rule.set == key.means
        wanted = _canonical_set(rule.set, kind)
        return from_canonical(wanted, key, kind, current, raising=True) if wanted is not None else None
    if not isinstance(base, (int, float)) or isinstance(base, bool):
        return None
    value = float(base)
    if rule.divide:
        value /= rule.divide
    if rule.multiply:
        value *= rule.multiply
    if rule.min_value is not None:
        floor = _canonical_set(rule.min_value, kind)
        value = max(value, floor) if isinstance(floor, (int, float)) else value
    return from_canonical(value, key, kind, current, raising=value > float(base))


def _canonical_set(value: Any, kind: str) -> Any:
    """A playbook's literal (a memory as "16Gi", a duration as "2-00:00:00") in canonical units."""
    if kind == "memory":
        return parse_size(value)
    if kind == "duration":
        return parse_duration(value, "slurm_time" if isinstance(value, str) else "seconds")
    return value


def _same(value: Any, current: Any) -> bool:
    if type(value) is type(current):
        return value == current
    if isinstance(value, bool) or isinstance(current, bool):
        return False
    return str(value) == str(current)


def parse_number(text: str) -> Any:
    """A captured number as a number (a config key takes 27392, not "27392"); other text as is."""
    cleaned = text.replace(",", "").strip()
    for kind in (int, float):
        try:
            return kind(cleaned)
        except ValueError:
            continue
    return text.strip()


def fallback_team(team: str | None) -> str:
    """Who gets an incident whose fix could not be computed: the label's team, else the owner."""
    return team if team and f"escalate_{team}" in ESCALATION_TEAM else "user"


def _is_queued(ev: Evidence, job: str) -> bool:
    """Still waiting to start: a changed copy replaces it, or the old one would start too."""
    facts = ev.jobs.get(job)
    return bool(facts and facts.state.upper() == "PENDING")


def _is_held(ev: Evidence, job: str, backend: str) -> bool:
    """Held by Slurm itself after its launch failed: releasing it runs it again."""
    facts = ev.jobs.get(job)
    return backend == "slurm" and bool(facts) and held_after_failed_launch(facts.state, facts.reason)


def _is_running(ev: Evidence, job: str) -> bool:
    facts = ev.jobs.get(job)
    return bool(facts and facts.state.upper() in RUNNING_STATES)


def plan_actions(match: LabelMatch | None, remedy_kind: str, ev: Evidence, root_node: str | None,
                 summary: str, evidence: list[str], backend: str = "slurm",
                 remedy: Remedy | None = None, fixed_job: str | None = None,
                 changes: dict[str, Any] | None = None) -> list[ToolCall]:
    """Write actions for one incident, in the order they should run. `remedy` replaces the
    label's own when the diagnosis chose another (a storage fault scoped to one node, the node's
    own loss under a computed job change); `fixed_job` is the job a config fix goes to when it is
    not the first focus job (an upstream); `changes`, already computed, go on that job's resubmit
    whatever the remedy's kind (a node lost mid-save: drained and excluded, resumed from the
    newest whole checkpoint)."""
    if match is None:
        return []
    remedy = remedy or match.entry.label.remedy
    jobs = ev.focus_jobs()
    job = fixed_job or (jobs[0] if jobs else None)
    carried = changes or {}
    why = f"crashcart: {match.name}: {summary}"[:500]
    calls: list[ToolCall] = []

    def resubmit(j: str, changes: dict[str, Any] | None = None, exclude: list[str] | None = None) -> None:
        evicted = exclude and backend != "slurm"
        # Slurm releases a job it held after a failed launch (no copy), unless its config changes.
        released = not changes and _is_held(ev, j, backend)
        if (_is_running(ev, j) or _is_queued(ev, j)) and not evicted and not released:
            # Two copies of one training run would fight over its checkpoints. (On Kubernetes
            # and Ray, draining the node evicts the pods and the resubmit replaces the job.)
            calls.append(ToolCall(tool="cancel_job", args={"job": j, "reason": why}))
        args: dict[str, Any] = {"job": j, "reason": why}
        if changes:
            args["changes"] = changes
        if exclude:
            args["exclude_nodes"] = exclude
        calls.append(ToolCall(tool="resubmit", args=args))

    def escalate(team: str) -> None:
        calls.append(ToolCall(tool="escalate", args={
            "team": team, "summary": summary, "severity": "high" if team != "user" else "medium",
            "evidence": evidence[:8], "reason": why,
        }))

    if remedy_kind == "resubmit" and job:
        resubmit(job, carried)
        attempts = len(ev.jobs[job].attempts) if job in ev.jobs else 0
        if remedy.notify_after_attempts and attempts + 1 >= remedy.notify_after_attempts:
            owner = ev.jobs[job].user or "owner"
            calls.append(ToolCall(tool="notify", args={
                "to": owner, "reason": why,
                "message": f"Job {job} failed the same way {attempts + 1} times ({match.entry.label.title}). "
                + (remedy.advice or ""),
            }))
    elif remedy_kind == "resubmit_with_changes" and job:
        changes, _ = compute_changes(remedy, ev, job, captured_values(match), backend)
        if changes:
            resubmit(job, changes)
        else:
            # The same job again fails the same way: a person gets the evidence instead.
            escalate(fallback_team(match.entry.label.team))
    elif remedy_kind == "exclude_node" and root_node:
        node_row = ev.nodes.get(root_node) or {}
        if remedy.drain and str(node_row.get("state", "")).lower() not in {"drained", "drain", "cordoned"}:
            calls.append(ToolCall(tool="node_drain", args={"node": root_node, "reason": why}))
        victims = [j for j in jobs if j in ev.jobs] or ([job] if job else [])
        victims += [v for v in _co_victims(ev, root_node) if v not in victims]
        for v in victims:
            # A job the node's failed launch left held in the queue is a victim too: it never ran.
            if ev.jobs.get(v) and (ev.jobs[v].failed or _is_running(ev, v) or _is_held(ev, v, backend)):
                resubmit(v, carried if v == job else None, exclude=[root_node])
        if remedy.page:
            escalate(remedy.escalate or match.entry.label.team or "hardware")
    elif remedy_kind in ESCALATION_TEAM:
        escalate(ESCALATION_TEAM[remedy_kind])
    elif remedy_kind == "wait" and job and job in ev.jobs:
        facts = ev.jobs[job]
        calls.append(ToolCall(tool="notify", args={
            "to": facts.user or "owner", "reason": why,
            "message": f"Job {job} is queued ({facts.reason or facts.state}); {remedy.advice or 'no action needed'}",
        }))
    elif remedy_kind == "preempt" and job:
        for victim in _elastic_victims(ev, job):
            calls.append(ToolCall(tool="cancel_job", args={"job": victim, "reason": why}))
    return calls


def _co_victims(ev: Evidence, node: str) -> list[str]:
    return ev.victims_of(node)


def _elastic_victims(ev: Evidence, pending_job: str) -> list[str]:
    """Elastic (preemptible) running jobs, largest first, until the pending job's GPUs are covered."""
    need = ev.jobs[pending_job].gpus if pending_job in ev.jobs else 0
    elastic = [
        f for j, f in ev.jobs.items()
        if j != pending_job and f.state.upper() in RUNNING_STATES and _elastic(ev.configs.get(j, {}))
    ]
    chosen, freed = [], 0
    for f in sorted(elastic, key=lambda f: -f.gpus):
        if need and freed >= need:
            break
        chosen.append(f.job)
        freed += f.gpus
    return chosen


def _elastic(config: dict[str, Any]) -> bool:
    if config.get("elastic") is True or config.get("preemptible") is True:
        return True
    return str(config.get("priority_class", "")).lower() in {"preemptible", "elastic", "spot", "best-effort"}
