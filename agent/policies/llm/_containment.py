"""A model's plan, checked before the guard sees it: the guard's own rules still apply after.

A model may be wrong or hostile, so its writes are held to what the investigation showed:
- a write names an entity the investigation observed (the trigger's job and node, jobs and
  nodes that tool results returned); anything else is denied;
- a resubmit changes only config keys the playbooks know how to change, keys listed in
  limits.yaml (globs), or what the playbooks' own plan for the job sets, to the same value;
  `env.LD_PRELOAD` or a new entrypoint is denied;
- a write follows from the model's own diagnosis (a drain names the node it blames);
- where the playbooks have a verdict on the same evidence and the write contradicts it
  (resubmitting what they call non-retriable, draining where they see a fabric-wide event),
  it needs a person's approval.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from crashcart.agent.guard import Review
from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.remedy import ESCALATION_TEAM
from crashcart.evals.matching import flatten
from crashcart.playbooks import KnowledgeBase
from crashcart.tools._spec import ToolCall
from crashcart.tools.yamlio import read_yaml_file

LIMITS_PATH = Path(__file__).with_name("limits.yaml")
CHANGES_JOBS = {"resubmit", "resubmit_with_changes", "exclude_node"}
HEALTHY_LABELS = {"healthy"}
NO_VERDICT = {"unrecognized"}


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    resubmit_keys: tuple[str, ...] = ()
    """Config keys (globs) a model's resubmit may change beyond those the playbooks change."""


@lru_cache(maxsize=1)
def load_limits() -> Limits:
    return Limits.model_validate(read_yaml_file(LIMITS_PATH) or {})


def playbook_keys(kb: KnowledgeBase) -> set[str]:
    """The config keys the playbooks' remedies change: a remedy names a setting (every key jobs
    use for it, from playbooks/settings/config_keys.yaml) or one literal key (an env var)."""
    from crashcart.agent.policies.config_keys import load_key_table

    table = load_key_table()
    keys: set[str] = set()
    for entry in kb:
        for name in entry.label.remedy.changes:
            setting = table.settings.get(name)
            keys |= {k.key for k in setting.keys} if setting else {name}
            if setting and setting.add:
                keys.add(setting.add)
    return keys


def observed_entities(ev: Evidence) -> tuple[set[str], set[str]]:
    """(jobs, nodes) the trigger named or tool results returned."""
    jobs = set(ev.jobs) | ({str(ev.trigger["job"])} if ev.trigger.get("job") else set())
    nodes = set(ev.nodes) | ({str(ev.trigger["node"])} if ev.trigger.get("node") else set())
    for facts in ev.jobs.values():
        nodes.update(facts.nodes)
    for doc in ev.docs:
        kind, _, name = doc.entity.partition(":")
        (jobs if kind == "job" else nodes if kind == "node" else set()).add(name)
    return jobs, nodes


def _deny(why: str, rule: str) -> Review:
    return Review("deny", why, f"review:{rule}")


def _allowed_key(path: str, allowed_keys: set[str]) -> bool:
    """A key a playbook may change, wherever the job nests it (`deepspeed.` before DeepSpeed's
    own key, a Ray job's runtime_env.env_vars for an env var)."""
    from crashcart.agent.policies.config_keys import load_key_table

    table = load_key_table()
    return path in allowed_keys or any(table.answers(path, key) for key in allowed_keys)


