"""Scope a shared-storage error to one node when the jobs say so.

A file system (NFS, Lustre, a FUSE bucket mount) serves every node, so its errors read like an
outage. But one client can break alone: a stale NFS mount the failover runbook never refreshed,
a FUSE daemon that died on one host. The tell is in the jobs, not in the error text: every job
that shows the error ran on one common node, while jobs elsewhere used the storage fine over the
same hours. Then draining that node and rerunning elsewhere is the fix, not a storage page.

Kernel logs alone do not decide the scope: a server hiccup prints "not responding" on every
client, including those that recovered, and a single node's message can be a server only it
mounts. What does count is the client itself dying in one node's kernel log (its FUSE daemon
killed): then one victim is enough, as long as jobs elsewhere used the storage fine. So does a
client that lost its server on one node of a multi-node job, with tasks there hung inside it,
while the job's other nodes, reading the same share, said nothing of it and it never recovered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from crashcart.agent.policies.evidence import RUNNING_STATES, Evidence, JobFacts
from crashcart.agent.policies.matching import LabelMatch

# Where a job shows an error in its own output; kernel logs and scheduler words are not sightings.
JOB_TEXT_SOURCES = {"log", "events", "describe", "status_message"}
DONE_STATES = {"COMPLETED", "SUCCEEDED"}


@dataclass
class NodeScope:
    node: str
    sightings: list[str]
    """The jobs whose own output shows the error; every one of them ran on `node`."""
    healthy: list[str]
    """Jobs on other nodes that ran fine while the error was being seen."""

    def lines(self, ev: Evidence) -> list[str]:
        """Evidence for the report: why the node, not the storage."""
        shown = ", ".join(self.sightings)
        fine = ", ".join(f"{j} on {'+'.join(ev.jobs[j].nodes)} {ev.jobs[j].state}" for j in self.healthy[:3])
        return [f"every job with this error ran on {self.node} ({shown}); jobs elsewhere ran fine: {fine}"]


def error_jobs(match: LabelMatch) -> list[str]:
    """Jobs whose own output matched one of the label's signals, in the order first seen."""
    signals = match.entry.label.signals
    jobs = [h.entity[4:] for h in match.hits
            if h.entity.startswith("job:") and signals[h.signal].where in JOB_TEXT_SOURCES]
    return list(dict.fromkeys(jobs))


def one_node(match: LabelMatch, ev: Evidence) -> NodeScope | None:
    """The node a label's error is confined to, when its playbook allows the scoping and the
    evidence holds: enough jobs show it, they share exactly one node, that node is in the
    incident's path, and some job on other nodes ran fine meanwhile."""
    scope = match.entry.label.one_node
    if scope is None:
        return None
    jobs = error_jobs(match)
    local = _node_local(scope.node_evidence, jobs, ev) or _client_alone(scope.client_lost, scope.client_hung, ev)
    if local:
        return local
    if len(jobs) < scope.min_jobs:
        return None
    facts = [ev.jobs.get(j) for j in jobs]
    if any(f is None or not f.nodes for f in facts):
        return None  # a sighting whose nodes are unknown could be anywhere
    common = set.intersection(*(set(f.nodes) for f in facts))
    if len(common) != 1:
        return None
    node = common.pop()
    if node not in ev.relevant_nodes():
        return None  # draining it would not help the job asked about
    healthy = healthy_elsewhere(ev, node, facts)
    return NodeScope(node, jobs, healthy) if healthy else None


def _node_local(pattern: str | None, jobs: list[str], ev: Evidence) -> NodeScope | None:
    """The client died on one node, in that node's own kernel log: the jobs that saw the error
    there are its victims, provided jobs on other nodes used the storage fine meanwhile."""
    if not pattern or not jobs:
        return None
    regex = re.compile(pattern, re.I | re.M)
    nodes = [n for n in ev.relevant_nodes()
             if any(d.source == "kernel_log" and d.entity == f"node:{n}" and regex.search(d.text) for d in ev.docs)]
    if len(nodes) != 1:
        return None  # on several nodes at once it is the service, not one client
    node = nodes[0]
    victims = [ev.jobs[j] for j in jobs if j in ev.jobs and node in ev.jobs[j].nodes]
    if not victims:
        return None
    healthy = healthy_elsewhere(ev, node, victims)
    return NodeScope(node, [v.job for v in victims], healthy) if healthy else None


def _client_alone(pattern: str | None, hung: str | None, ev: Evidence) -> NodeScope | None:
    """One node's client lost a server, with its callers wedged inside it, that the failed job's
    other nodes, whose kernel logs were read and say nothing of it, kept serving: the job read the
    same share on all of them."""
    if not pattern or not hung:
        return None
    regex = re.compile(pattern, re.I | re.M)
    read = {d.entity[5:]: d.text for d in ev.docs if d.source == "kernel_log" and d.entity.startswith("node:")}
    lost: dict[str, set[str]] = {}
    for node, text in read.items():
        servers = {m["server"] for m in regex.finditer(text)}
        # The kernel says "nfs: server X OK" once the server answers again: a hiccup, not a loss.
        still = {s for s in servers if not _answered_again(s, text)}
        if still:
            lost[node] = still
    if len(lost) != 1:
        return None  # on several nodes it is the server; on none there is nothing to scope
    node, servers = next(iter(lost.items()))
    if not re.search(hung, read[node], re.I | re.M):
        return None  # "not responding" alone is a hiccup every client prints
    if any(s in text for other, text in read.items() if other != node for s in servers):
        return None  # another client saw the same server falter
    victims = [f for j in ev.focus_jobs() if (f := ev.jobs.get(j)) and f.failed and node in f.nodes
               and sum(1 for n in f.nodes if n in read) >= 2]
    if not victims:
        return None
    healthy = healthy_elsewhere(ev, node, victims)
    return NodeScope(node, [v.job for v in victims], healthy) if healthy else None


def _answered_again(server: str, text: str) -> bool:
    """The node's last word on the server is that it answers again ("nfs: server X OK")."""
    words = re.findall(rf"nfs: server {re.escape(server)} (not responding|OK)\b", text, re.I)
    return bool(words) and words[-1].upper() == "OK"


def healthy_elsewhere(ev: Evidence, node: str, victims: list[JobFacts]) -> list[str]:
    """Jobs of the victims' partitions (namespaces: the same storage, as near as the scheduler
    tells) that ran off `node` without failing while the victims were failing. Without one, the
    errors may be an outage that only happened to hit one node's jobs."""
    start, end = _window(ev, victims)
    partitions = {f.partition for f in victims if f.partition}
    names = {f.job for f in victims}
    fine = []
    for f in ev.jobs.values():
        if f.job in names or not f.nodes or node in f.nodes or f.partition not in partitions:
            continue
        state = f.state.upper().split()[0] if f.state else ""
        if state not in RUNNING_STATES | DONE_STATES or f.start_time is None:
            continue
        ran_until = f.end_time or ev.now
        if (end is None or f.start_time <= end) and (start is None or ran_until is None or ran_until >= start):
            fine.append(f.job)
    return fine


def _window(ev: Evidence, victims: list[JobFacts]) -> tuple[datetime | None, datetime | None]:
    starts = [f.start_time for f in victims if f.start_time]
    ends = [f.end_time or ev.now for f in victims]
    ends = [e for e in ends if e]
    return (min(starts) if starts else None), (max(ends) if ends else None)
