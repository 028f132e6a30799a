"""What `crashcart watch` needs from a Kubernetes cluster, as an informer would keep it.

The first poll lists pods and nodes (one request each, the list's resourceVersion kept);
every later poll watches from that version for `watch_seconds` (bookmarks move it on even
when nothing changed) and applies the events to the cache. A 410 Expired (the version was
compacted away) relists. Only pods that look stuck pending cost extra requests: their
FailedScheduling events, one field-selected request each.

Workloads fail too, sometimes with no failed pod to show it (a Job past its deadline deletes
its pods, a PyTorchJob's cleanPodPolicy removes them, a RayJob whose submission failed never
had one): batch Jobs and the training operators' objects whose CRDs are installed are listed
and watched alongside the pods, and a workload whose status says Failed is reported.

One incident per root cause: pods, child Jobs and the operator object above them that fail
together are one failure, grouped by the top of their ownerReferences (a JobSet's Jobs and
their pods, a RayJob's RayCluster and its pods); the first failed pod speaks for the rest,
else the topmost failed workload.

Stalls: Kubernetes records no training progress, so a running GPU pod's own log is its
heartbeat. The last line (with the kubelet's timestamp) of each running GPU pod old enough to
have stalled is read; a pod whose log moved is not read again until it could have stalled.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from crashcart.tools import render
from crashcart.tools._spec import ToolError
from crashcart.tools.backends.base import STUCK_PENDING_REASONS, ClusterChanges
from crashcart.tools.catalog import JobRow
from crashcart.tools.backends.kubernetes import _kueue_stuck as kueue_stuck
from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.backends.kubernetes._client import JOB, LOCALQUEUE, NODE, POD, WORKLOADS, Absent, Kind

if TYPE_CHECKING:
    from crashcart.tools.backends.kubernetes._backend import KubernetesBackend

FAILED = {"Failed", "CrashLoopBackOff"}
WATCHED_WORKLOADS = ("pytorchjob", "mpijob", "jobset", "rayjob", "raycluster", "vcjob")
"""Operator objects the watch keeps (where installed): those that fail as a whole, and the
RayCluster that stands between a RayJob and its pods."""
KUEUE = {"workload": WORKLOADS["workload"], "clusterqueue": WORKLOADS["clusterqueue"], "localqueue": LOCALQUEUE}
"""Kueue's objects, kept where Kueue is installed: a queued job has no pod to fail or pend
until its Workload is admitted, so only these say that it waits and why."""


class Cache:
    """One resource's objects in one namespace (or cluster-wide) by namespace/name, and the
    resourceVersion they are current at (each namespace watched from its own list's version)."""

    def __init__(self, kind: Kind, namespace: str | None = None):
        self.kind = kind
        self.namespace = namespace
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
        for event in api.watch(self.kind, self.namespace, self.rv, seconds):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:  # Expired: what we hold may have missed changes
                    self.relist(api)
                    return
                raise ToolError(f"watch {self.kind.plural}: {obj.get('reason')}: {obj.get('message')}")
            rv = parse.meta(obj).get("resourceVersion")
            if kind == "DELETED":
                self.objects.pop(self.key(obj), None)
            elif kind in ("ADDED", "MODIFIED"):
                self.objects[self.key(obj)] = obj
            if rv:
                self.rv = rv

    def relist(self, api) -> None:
        items, rv = api.list(self.kind, self.namespace)
        self.objects = {self.key(o): o for o in items}
        self.rv = rv
        self.relists += 1


class Caches:
    """One resource over the namespaces crashcart watches: a Cache each."""

    def __init__(self, kind: Kind, namespaces: list[str]):
        self.caches = [Cache(kind, ns) for ns in (namespaces if kind.namespaced and namespaces else [None])]

    def sync(self, api, seconds: int) -> None:
        for c in self.caches:
            c.sync(api, seconds)

    @property
    def objects(self) -> dict[str, dict[str, Any]]:
        if len(self.caches) == 1:
            return self.caches[0].objects
        return {k: v for c in self.caches for k, v in c.objects.items()}

    @property
    def rv(self) -> str | None:
        return self.caches[0].rv if len(self.caches) == 1 else ",".join(str(c.rv) for c in self.caches)

    @rv.setter
    def rv(self, value: str | None) -> None:
        for c in self.caches:
            c.rv = value

    @property
    def relists(self) -> int:
        return sum(c.relists for c in self.caches)


class Informer:
    def __init__(self, backend: KubernetesBackend):
        self.b = backend
        spaces = backend.settings.namespaces
        self.pods = Caches(POD, spaces)
        self.nodes = Caches(NODE, spaces)
        self.jobs = Caches(JOB, spaces)
        self.workloads: dict[str, Caches] = {}
        """The training operators' objects, one Caches per installed CRD (found by discovery)."""
        self.kueue: dict[str, Caches] = {}
        """Kueue's Workloads, ClusterQueues and LocalQueues, where Kueue is installed."""
        self.quiet_until: dict[str, datetime] = {}
        """Pods whose log moved recently: not read again before this time."""

    def _served_workloads(self) -> None:
        """Start keeping each operator's objects (and Kueue's) once discovery finds its CRD
        (checked again only every REDISCOVER_SECONDS while absent)."""
        api = self.b.api
        groups: set[str] | None = None
        wanted = [(name, WORKLOADS[name], self.workloads) for name in WATCHED_WORKLOADS]
        wanted += [(name, kind, self.kueue) for name, kind in KUEUE.items()]
        for name, kind, kept in wanted:
            if name in kept:
                continue
            key = f"{kind.plural}.{kind.group}"
            if key in api.absent and not api.absent_expired(key):
                continue
            if groups is None:  # one look at /apis for every operator not yet seen
                groups = api.groups(refresh=bool(api.absent))
            if kind.group not in groups:
                api.absent[key] = time.monotonic()
                continue
            try:
                served = api.served(kind)
            except Absent:
                continue
            kept[name] = Caches(served, self.b.settings.namespaces)

    def sync(self) -> None:
        seconds = self.b.settings.watch_seconds
        self._served_workloads()
        caches = {"pods": self.pods, "nodes": self.nodes, "jobs": self.jobs, **self.workloads,
                  **{f"kueue:{n}": c for n, c in self.kueue.items()}}
        # The watches wait side by side: a poll costs one watch window, not one per resource.
        with ThreadPoolExecutor(max_workers=len(caches)) as pool:
            futures = {name: pool.submit(c.sync, self.b.api, seconds) for name, c in caches.items()}
            for name, f in futures.items():
                try:
                    f.result()
                except Absent:
                    # The operator was uninstalled: its objects are gone with its CRD.
                    self.workloads.pop(name, None)
                    self.kueue.pop(name.removeprefix("kueue:"), None)

    def _roots(self) -> dict[str, dict[str, Any]]:
        """uid -> the object at the top of its ownerReferences, over the workloads kept."""
        by_uid = {parse.meta(o).get("uid"): o for c in (self.jobs, *self.workloads.values()) for o in c.objects.values()}

        def top(obj: dict[str, Any]) -> dict[str, Any]:
            for _ in range(5):
                ref = parse.owner(obj)
                parent = by_uid.get((ref or {}).get("uid"))
                if parent is None:
                    break
                obj = parent
            return obj

        return {uid: top(o) for uid, o in by_uid.items()}

    def root_key(self, obj: dict[str, Any], roots: dict[str, dict[str, Any]]) -> str:
        """namespace/name of the workload at the top of `obj`'s owners (a bare pod: itself)."""
        m = parse.meta(obj)
        ref = parse.owner(obj)
        top = roots.get(m.get("uid")) or roots.get((ref or {}).get("uid"))
        name = parse.meta(top)["name"] if top is not None else (
            parse.workload_name(obj) if obj.get("kind", "Pod") == "Pod" else m["name"])
        return f"{m.get('namespace')}/{name}"

    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        self.sync()
        now = self.b.now()
        since = render.aware(since)
        changes = ClusterChanges(now=now)
        labels = self.b.settings.user_labels
        seen_workloads: set[str] = set()
        reported: set[str] = set()
        roots = self._roots()
        pending_after = timedelta(minutes=self.b.settings.pending_minutes)
        for pod in sorted(self.pods.objects.values(), key=lambda p: parse.meta(p).get("creationTimestamp") or ""):
            state, reason, _, ended = parse.pod_state(pod)
            if state in FAILED:
                group = self.root_key(pod, roots)
                if ended is None or ended <= since:
                    if ended is not None:
                        # Reported by an earlier poll: its workload failing now is the same failure.
                        reported.add(group)
                    continue
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
        changes.failed += self.failed_workloads(since, now, roots, seen_workloads | reported)
        changes.pending += self.stuck_in_kueue(now, pending_after)
        changes.stalled = self.stalled(now, timedelta(minutes=stall_minutes))
        running = {(p.get("spec") or {}).get("nodeName") for p in self.pods.objects.values()
                   if (p.get("status") or {}).get("phase") == "Running"}
        for raw in self.nodes.objects.values():
            node = parse.node_model(raw, self.b.settings.node_pool_labels, parse.meta(raw)["name"] in running)
            if node.state in ("down", "not_ready"):
                changes.nodes_down.append(parse.node_row(node))
        return changes

    def failed_workloads(self, since: datetime, now: datetime, roots: dict[str, dict[str, Any]],
                         seen: set[str]) -> list:
        """Workloads that failed with no failed pod left to speak for them: the topmost failed
        object of each root cause (a JobSet, not each of its Jobs)."""
        failed = []
        for cache in (self.jobs, *self.workloads.values()):
            for obj in cache.objects.values():
                if (why := parse.workload_failure(obj)) and (why[2] or now) > since:
                    failed.append((obj, why))
        # Topmost first: a JobSet before its Jobs, a RayJob before its RayCluster.
        failed.sort(key=lambda f: (roots.get(parse.meta(f[0]).get("uid")) is not f[0], f[1][2] or now))
        rows = []
        for obj, (reason, _, ended) in failed:
            group = self.root_key(obj, roots)
            if group in seen:
                continue
            seen.add(group)
            job = parse.workload_job(obj, obj.get("kind", ""), self.b.settings.user_labels)
            rows.append(parse.job_row(job.model_copy(update={"state": "Failed", "reason": reason, "end_time": ended,
                                                             "config": {}})))
        return rows

    def stuck_in_kueue(self, now: datetime, pending_after: timedelta) -> list:
        """Jobs whose Kueue Workload waits in a way that will not end by itself (_kueue_stuck),
        as pending rows named after the job the Workload queues."""
        if not {"workload", "clusterqueue", "localqueue"} <= set(self.kueue):
            return []
        workloads = list(self.kueue["workload"].objects.values())
        cqs = {parse.meta(q)["name"]: q for q in self.kueue["clusterqueue"].objects.values()}
        lqs = self.kueue["localqueue"].objects
        owners = {parse.meta(o).get("uid"): o for c in (self.jobs, *self.workloads.values()) for o in c.objects.values()}
        admitted: dict[str, list[dict[str, Any]]] = {}  # by ClusterQueue: a queue's holders, not every Workload
        for wl in workloads:
            if cq_name := ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue"):
                admitted.setdefault(cq_name, []).append(wl)
        rows = []
        for wl in workloads:
            m = parse.meta(wl)
            lq = lqs.get(f"{m.get('namespace')}/{(wl.get('spec') or {}).get('queueName')}") or {}
            cq = cqs.get((lq.get("spec") or {}).get("clusterQueue"))
            if cq is None:
                continue
            found = kueue_stuck.stuck(wl, cq, list(cqs.values()), admitted.get(parse.meta(cq)["name"], []), now, pending_after)
            if found is None:
                continue
            owner = parse.owner(wl) or {}
            labels = parse.meta(owners.get(owner.get("uid")) or wl).get("labels") or {}
            rows.append(JobRow(job=f"{m.get('namespace')}/{owner.get('name') or m['name']}", name=owner.get("name"),
                               user=parse.first_label(labels, self.b.settings.user_labels),
                               partition=m.get("namespace"), state="Pending", reason=found.reason,
                               submit_time=parse.when(m.get("creationTimestamp"))))
        return rows

    def stalled(self, now: datetime, stall: timedelta) -> list:
        rows, budget = [], self.b.settings.stall_check_pods
        for key, pod in self.pods.objects.items():
            if budget <= 0:
                break
            state, _, _, _ = parse.pod_state(pod)
            started = parse.when((pod.get("status") or {}).get("startTime"))
            if state != "Running" or not started or now - started < stall or not parse.gpus_of(pod.get("spec") or {}):
                continue
            if self.quiet_until.get(key, started) > now:
                continue
            budget -= 1
            m = parse.meta(pod)
            try:
                text = self.b.api.log(m["namespace"], m["name"], parse.main_container(pod).get("name"), tail=1, timestamps=True)
            except ToolError:
                continue  # a log that cannot be read proves nothing
            try:
                stamp = parse.when(text.split(" ", 1)[0][:19] + "Z") if text.strip() else None
            except ValueError:
                continue  # no kubelet timestamp on the line: nothing to tell time by
            last = stamp or started
            if now - last >= stall:
                rows.append(parse.job_row(parse.pod_job(pod, self.b.settings.user_labels, config={})))
            else:
                self.quiet_until[key] = last + stall
        return rows

    def _failed_scheduling(self, pod: dict[str, Any]) -> bool:
        m = parse.meta(pod)
        return any(e.reason == "FailedScheduling" for e in self.b.events_about("Pod", m["name"], m.get("namespace")))
