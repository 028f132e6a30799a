"""When a playbook step is worth its calls, and the nodes some steps look at.

A step with `when:` names one of CONDITIONS: most incidents of its label never need the
call (a full cluster is just full), so it waits until the evidence seen so far says the
obvious reading may be wrong.
"""

from __future__ import annotations

import re
from typing import Callable

from crashcart.agent.policies.evidence import Evidence, RUNNING_STATES, call_key

# kube-scheduler's count of nodes that lack the GPUs the pod asks for.
_INSUFFICIENT_GPU = re.compile(r"\b(\d+) Insufficient nvidia\.com/gpu\b", re.I)
# A node in one of these states is out of service on purpose: no GPUs there is expected.
_OUT_OF_SERVICE = {"down", "drain", "drained", "draining", "cordoned", "not_ready", "notready"}


def gpu_holders(ev: Evidence) -> set[str]:
    """Nodes where a running job holds GPUs, as far as the jobs seen so far tell."""
    return {n for f in ev.jobs.values() if f.gpus and f.state.upper() in RUNNING_STATES for n in f.nodes}


def nodes_short_of_gpus(ev: Evidence) -> int:
    """The most nodes the scheduler said lack free GPUs for the focus jobs (0 when it never said)."""
    focus = {f"job:{j}" for j in ev.focus_jobs()}
    counts = [int(m.group(1)) for d in ev.docs if d.source == "events" and d.entity in focus
              for m in _INSUFFICIENT_GPU.finditer(d.text)]
    return max(counts, default=0)


def still_waiting(ev: Evidence) -> bool:
    """A focus job has not started: the trigger says it waits, or its state still does."""
    if ev.trigger.get("kind") == "job_pending":
        return True
    return any(ev.jobs[j].state.upper() == "PENDING" for j in ev.focus_jobs() if j in ev.jobs)


def gpus_unaccounted(ev: Evidence) -> bool:
    """The scheduler says more nodes lack free GPUs than running jobs hold GPUs on.

    Then some GPU nodes advertise fewer GPUs than they have (a device plugin that cannot load
    NVML, a driver upgraded under a loaded kernel module) and waiting never frees them. Until
    the cluster's jobs have been listed nobody knows who holds GPUs, so it does not hold yet;
    nor for a job that has started since (its old FailedScheduling events are history)."""
    if call_key("list_jobs", {}) not in ev.calls or not still_waiting(ev):
        return False
    return nodes_short_of_gpus(ev) > len(gpu_holders(ev))


def idle_gpu_nodes(ev: Evidence) -> list[str]:
    """GPU nodes the node listing shows in service while no running job holds GPUs on them."""
    busy = gpu_holders(ev)
    return [
        name for name, row in ev.nodes.items()
        if row.get("gpus") and name not in busy
        and str(row.get("state", "")).lower().replace("-", "_") not in _OUT_OF_SERVICE
    ]


# Two peers tell what a partition normally runs (its driver, its clock); more only cost calls.
PEERS_TO_COMPARE = 2


def partition_peers(ev: Evidence) -> list[str]:
    """In-service nodes of the focus jobs' partitions (their pool) that the jobs did not run on:
    what the node at fault is compared with. Busy nodes first, since they prove they work."""
    mine = set(ev.relevant_nodes())
    parts = {ev.jobs[j].partition for j in ev.focus_jobs() if j in ev.jobs and ev.jobs[j].partition}
    busy = gpu_holders(ev)
    peers = [
        name for name, row in ev.nodes.items()
        if name not in mine and row.get("gpus") and (not parts or row.get("partition") in parts)
        and str(row.get("state", "")).lower().replace("-", "_") not in _OUT_OF_SERVICE
    ]
    return sorted(peers, key=lambda n: n not in busy)[:PEERS_TO_COMPARE]


def part_of_a_workload(ev: Evidence) -> bool:
    """A focus job is one pod of a multi-pod workload (its id is the workload's name plus a
    suffix): its peers' pods, and the nodes they ran on, are part of the incident."""
    return any((f := ev.jobs.get(j)) and f.name and f.name != j and j.startswith(f"{f.name}-")
               for j in ev.focus_jobs())


def selector_needs_more_than_a_typo(ev: Evidence) -> bool:
    from crashcart.agent.policies.computed import selector_needs_more_than_a_typo as needs

    return needs(ev)


# Ray's own accounting of the cluster as a log prints it: "384/384 CPU" (Ray Data's progress, or
# `ray status` echoed).
_RAY_TOTALS = re.compile(r"\b[\d.]+/[\d.]+ CPU\b")


def cluster_totals_unseen(ev: Evidence) -> bool:
    """No focus job's log states the cluster's CPUs in use against its total, and `ray status`
    was not read: what a CPU stage may hold cannot be computed yet."""
    if ev.limits.get("autoscaler"):
        return False
    focus = {f"job:{j}" for j in ev.focus_jobs()}
    return not any(d.source == "log" and d.entity in focus and _RAY_TOTALS.search(d.text) for d in ev.docs)


CONDITIONS: dict[str, Callable[[Evidence], bool]] = {
    "gpus_unaccounted": gpus_unaccounted,
    "selector_needs_more_than_a_typo": selector_needs_more_than_a_typo,
    "part_of_a_workload": part_of_a_workload,
    "cluster_totals_unseen": cluster_totals_unseen,
}
