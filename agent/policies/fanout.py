"""Bound the per-node fan-out of an investigation.

A job on twelve nodes invites three probes per node (kernel log, nvidia-smi, GPU history): 36
calls where an engineer makes a dozen. The kernel log is read everywhere, since it is what
names a suspect; the GPU probes then go to the suspects only. While kernel logs are still
outstanding the probes wait a round, so that a node the kernel log already named is the only
one probed. When no node is suspected after the kernel logs, the probes sweep every node (a hot
or throttled GPU prints nothing to dmesg). This holds for failed jobs, whose cause a kernel log
usually names; a slow or stalled job is probed everywhere at once.
"""

from __future__ import annotations

from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.matching import LabelMatch
from crashcart.tools._spec import ToolCall

# Per-node GPU probes: worth a call on a suspect, rarely on every node.
GPU_PROBES = {"nvidia_smi_query", "gpu_metrics"}


def suspects(ev: Evidence, candidates: list[LabelMatch]) -> set[str]:
    """Nodes the evidence already points at: those any candidate label's hits name among the
    incident's nodes. An alert's node is not one: alerts often name rank 0, not the culprit."""
    relevant = set(ev.relevant_nodes())
    found: set[str] = set()
    for match in candidates:
        found |= {e[5:] for e in match.entities("node") if e[5:] in relevant}
    return found


def bound(calls: list[ToolCall], ev: Evidence, candidates: list[LabelMatch]) -> list[ToolCall]:
    """The calls worth making this round: GPU probes of unsuspected nodes wait for the kernel
    logs, then go only where a suspect is not already known."""
    relevant = set(ev.relevant_nodes())
    if len(relevant) <= 2 or not any(ev.jobs[j].failed for j in ev.focus_jobs() if j in ev.jobs):
        # Nothing to save on one or two nodes. A slow or stalled job prints nothing to dmesg:
        # its GPUs' telemetry is the first evidence, on every node.
        return calls
    named = suspects(ev, candidates)
    logs_outstanding = any(c.tool == "kernel_log" and c.args.get("node") in relevant for c in calls)
    kept = []
    for call in calls:
        node = call.args.get("node")
        if call.tool in GPU_PROBES and node in relevant and node not in named and (logs_outstanding or named):
            continue
        kept.append(call)
    return kept