def review_write(call: ToolCall, diagnosis: dict[str, Any], ev: Evidence, allowed_keys: set[str],
                 playbook: tuple[dict[str, Any], list[ToolCall]] | None) -> Review | None:
    tool, args = call.tool, call.args
    if tool in {"escalate", "notify"}:
        # They only tell people, but a page the playbooks would not send is still a person's call.
        if playbook is not None and _in_plan(call, playbook[1]):
            return None
        off = _follows(tool, args, diagnosis)
        return _deny(off, "plan") if off else _contradiction(call, playbook)
    jobs, nodes = observed_entities(ev)
    job, node = args.get("job"), args.get("node")
    if job is not None and str(job) not in jobs:
        return _deny(f"{tool} names job {job}, which the investigation never observed.", "observed")
    if node is not None and str(node) not in nodes:
        return _deny(f"{tool} names node {node}, which the investigation never observed.", "observed")
    unseen = [n for n in args.get("exclude_nodes") or [] if str(n) not in nodes]
    if unseen:
        return _deny(f"resubmit excludes {', '.join(map(str, unseen))}, never observed.", "observed")
    if tool == "resubmit":
        # The playbooks' own plan for this job on this evidence (a computed fix, such as a
        # corrected nodeSelector) vouches for exactly the values it sets.
        planned = {k: v for p in (playbook[1] if playbook else []) if p.tool == "resubmit"
                   and str(p.args.get("job")) == str(job) for k, v in flatten(p.args.get("changes") or {}).items()}
        bad = [k for k, v in flatten(args.get("changes") or {}).items()
               if not _allowed_key(k, allowed_keys)
               and not any(fnmatchcase(k, g) for g in load_limits().resubmit_keys)
               and not (k in planned and planned[k] == v)]
        if bad:
            return _deny(f"resubmit would change {', '.join(sorted(bad))}: not keys crashcart may change.",
                         "resubmit_keys")
    if playbook is not None and _in_plan(call, playbook[1]):
        return None  # the runbook plans the same write on the same evidence
    consistent = _follows(tool, args, diagnosis, ev)
    if consistent is not None:
        return _deny(consistent, "plan")
    return _contradiction(call, playbook)


def _entity(call: ToolCall) -> str | None:
    return call.args.get("node") or call.args.get("job") or call.args.get("team") or call.args.get("to")


def _in_plan(call: ToolCall, plan: list[ToolCall]) -> bool:
    return any(p.tool == call.tool and _entity(p) == _entity(call) for p in plan)


def _follows(tool: str, args: dict[str, Any], d: dict[str, Any], ev: Evidence | None = None) -> str | None:
    """Why this write does not follow from the model's own diagnosis, or None."""
    remedy, root = d.get("remedy"), d.get("root_cause") or ""
    if tool in {"node_drain"}:
        if remedy != "exclude_node" or root != f"node:{args.get('node')}":
            return f"the diagnosis ({remedy}, root cause {root or 'none'}) does not blame node {args.get('node')}."
    if tool == "resubmit" and remedy not in CHANGES_JOBS:
        return f"the diagnosis's remedy is {remedy}, not a resubmit."
    if tool == "resubmit" and ev is not None:
        own = {str(ev.trigger.get("job"))} | ({root[4:]} if root.startswith("job:") else set())
        if str(args.get("job")) not in own:
            return f"job {args.get('job')} is neither the trigger's job nor the root cause; it is not the model's to restart."
    if tool == "escalate":
        teams = {d.get("team"), ESCALATION_TEAM.get(remedy or ""), "hardware" if remedy == "exclude_node" else None}
        if args.get("team") not in teams:
            return f"the diagnosis ({remedy}, team {d.get('team') or 'none'}) does not point at team {args.get('team')}."
    if tool == "cancel_job" and remedy not in {"preempt", "wait"}:
        return f"the diagnosis's remedy is {remedy}; cancelling a job does not follow from it."
    return None


def _contradiction(call: ToolCall, playbook: tuple[dict[str, Any], list[ToolCall]] | None) -> Review | None:
    if playbook is None:
        return None
    verdict, plan = playbook
    label = verdict.get("label")
    entity = _entity(call)
    if label in NO_VERDICT:
        if call.tool not in {"node_drain", "cancel_job"}:
            return None
        # Taking capacity away on a model's word alone is a person's call.
        return Review("needs_approval", f"The model's {call.tool} {entity}: the playbooks find no cause on this "
                      "evidence that backs it.", "review:unbacked")
    why = (f"the playbooks read this evidence as {label} ({verdict.get('remedy')}, root cause "
           f"{verdict.get('root_cause') or 'none'}"
           + (", not retriable" if call.tool == "resubmit" and not verdict.get("retriable") else "")
           + f") and plan no {call.tool} of {entity}.")
    return Review("needs_approval", f"The model's {call.tool} {entity} contradicts the playbooks: {why}",
                  "review:contradicts_playbook")
