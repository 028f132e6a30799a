"""Bound the per-node fan-out of an investigation, and stop it once the evidence settles.

A job on twelve nodes invites three probes per node (kernel log, nvidia-smi, GPU history): 36
calls where an engineer makes a dozen. The kernel log is read everywhere, since it is what
names a suspect, except that the hosts the job's own error lines name are read first, and the
others only when those do not settle it. The probes (GPU telemetry, the node's state,
description and events) then go to the suspects only. While kernel logs are still outstanding
the probes, and the reads about the job itself, wait a round, so that a node the kernel log
already named is the only one probed. When no node is suspected after the kernel logs, the
probes sweep every node (a hot or throttled GPU prints nothing to dmesg). This holds for failed
jobs, whose cause a kernel log usually names; a slow or stalled job has its GPUs sampled
everywhere at once, and their history read where the samples point.

Once a cause (not a symptom) leads, the symptoms' steps stop, and causes ranked below it read
only the leader's own node (`worth_taking`).
"""

from __future__ import annotations

import re
from typing import Iterable

from crashcart.agent.policies.evidence import SUSPICIOUS, Evidence, call_key
from crashcart.agent.policies.matching import LabelMatch
from crashcart.playbooks._loader import LabelEntry
from crashcart.tools._spec import ToolCall

# Per-node probes: worth a call on a suspect, rarely on every node. The kernel log is not one
# (it names the suspects), nor a node's job list (it finds the other victims).
PROBES = {"nvidia_smi_query", "gpu_metrics", "sinfo", "kubectl_get_nodes", "ray_list_nodes", "kubectl_describe",
          "kubectl_events"}


LISTINGS = {"sinfo", "kubectl_get_nodes", "ray_list_nodes"}
# Reads about the job itself (its history, settings, progress, disks, events): a kernel log that
# names a node fault makes them moot, so while kernel logs are outstanding they wait a round.
WAIT_FOR_KERNEL_LOGS = {"job_history", "job_config", "training_progress", "disk_usage", "kubectl_events"}


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


def worth_taking(match: LabelMatch, candidates: list[LabelMatch], calls: list[ToolCall]) -> list[ToolCall]:
    """The steps of one candidate label still worth taking, once the candidates are ranked.

    A symptom (an NCCL timeout, a dead actor) sends the investigation looking for its cause;
    once a cause leads, that search is over and the symptoms' steps are not taken. A cause
    ranked below the leader cannot win any more, and what it would read about the job or the
    cluster cannot unseat the leader; what it reads on the leader's own node can still show a
    more specific fault there (a GPU's history: the hot GPU behind a recurring fault), so those
    steps stay. Labels of the leader's own priority can still overtake it and keep every step."""
    leader = candidates[0].entry.label
    if leader.symptom or match is candidates[0]:
        return calls
    if match.entry.label.symptom:
        return []
    if match.entry.label.priority >= leader.priority:
        return calls
    nodes = {e[5:] for e in candidates[0].entities("node")} if leader.root_cause == "node" else set()
    return [c for c in calls if target_node(c) in nodes]


def target_node(call: ToolCall) -> str | None:
    """The node a call looks at, if it looks at one."""
    return probed_node(call) or (call.args.get("node") if call.tool not in PROBES else None)


def bound(calls: list[ToolCall], ev: Evidence, candidates: list[LabelMatch],
          kb: Iterable[LabelEntry] = ()) -> list[ToolCall]:
    """The calls worth making this round: the kernel logs of the nodes the job's errors name go
    first; probes of unsuspected nodes wait for the kernel logs, then go only to the suspects when
    there are any; one node listing serves several nodes."""
    first = kernel_logs_first(ev, calls, candidates, kb)
    if first is not None:
        calls = [c for c in calls if c.tool != "kernel_log" or c.args.get("node") in first]
    return one_listing(_bound(calls, ev, candidates), ev)


# The address an EC2-style host name stands for (ip-10-1-8-22 is 10.1.8.22): Ray prefixes a
# worker's lines with `ip=10.1.8.22`, NCCL with the host name.
_EC2_NAME = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\.|$)")


def nodes_named_in_errors(ev: Evidence) -> set[str]:
    """The job's nodes that its own error lines name, by host name or address."""
    relevant = ev.relevant_nodes()
    spellings = {n: {n} | ({".".join(m.groups())} if (m := _EC2_NAME.match(n)) else set()) for n in relevant}
    wanted = {re.compile(rf"(?<![\w.-]){re.escape(s)}(?![\w-]|\.\d)"): n for n, ss in spellings.items() for s in ss}
    focus = {f"job:{j}" for j in ev.focus_jobs()}
    found: set[str] = set()
    own_fault: set[str] = set()
    for doc in ev.docs:
        if doc.source != "log" or doc.entity not in focus:
            continue
        for line in doc.lines:
            if SUSPICIOUS.search(line):
                hosts = {n for pattern, n in wanted.items() if pattern.search(line)}
                found |= hosts
                if not _WAITED.search(line):
                    own_fault |= hosts
    # A collective that timed out is every waiting rank's symptom: the hosts whose own error is
    # something else (a CUDA error, a lost GPU) are read first when there are any.
    return own_fault or found


