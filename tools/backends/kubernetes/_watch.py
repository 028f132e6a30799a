"""What `crashcart watch` needs from a Kubernetes cluster, as an informer would keep it.

The first poll lists pods and nodes (one request each, the list's resourceVersion kept);
every later poll watches from that version for `watch_seconds` (bookmarks move it on even
when nothing changed) and applies the events to the cache. A 410 Expired (the version was
compacted away) relists. Only pods that look stuck pending cost extra requests: their
FailedScheduling events, one field-selected request each.

One incident per root cause: the pods of one workload that fail together are one failure
(the first of them speaks for the rest).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from crashcart.tools import render
from crashcart.tools.backends.base import STUCK_PENDING_REASONS, ClusterChanges
from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.backends.kubernetes._client import NODE, POD, Kind

if TYPE_CHECKING:
    from crashcart.tools.backends.kubernetes._backend import KubernetesBackend

FAILED = {"Failed", "CrashLoopBackOff"}


class Cache:
    """One resource's objects by namespace/name, and the resourceVersion they are current at."""

    def __init__(self, kind: Kind):
        self.kind = kind
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv: str | None = None
        self.relists = 0

    @staticmethod
    def key(obj: dict[str, Any]) -> str:
        m = parse.meta(obj)
        return f"{m.get('namespace') or ''}/{m['name']}"

    def sync(self, api, seconds: int) -> None:
        if self.rv is None:
            self.relist(api)
            return
        namespaces = (api.settings.namespaces or [None]) if self.kind.namespaced else [None]
        for ns in namespaces:
            for event in api.watch(self.kind, ns, self.rv, seconds):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:  # Expired: what we hold may have missed changes
                        self.relist(api)
                        return
                    raise RuntimeError(f"watch {self.kind.plural}: {obj.get('reason')}: {obj.get('message')}")
                rv = parse.meta(obj).get("resourceVersion")
                if kind == "DELETED":
                    self.objects.pop(self.key(obj), None)
                elif kind in ("ADDED", "MODIFIED"):
                    self.objects[self.key(obj)] = obj
                if rv:
                    self.rv = rv

    def relist(self, api) -> None:
        items, rv = api.list(self.kind)
        self.objects = {self.key(o): o for o in items}
        self.rv = rv
        self.relists += 1


class Informer:
    def __init__(self, backend: KubernetesBackend):
        self.b = backend
        self.pods = Cache(POD)
        self.nodes = Cache(NODE)

    def sync(self) -> None:
        seconds = self.b.settings.watch_seconds
        # The two watches wait side by side: a poll costs one watch window, not two.
        with ThreadPoolExecutor(max_workers=2) as pool:
            for f in [pool.submit(c.sync, self.b.api, seconds) for c in (self.pods, self.nodes)]:
                f.result()

    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        self.sync()
        now = self.b.now()
        since = render.aware(since)
        changes = ClusterChanges(now=now)
        labels = self.b.settings.user_labels
        seen_workloads: set[str] = set()
        pending_after = timedelta(minutes=self.b.settings.pending_minutes)
        for pod in sorted(self.pods.objects.values(), key=lambda p: parse.meta(p).get("creationTimestamp") or ""):
            state, reason, _, ended = parse.pod_state(pod)
            if state in FAILED:
                if ended is None or ended <= since:
                    continue
                group = f"{parse.meta(pod).get('namespace')}/{parse.workload_name(pod)}"
                if group in seen_workloads:
                    continue
                seen_workloads.add(group)
                job = parse.pod_job(pod, labels, config={})
                if state == "CrashLoopBackOff":
                    # Each restart ends again; the incident is the crash loop, not each restart.
                    job = job.model_copy(update={"end_time": None})
                changes.failed.append(parse.job_row(job))
            elif state == "Pending":
                created = parse.when(parse.meta(pod).get("creationTimestamp")) or now
                stuck = reason in STUCK_PENDING_REASONS or (
                    reason == "Unschedulable" and now - created >= pending_after and self._failed_scheduling(pod))
                if stuck:
                    changes.pending.append(parse.job_row(parse.pod_job(pod, labels, config={})))
        running = {(p.get("spec") or {}).get("nodeName") for p in self.pods.objects.values()
                   if (p.get("status") or {}).get("phase") == "Running"}
        for raw in self.nodes.objects.values():
            node = parse.node_model(raw, self.b.settings.node_pool_labels, parse.meta(raw)["name"] in running)
            if node.state in ("down", "not_ready"):
                changes.nodes_down.append(parse.node_row(node))
        return changes

    def _failed_scheduling(self, pod: dict[str, Any]) -> bool:
        m = parse.meta(pod)
        return any(e.reason == "FailedScheduling" for e in self.b.events_about("Pod", m["name"], m.get("namespace")))
