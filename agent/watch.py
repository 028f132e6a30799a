"""`crashcart watch`: the on-call loop.

Each poll asks the backend only for what changed since the last one, opens one incident per
root cause (five jobs killed by one crashed node are one incident), and runs the agent on
it. Everything is in the store before anything runs: a failure seen is journaled with its
incident in one transaction, the incident resumes from its checkpoint after a restart (kill
-9 included), and an action already journaled as executed is never run again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from crashcart.agent.graph import Deps
from crashcart.agent.runner import resume_unfinished, start_incident
from crashcart.tools import ToolError
from crashcart.tools.backends.base import ClusterChanges

UNFINISHED = ("open", "detected", "investigating", "diagnosed")


@dataclass
class WatchSettings:
    interval_s: float = 60.0
    stall_minutes: float = 45.0
    """A running job with no new step or log line for this long is stalled."""
    group_minutes: float = 10.0
    """Failures on one node within this window are one incident."""
    lookback_minutes: float = 60.0
    """How far back the very first poll looks."""


@dataclass
class Detection:
    key: str
    """What makes this failure this failure (a job and how it ended, a stall, a node state)."""
    trigger: dict[str, Any]
    also: list[str] = field(default_factory=list)
    """Keys of the other failures this incident covers."""


def detect(changes: ClusterChanges, settings: WatchSettings) -> list[Detection]:
    """One detection per root cause, from what changed."""
    out: list[Detection] = []
    node_keys = {n.node: f"node:{n.node}:{n.state}:{n.reason}" for n in changes.nodes_down}
    down = set(node_keys)
    by_node: dict[str, list] = {}
    for job in changes.failed:
        shared = [n for n in job.nodes if n in down]
        if shared and job.state.upper() == "NODE_FAIL":
            by_node.setdefault(shared[0], []).append(job)
    grouped: set[str] = set()
    for node, victims in by_node.items():
        victims.sort(key=lambda j: (j.end_time or changes.now, j.job))
        first = victims[0]
        together = [v for v in victims if v.end_time and first.end_time
                    and (v.end_time - first.end_time).total_seconds() <= settings.group_minutes * 60]
        if len(together) < 2:
            continue
        keys = [_failure_key(v) for v in together] + [node_keys[node]]
        grouped |= {v.job for v in together}
        out.append(Detection(keys[0], {"kind": "job_failed", "job": first.job, "node": None, "text": None}, keys[1:]))
    for job in changes.failed:
        if job.job not in grouped:
            # The node that went down under it is part of this incident, not one of its own.
            also = [node_keys[n] for n in job.nodes if n in node_keys]
            out.append(Detection(_failure_key(job), {"kind": "job_failed", "job": job.job, "node": None, "text": None}, also))
    for job in changes.stalled:
        out.append(Detection(f"stall:{job.job}:{job.start_time}", {"kind": "job_stalled", "job": job.job, "node": None, "text": None}))
    for job in changes.pending:
        out.append(Detection(f"pending:{job.job}:{job.reason}", {"kind": "job_pending", "job": job.job, "node": None, "text": None}))
    failed_nodes = {n for j in changes.failed for n in j.nodes}
    for node in changes.nodes_down:
        if node.node not in failed_nodes:
            out.append(Detection(node_keys[node.node], {"kind": "node_alert", "job": None, "node": node.node, "text": None}))
    return out


def _failure_key(job) -> str:
    return f"failed:{job.job}:{job.state}:{job.end_time}"


class Watcher:
    def __init__(self, deps: Deps, cluster: str, checkpointer: Any = None, settings: WatchSettings | None = None):
        self.deps = deps
        self.cluster = cluster
        self.checkpointer = checkpointer
        self.settings = settings or WatchSettings()

    def poll_once(self) -> list[str]:
        """Resume what a crash interrupted, detect what changed, run an incident per cause."""
        store, backend = self.deps.store, self.deps.backend
        known = store.list_incidents(self.cluster, limit=1000)
        touched = [self._resume(i.id) for i in known if i.status in UNFINISHED]
        self._retry_undelivered(known)
        now = backend.now()
        since = store.watch_cursor(self.cluster) or now - timedelta(minutes=self.settings.lookback_minutes)
        changes = backend.changes_since(since, stall_minutes=self.settings.stall_minutes)
        for d in detect(changes, self.settings):
            incident_id = store.claim_detection(self.cluster, [d.key, *d.also], d.trigger, at=now)
            if incident_id is None:
                continue  # seen before: this failure already has its incident
            touched.append(incident_id)
            start_incident(self.deps, d.trigger, cluster=self.cluster, source="watch",
                           checkpointer=self.checkpointer, incident_id=incident_id, record=True, opened=True)
        store.set_watch_cursor(self.cluster, changes.now)
        return touched

    def _retry_undelivered(self, known: list[Any]) -> None:
        """A page or escalation that could not be delivered (Slack, a webhook, email) is tried again at
        every poll, each try recorded, until one gets through: nothing waits unseen for a resume."""
        notifier = self.deps.notifier
        if notifier is not None:
            for incident_id in self.deps.store.undelivered_counts([i.id for i in known]):
                notifier.retry_undelivered(incident_id, at=self.deps.backend.now())

    def _resume(self, incident_id: str) -> str:
        resume_unfinished(self.deps, incident_id, self.checkpointer)
        return incident_id

    def run(self, polls: int | None = None, on_poll=None, on_error=None) -> None:
        done = 0
        while polls is None or done < polls:
            started = time.monotonic()
            try:
                touched = self.poll_once()
            except ToolError as e:
                # The login node is unreachable or a command failed: the pager loop outlives it
                # and the next poll starts from the same cursor, so nothing is skipped.
                if on_error is None:
                    raise
                on_error(e)
            else:
                if on_poll:
                    on_poll(touched)
            done += 1
            if polls is None or done < polls:
                time.sleep(max(0.0, self.settings.interval_s - (time.monotonic() - started)))


def lifecycle(status: str) -> str:
    """The incident states a person follows (the store's finer steps folded into them)."""
    return {"open": "detected", "diagnosed": "investigating"}.get(status, status)