# The words of a rank that waited for another (a watchdog's or a collective's timeout), and the
# launcher's per-task summary that every task gets once one fails (srun's "task 0: Exited ...").
_WAITED = re.compile(r"(Watchdog caught collective operation timeout|timed? ?out|Timeout\(ms\)"
                     r"|srun: error: \S+: tasks? [\d,-]+: (Exited with exit code \d+|Killed)\s*$)", re.I)


def kernel_logs_first(ev: Evidence, calls: list[ToolCall], candidates: list[LabelMatch],
                      kb: Iterable[LabelEntry]) -> set[str] | None:
    """The nodes whose kernel logs go out now when the job's own errors name some of its nodes,
    or None for every node at once.

    A failed job's error lines often name the host that failed (NCCL's `host:pid:tid` prefix,
    Ray's `ip=`). Its kernel log is read first; the others wait. When it shows a fault of that
    node that a cause label leads with, the others are not read at all, unless the same error
    on more nodes would make a wider verdict (a switch, a driver roll-out): a label at least as
    strong as the leader that counts the error across nodes then needs the peers to decide scope."""
    relevant = ev.relevant_nodes()
    if len(relevant) < 3 or not any(c.tool == "kernel_log" and c.args.get("node") in relevant for c in calls):
        return None
    if not any(ev.jobs[j].failed for j in ev.focus_jobs() if j in ev.jobs):
        return None
    named = nodes_named_in_errors(ev)
    if not named or named >= set(relevant):
        return None
    if any(call_key("kernel_log", {"node": n}) not in ev.calls for n in named):
        return named
    return named if _settled_on(named, ev, candidates, kb) else None


def _settled_on(named: set[str], ev: Evidence, candidates: list[LabelMatch], kb: Iterable[LabelEntry]) -> bool:
    if not candidates:
        return False
    leader = candidates[0].entry.label
    at = {h.entity[5:] for h in candidates[0].hits if h.entity.startswith("node:")}
    if leader.symptom or leader.root_cause != "node" or not at or not at <= named:
        return False
    read = [d.text for d in ev.docs if d.source == "kernel_log"]
    for entry in kb:
        if entry.label.priority < leader.priority:
            continue
        for sig, pattern in zip(entry.label.signals, entry.patterns):
            if sig.where == "kernel_log" and (sig.min_count or 0) >= 2 and pattern and any(pattern.search(t) for t in read):
                return False
    return True


def one_listing(calls: list[ToolCall], ev: Evidence) -> list[ToolCall]:
    """Several nodes' rows of the same node listing in one round come from one unfiltered
    listing (`sinfo`, `kubectl get nodes`, `ray list nodes`): one call instead of one a node.
    Once that listing was read, it already holds every node's row."""
    per_node = [c for c in calls if c.tool in LISTINGS and set(c.args) == {"node"}]
    listed = {c.tool for c in per_node if call_key(c.tool, {}) in ev.calls}
    merged = {c.tool for c in per_node if sum(o.tool == c.tool for o in per_node) > 1} - listed
    out: list[ToolCall] = []
    for call in calls:
        if call.tool in listed | merged and call in per_node:
            if call.tool in merged and not any(o.tool == call.tool and not o.args for o in out):
                out.append(ToolCall(tool=call.tool, args={}))
            continue
        if not (call.tool in merged and not call.args and call in out):
            out.append(call)
    return out


# A slow job's nodes are sampled a few at a time, so that a hot or throttled GPU stops the search:
# the whole job is covered within this many rounds.
SAMPLING_ROUNDS = 4
# Throttle reasons a live sample shows that, by themselves, prove a GPU slow (not a busy GPU's
# power cap): the node's kernel log and GPU history add nothing the remedy needs.
_HARD_THROTTLE = re.compile(r"hw.?slowdown|thermal|power.?brake", re.I)


