"""Which jobs and nodes an investigation has observed, and which ones a write names.

Contract 4: a write names an entity the investigation has observed (the trigger's job and
node, jobs and nodes seen in tool results); anything else is denied, for any policy. A name a
model or a chat message made up, or read in a log line, is not something the cluster showed.
"""

from __future__ import annotations

from typing import Any

from crashcart.tools import ToolCall

Entity = tuple[str, str]
"""("job", "48213") or ("node", "gpu-b07")."""

# Fields of tool results that hold a job id or node names (tools/catalog.py's outputs).
_JOB_KEYS = {"job", "new_job"}
_JOB_LIST_KEYS = {"depends_on"}
_NODE_KEYS = {"node"}
_NODE_LIST_KEYS = {"nodes"}


def entities_named(call: ToolCall) -> list[Entity]:
    """What a write action would touch, in the order it names them."""
    args = call.args
    named: list[Entity] = []
    if isinstance(args.get("job"), str):
        named.append(("job", args["job"]))
    if isinstance(args.get("node"), str):
        named.append(("node", args["node"]))
    excluded = args.get("exclude_nodes")
    if isinstance(excluded, list):
        named += [("node", str(node)) for node in excluded]
    return list(dict.fromkeys(named))


def trigger_entities(trigger: dict[str, Any] | None) -> set[Entity]:
    """The trigger's job and node (never anything in its free text)."""
    trigger = trigger or {}
    return {(kind, str(trigger[kind])) for kind in ("job", "node") if trigger.get(kind)}


def entities_in_result(call: ToolCall, result: Any) -> tuple[set[str], set[str]]:
    """(jobs, nodes) a successful read asked about or returned: the backend answered for them."""
    jobs: set[str] = set()
    nodes: set[str] = set()
    _walk({k: v for k, v in call.args.items() if k in _JOB_KEYS | _NODE_KEYS}, jobs, nodes)
    _walk(result, jobs, nodes)
    return jobs, nodes


def _walk(value: Any, jobs: set[str], nodes: set[str]) -> None:
    if isinstance(value, list):
        for item in value:
            _walk(item, jobs, nodes)
        return
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        if isinstance(item, str) and item:
            if key in _JOB_KEYS:
                jobs.add(item)
            elif key in _NODE_KEYS:
                nodes.add(item)
        elif isinstance(item, list) and key in _JOB_LIST_KEYS | _NODE_LIST_KEYS:
            target = jobs if key in _JOB_LIST_KEYS else nodes
            target.update(str(x) for x in item if isinstance(x, (str, int)) and str(x))
        else:
            _walk(item, jobs, nodes)
