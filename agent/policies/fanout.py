"""Bound the per-node fan-out of an investigation.

A job on twelve nodes invites three probes per node (kernel log, nvidia-smi, GPU history): 36
calls where an engineer makes a dozen. The kernel log is read everywhere, since it is what
names a suspect; the probes (GPU telemetry, the node's state, description and events) then go to
the suspects only. While kernel logs are still
outstanding the probes wait a round, so that a node the kernel log already named is the only
one probed. When no node is suspected after the kernel logs, the probes sweep every node (a hot
or throttled GPU prints nothing to dmesg). This holds for failed jobs, whose cause a kernel log
usually names; a slow or stalled job is probed everywhere at once.
"""

from __future__ import annotations

from crashcart.agent.policies.evidence import Evidence, call_key
from crashcart.agent.policies.matching import LabelMatch
from crashcart.tools._spec import ToolCall

# Per-node probes: worth a call on a suspect, rarely on every node. The kernel log is not one
# (it names the suspects), nor a node's job list (it finds the other victims).
PROBES = {"nvidia_smi_query", "gpu_metrics", "sinfo", "kubectl_get_nodes", "ray_list_nodes", "kubectl_describe",
          "kubectl_events"}


LISTINGS = {"sinfo", "kubectl_get_nodes", "ray_list_nodes"}


def probed_node(call: ToolCall) -> str | None:
    """The node a per-node probe looks at, or None for a call that is not one."""
    if call.tool not in PROBES:
        return None
    args = call.args
    if call.tool == "kubectl_describe":
        return args.get("name") if args.get("kind") == "node" else None
    if call.tool == "kubectl_events":
        obj = str(args.get("object") or "")
        return obj[5:] if obj.startswith("node/") else None
    return args.get("node")


def suspects(ev: Evidence, candidates: list[LabelMatch]) -> set[str]:
    """Nodes the evidence already points at: those any candidate label's hits name among the
    incident's nodes. An alert's node is not one: alerts often name rank 0, not the culprit."""
    relevant = set(ev.relevant_nodes())
    found: set[str] = set()
    for match in candidates:
        found |= {e[5:] for e in match.entities("node") if e[5:] in relevant}
    return found


def spans_nodes(match: LabelMatch) -> bool:
    """A cause, not a symptom, that blames the cluster on evidence from two nodes or more."""
    label = match.entry.label
    return label.root_cause == "cluster" and not label.symptom and len(match.entities("node")) >= 2


def bound(calls: list[ToolCall], ev: Evidence, candidates: list[LabelMatch]) -> list[ToolCall]:
    """The calls worth making this round: probes of unsuspected nodes wait for the kernel logs,
    then go only to the suspects when there are any."""
    relevant = set(ev.relevant_nodes())
    # Listing the namespace finds a workload's other pods, and with them more nodes to weigh.
    widening = any(c.tool == "list_jobs" and c.args.get("partition") for c in calls)
    if not any(ev.jobs[j].failed for j in ev.focus_jobs() if j in ev.jobs):
        return calls  # a slow or stalled job prints nothing to dmesg: telemetry first, everywhere
    if len(relevant) <= 1 and not widening:
        return calls  # nothing to save on one node
    if candidates and spans_nodes(candidates[0]):
        # The leading cause is one event across several nodes at once (a switch, a rack, a fabric):
        # probing each of those nodes in turn cannot name one of them, and no node is drained.
        return [c for c in calls if probed_node(c) is None]
    named = suspects(ev, candidates)
    logs_outstanding = widening or any(c.tool == "kernel_log" and c.args.get("node") in relevant for c in calls)
    def asked(tool: str, args: dict) -> bool:
        return call_key(tool, args) in ev.calls or any(c.tool == tool and c.args == args for c in calls)

    listed_all = asked("kubectl_get_nodes", {})
    kept = []
    for call in calls:
        node = probed_node(call)
        if node in relevant and node not in named and (logs_outstanding or named):
            continue
        if call.tool in LISTINGS and node and asked(call.tool, {}):
            continue  # the listing of every node already has this one
        if call.tool == "kubectl_get_nodes" and node and asked("kubectl_describe", {"kind": "node", "name": node}):
            continue  # `kubectl describe node` shows the same state, labels and taints, and more
        if (call.tool == "kubectl_describe" and node and listed_all
                and asked("kubectl_events", {"object": f"node/{node}"})):
            continue  # the node listing and the node's events already hold what describe would add
        kept.append(call)
    return kept