def _history_after_sample(calls: list[ToolCall], ev: Evidence, candidates: list[LabelMatch]) -> list[ToolCall]:
    """A slow or stalled job prints nothing to dmesg: its GPUs are sampled, a few nodes a round,
    until a sample names a suspect. Their history (`gpu_metrics`, the heavier read) and the
    kernel logs wait for those samples and then go to the nodes they name, or everywhere when they
    name none; a suspect whose live sample already shows a hardware slowdown needs neither."""
    relevant = ev.relevant_nodes()
    if len(relevant) <= 1:
        return calls
    if ev.trigger.get("kind") != "job_stalled":
        return _history_where_sampled(calls, ev, candidates)
    named = suspects(ev, candidates)
    unsampled = [n for n in relevant if call_key("nvidia_smi_query", {"node": n}) not in ev.calls]
    if candidates and _job_log_explains(candidates[0]):
        # The job's own log names why it stalled (its settings): no GPU is dragging it, so the
        # search for one ends with the samples already taken.
        return [c for c in calls if not (c.tool == "nvidia_smi_query" and c.args.get("node") in unsampled)]
    sampled = set(relevant) - set(unsampled)
    # The search stops at a suspect only beside a healthy sampled peer: when every node sampled so
    # far is slow, the cause may be wider than one node (a rack's power feed) and sampling goes on.
    settled = bool(named) and bool(sampled - named)
    batch = set() if settled else set(unsampled[:-(-len(relevant) // SAMPLING_ROUNDS)])
    sampling_left = bool(set(unsampled) - batch)
    logs_now = any(c.tool == "kernel_log" and c.args.get("node") in relevant for c in calls)
    out = []
    for c in calls:
        node = c.args.get("node")
        if node not in relevant:
            out.append(c)
        elif c.tool == "nvidia_smi_query":
            if node in batch or (not settled and len(relevant) <= 2):
                out.append(c)
        elif c.tool in {"gpu_metrics", "kernel_log"}:
            if settled and (node not in named or _proven_slow(ev, node)):
                continue
            if not settled and (sampling_left or batch):
                continue  # the samples still to come may name the node
            if c.tool == "gpu_metrics" and logs_now:
                continue  # the kernel logs read first may settle it; the history is the heavier read
            out.append(c)
        else:
            out.append(c)
    return out


def _job_log_explains(leader: LabelMatch) -> bool:
    """A cause in the job itself (not a symptom) that the job's own log states, beyond a bare
    missing progress (a hang alone says nothing of why)."""
    label = leader.entry.label
    # A label that rests on the missing progress itself (a hang) explains nothing: its log words
    # ("heartbeat", "stuck") only echo the stall, and the GPUs still have to say busy or idle.
    if label.symptom or label.root_cause != "job":
        return False
    if any(sig.where == "progress" and sig.required for sig in label.signals):
        return False
    return any(label.signals[h.signal].where == "log" for h in leader.hits)


def _history_where_sampled(calls: list[ToolCall], ev: Evidence, candidates: list[LabelMatch]) -> list[ToolCall]:
    """A running job that did not stall (a node's alert about it): the GPU history waits for the
    live samples and goes where they point; the kernel logs, which decide the scope, all go."""
    relevant = set(ev.relevant_nodes())
    sampling = any(c.tool == "nvidia_smi_query" and c.args.get("node") in relevant for c in calls)
    named = suspects(ev, candidates)
    return [c for c in calls if not (c.tool == "gpu_metrics" and c.args.get("node") in relevant
                                     and c.args["node"] not in named and (sampling or named))]


def _proven_slow(ev: Evidence, node: str) -> bool:
    """The node's latest live samples show a GPU held down by the hardware (thermal, slowdown, brake)."""
    return any(_HARD_THROTTLE.search(r) for g in ev.telemetry.get(node, []) for r in g.throttle_reasons)


def spans_nodes(match: LabelMatch) -> bool:
    """A cause, not a symptom, that blames the cluster on evidence from two nodes or more."""
    label = match.entry.label
    return label.root_cause == "cluster" and not label.symptom and len(match.entities("node")) >= 2


def _bound(calls: list[ToolCall], ev: Evidence, candidates: list[LabelMatch]) -> list[ToolCall]:
    relevant = set(ev.relevant_nodes())
    # Listing the namespace finds a workload's other pods, and with them more nodes to weigh.
    widening = any(c.tool == "list_jobs" and c.args.get("partition") for c in calls)
    if not any(ev.jobs[j].failed for j in ev.focus_jobs() if j in ev.jobs):
        return _history_after_sample(calls, ev, candidates)
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
        if logs_outstanding and call.tool in WAIT_FOR_KERNEL_LOGS and node is None:
            continue
        if logs_outstanding and call.tool == "list_jobs" and call.args.get("node"):
            continue  # a suspect's other victims matter once the kernel logs say the fault is that node's alone
        if call.tool in LISTINGS and node and asked(call.tool, {}):
            continue  # the listing of every node already has this one
        if call.tool == "kubectl_get_nodes" and node and asked("kubectl_describe", {"kind": "node", "name": node}):
            continue  # `kubectl describe node` shows the same state, labels and taints, and more
        if (call.tool == "kubectl_describe" and node and listed_all
                and asked("kubectl_events", {"object": f"node/{node}"})):
            continue  # the node listing and the node's events already hold what describe would add
        kept.append(call)
    return kept
