"""The kubernetes backend: Contract 1's tools on a real cluster, through the official client.

Every tool returns the same typed output as the fixture backend (JobRow, NodeRow, Event, ...)
and its text is rendered from the API objects by the same kubectl-shaped renderers
(tools/render/kubernetes.py), so the agent cannot tell a live cluster from a recorded one.
A "job" is a pod (by name, or namespace/name) or a workload (a batch Job, a PyTorchJob,
a RayJob, ...: its newest pod speaks for it). Writes and the guard's facts live in
`_actions.py`, the watch's list+watch cache in `_watch.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from crashcart.tools import render
from crashcart.tools._spec import ToolError
from crashcart.tools.backends.base import LiveBackend, ClusterChanges
from crashcart.tools.backends.kubernetes import _dcgm as dcgm
from crashcart.tools.backends.kubernetes import _kueue as kueue
from crashcart.tools.backends.kubernetes import _kueue_stuck as kueue_stuck
from crashcart.tools.backends.kubernetes import _parse as parse
from crashcart.tools.backends.kubernetes._client import (
    EVENT, JOB, LOCALQUEUE, NODE, POD, WORKLOADS, Absent, Api, Kind, NotFound,
)
from crashcart.tools.backends.kubernetes._config import KubernetesSettings
from crashcart.tools.backends.slurm._jobfiles import JobFiles
from crashcart.tools.catalog import (
    ConfigOutput, DescribeInput, DescribeOutput, EventsInput, EventsOutput, GpuOutput, HistoryInput, JobInput,
    JobRow, JobsOutput, ListJobsInput, LogOutput, LogsInput, MetricsInput, NodeInput, NodeLogInput, NodeLogOutput,
    NodesOutput, ProgressOutput, SinfoInput,
)
from crashcart.tools.cluster import Job, Node

NODE_EVENTS = "default"
"""The namespace the node controller and the kubelet record a node's events in."""
_STATE_WORDS = {"PD": "PENDING", "R": "RUNNING", "F": "FAILED", "CD": "SUCCEEDED", "COMPLETED": "SUCCEEDED"}


@dataclass
class Subject:
    """What a job id names: a pod, the workload that owns it, or both."""

    pod: dict[str, Any] | None
    workload: dict[str, Any] | None
    kind: Kind | None

    @property
    def namespace(self) -> str | None:
        return parse.meta(self.pod or self.workload or {}).get("namespace")


def _known(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown}, ... ({len(names)} in all)" if len(names) > limit else shown or "none"


def kind_of(obj: dict[str, Any]) -> Kind | None:
    from crashcart.tools.backends.kubernetes._client import BY_KIND

    return BY_KIND.get((obj.get("apiVersion"), obj.get("kind")))


class KubernetesBackend(LiveBackend):
    kind = "kubernetes"

    def __init__(self, settings: KubernetesSettings | None = None, api: Api | None = None):
        from crashcart.tools.backends.kubernetes._actions import Actions
        from crashcart.tools.backends.kubernetes._watch import Informer

        self.settings = settings or KubernetesSettings()
        self.api = api or Api(self.settings)
        self.actions = Actions(self)
        self.informer = Informer(self)
        self.escalations: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []

    def now(self) -> datetime:
        return datetime.now(UTC)

    def close(self) -> None:
        self.api.close()


    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        return self.informer.changes_since(since, stall_minutes)

    def _bounded(self, lines: list[str], pinned: int = 0) -> tuple[str, bool]:
        text, truncated, _ = render.bound_lines(lines, pinned=pinned)
        return text, truncated

    # --- lookups ---------------------------------------------------------------------

    def node(self, name: str) -> dict[str, Any]:
        try:
            return self.api.get(NODE, None, name)
        except NotFound:
            names = [parse.meta(n)["name"] for n in self.api.list(NODE)[0]]
            raise ToolError(f"node {name!r} is not in this Kubernetes cluster (known: {_known(names)})") from None

    def subject(self, job_id: str) -> Subject:
        namespace, _, name = job_id.rpartition("/")
        namespace = namespace or None
        pods = self.api.list(POD, namespace, fields=f"metadata.name={name}")[0]
        if len(pods) > 1:
            where = ", ".join(f"{parse.meta(p)['namespace']}/{name}" for p in pods)
            raise ToolError(f"job {job_id!r} names pods in several namespaces ({where}); say which as namespace/name")
        if pods:
            return Subject(pods[0], self.root_workload(pods[0]), None)
        served = self.api.groups(refresh=True)  # one GET /apis: only installed operators are asked
        for kind in [JOB, *(k for k in WORKLOADS.values() if k.group in served)]:
            try:
                found = self.api.list(kind, namespace, fields=f"metadata.name={name}")[0]
            except Absent:
                continue
            if found:
                workload = self.root_workload(found[0]) or found[0]
                return Subject(self.newest_pod(workload), workload, kind_of(workload))
        raise ToolError(f"job {job_id!r} is neither a pod nor a workload (Job, PyTorchJob, RayJob, ...) "
                        f"{'in namespace ' + namespace if namespace else 'in the namespaces crashcart watches'}")

    def root_workload(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The object that owns `obj` at the top (a Job, or the operator object above it);
        a bare pod is its own workload. None when a non-training controller owns it."""
        current, seen = obj, 0
        while (ref := parse.owner(current)) and seen < 5:
            kind = kind_of({"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind")})
            if kind is None or kind in (POD, NODE, EVENT):
                return None if current is obj and obj.get("kind", "Pod") == "Pod" else current
            try:
                current = self.api.get(kind, parse.meta(obj).get("namespace"), ref["name"])
            except (NotFound, Absent):
                break
            seen += 1
        return current

    def pods_of(self, workload: dict[str, Any]) -> list[dict[str, Any]]:
        if workload.get("kind") == "Pod":
            return [workload]
        ns = parse.meta(workload).get("namespace")
        uid = parse.meta(workload).get("uid")
        pods = self.api.list(POD, ns)[0]
        owned: set[str] = {uid}
        # Two levels: a PyTorchJob owns its pods; a JobSet owns Jobs, a RayJob a RayCluster, that own pods.
        for child_kind in (JOB, WORKLOADS["raycluster"]):
            for child in self.api.list_if_served(child_kind, ns):
                if any(r.get("uid") == uid for r in parse.meta(child).get("ownerReferences") or []):
                    owned.add(parse.meta(child)["uid"])
        return [p for p in pods if any(r.get("uid") in owned for r in parse.meta(p).get("ownerReferences") or [])]

    def newest_pod(self, workload: dict[str, Any]) -> dict[str, Any] | None:
        pods = self.pods_of(workload)
        return max(pods, key=lambda p: parse.meta(p).get("creationTimestamp") or "", default=None)

    def pod_as_job(self, pod: dict[str, Any], workload: dict[str, Any] | None = None) -> Job:
        config = parse.workload_config(workload) if workload is not None and workload is not pod else None
        return parse.pod_job(pod, self.settings.user_labels, config)

    def subject_job(self, s: Subject) -> Job:
        if s.pod is not None:
            return self.pod_as_job(s.pod, s.workload)
        return parse.workload_job(s.workload, s.kind.kind if s.kind else "", self.settings.user_labels)

    # --- read tools: jobs ---------------------------------------------------------------

    def _state_matches(self, job: Job, wanted: list[str] | None) -> bool:
        if not wanted:
            return True
        words = {_STATE_WORDS.get(w.upper(), w.upper()) for w in wanted}
        return bool(words & {job.state.upper(), (job.reason or "").upper(), render.pod_status(job).upper()})

    def _tool_list_jobs(self, a: ListJobsInput) -> JobsOutput:
        if a.node:
            self.node(a.node)
        pods = self.api.list(POD, a.partition, fields=f"spec.nodeName={a.node}" if a.node else None)[0]
        jobs = [parse.pod_job(p, self.settings.user_labels) for p in pods]
        jobs = [j for j in jobs if (a.user is None or j.user == a.user) and self._state_matches(j, a.state)]
        jobs.sort(key=lambda j: (j.partition or "", j.id))
        text, truncated = self._bounded(render.pods_lines(jobs, self.now()), pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=[parse.job_row(j) for j in jobs])

    def attempts(self, s: Subject) -> list[tuple[Job, int | None]]:
        """Earlier runs, oldest first, then the job itself: the pod's previous container, the
        workload's earlier pods, and the workloads crashcart resubmitted it from (their
        lineage annotation names them)."""
        current = self.subject_job(s)
        earlier: list[Job] = []
        workload = s.workload
        chain: list[dict[str, Any]] = []
        seen = 0
        while workload is not None and seen < 20:
            previous = (parse.meta(workload).get("annotations") or {}).get(parse.RESUBMIT_OF)
            if not previous:
                break
            try:
                found = self.subject(f"{parse.meta(workload).get('namespace')}/{previous}")
            except ToolError:
                break
            workload = found.workload or found.pod
            chain.insert(0, workload)
            seen += 1
        for w in chain:
            pods = sorted(self.pods_of(w), key=lambda p: parse.meta(p).get("creationTimestamp") or "")
            earlier += [parse.pod_job(p, self.settings.user_labels) for p in pods] or [
                parse.workload_job(w, w.get("kind", ""), self.settings.user_labels)]
        if s.workload is not None and s.pod is not None and s.workload is not s.pod:
            mine = parse.meta(s.pod)["name"]
            pods = sorted(self.pods_of(s.workload), key=lambda p: parse.meta(p).get("creationTimestamp") or "")
            earlier += [parse.pod_job(p, self.settings.user_labels) for p in pods if parse.meta(p)["name"] != mine]
        earlier += current.attempts
        entries = [(j.model_copy(update={"attempts": []}), i) for i, j in enumerate(earlier, 1)]
        return entries + [(current, None)]

    def _tool_job_history(self, a: HistoryInput) -> JobsOutput:
        now = self.now()
        if a.job:
            entries = self.attempts(self.subject(a.job))
        else:
            since = now - timedelta(days=a.days)
            jobs = [parse.pod_job(p, self.settings.user_labels) for p in self.api.list(POD, a.partition)[0]]
            entries = [(j, None) for j in sorted(jobs, key=lambda j: j.submit_time or now)
                       if (a.user is None or j.user == a.user) and (j.submit_time is None or j.submit_time >= since)]
        text, truncated = self._bounded(render.history_lines(entries, now), pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=[parse.job_row(j, n) for j, n in entries])

    def read_log(self, s: Subject, previous: bool = False, since: datetime | None = None) -> list[str]:
        if s.pod is None:
            what = f"{s.kind.kind if s.kind else 'workload'} {parse.meta(s.workload)['name']}"
            if why := parse.workload_failure(s.workload):
                raise ToolError(f"{what} failed ({why[0]}: {why[1]}) and has no pod left, so no log; "
                                "its status and events say why (kubectl_describe)")
            raise ToolError(f"{what} has no pod yet, so no log")
        m = parse.meta(s.pod)
        since_seconds = max(1, int((self.now() - render.aware(since)).total_seconds())) if since else None
        text = self.api.log(m["namespace"], m["name"], parse.main_container(s.pod).get("name"), previous=previous,
                            tail=self.settings.max_log_lines, since_seconds=since_seconds)
        return text.splitlines()

    def _tool_get_logs(self, a: LogsInput) -> LogOutput:
        s = self.subject(a.job)
        previous, note = False, []
        if a.attempt is not None:
            entries = self.attempts(s)[:-1]
            if not 1 <= a.attempt <= len(entries):
                raise ToolError(f"job {a.job!r} has {len(entries)} earlier attempt(s); "
                                f"attempt must be 1..{len(entries)} or omitted for the latest")
            earlier = entries[a.attempt - 1][0]
            if s.pod is not None and earlier.id == parse.meta(s.pod)["name"]:
                previous = True
                note = [f"[crashcart: attempt {a.attempt} is the previous container of pod {earlier.id} (kubectl logs --previous)]"]
            else:
                s = self.subject(f"{earlier.partition}/{earlier.id}" if earlier.partition else earlier.id)
        elif s.pod is not None and parse.pod_state(s.pod)[0] == "CrashLoopBackOff":
            # Between restarts no container runs: what the crash printed is the previous run's log.
            previous = True
            note = [f"[crashcart: pod {parse.meta(s.pod)['name']} is in CrashLoopBackOff; this is its last run's log (kubectl logs --previous)]"]
        lines = self.read_log(s, previous=previous, since=a.since)
        text, truncated, total = render.bound_lines(lines, a.tail, a.grep, a.since, render.job_log_stamp(self.now()))
        return LogOutput(job=a.job, text="\n".join([*note, text]) if note else text, truncated=truncated, total_lines=total)

    def progress(self, lines: list[str]):
        # The same reading of a training log as on Slurm (the settings' regexes).
        return JobFiles.progress(self, lines)

    def _tool_training_progress(self, a: JobInput) -> ProgressOutput:
        s = self.subject(a.job)
        try:
            lines = self.read_log(s)
        except ToolError:
            lines = []
        points, checkpoints = self.progress(lines)
        job = self.subject_job(s)
        text, truncated = self._bounded(render.progress_lines(job, points, checkpoints, self.now()))
        return ProgressOutput(job=a.job, text=text, truncated=truncated, points=points, checkpoints=checkpoints)

    def _tool_job_config(self, a: JobInput) -> ConfigOutput:
        s = self.subject(a.job)
        source = s.workload or s.pod
        config = parse.workload_config(source)
        m = parse.meta(source)
        dumped = yaml.safe_dump(config, sort_keys=False, default_flow_style=False) if config else ""
        header = f"# {source.get('kind')} {m.get('namespace')}/{m.get('name')}: the knobs its manifest holds"
        text, truncated = self._bounded([header] + (dumped.splitlines() or ["{}"]))
        return ConfigOutput(job=a.job, config=config, text=text, truncated=truncated)

    # --- read tools: Kubernetes objects -----------------------------------------------------

    def events_about(self, kind: str, name: str, namespace: str | None) -> list:
        if kind == "Node":
            namespace = NODE_EVENTS  # whatever namespaces crashcart watches
        fields = f"involvedObject.name={name},involvedObject.kind={kind}"
        return sorted((parse.event(e) for e in self.api.list(EVENT, namespace, fields=fields)[0]), key=lambda e: e.time)

    def _tool_kubectl_describe(self, a: DescribeInput) -> DescribeOutput:
        now = self.now()
        if a.kind == "node":
            raw = self.node(a.name)
            pods = self.api.list(POD, None, fields=f"spec.nodeName={a.name}")[0]
            jobs = [parse.pod_job(p, self.settings.user_labels) for p in pods]
            active = [j for j in jobs if render.is_active(j.state)]
            node = parse.node_model(raw, self.settings.node_pool_labels, busy=bool(active))
            lines = render.describe_node_lines(node, active, self.events_about("Node", a.name, None), now)
            text, truncated = self._bounded(lines)
            return DescribeOutput(kind=a.kind, name=a.name, text=text, truncated=truncated, node=parse.node_row(node))
        if a.kind == "pod":
            s = self.subject(f"{a.namespace}/{a.name}" if a.namespace else a.name)
            if s.pod is None and s.workload is not None and (key := self._describable(s)):
                # A job with no pod yet (Kueue keeps it suspended, its operator made none): what
                # `kubectl describe` of the job itself shows is all there is to see.
                m = parse.meta(s.workload)
                out = self._tool_kubectl_describe(DescribeInput(kind=key, name=m["name"], namespace=m.get("namespace")))
                note = f"[crashcart: {s.workload.get('kind')} {m.get('namespace')}/{m['name']} has no pod yet; its own describe follows]"
                row = out.job.model_copy(update={"job": a.name}) if out.job else None  # the job as it was named
                return out.model_copy(update={"kind": a.kind, "name": a.name, "text": f"{note}\n{out.text}", "job": row})
            if s.pod is None or parse.meta(s.pod)["name"] != a.name:
                raise ToolError(f'pods "{a.name}" not found' + (f' in namespace "{a.namespace}"' if a.namespace else ""))
            job = self.pod_as_job(s.pod, s.workload)
            lines = render.describe_pod_lines(job, self.events_about("Pod", a.name, s.namespace), now)
        elif a.kind in ("workload", "clusterqueue"):
            return self._describe_kueue(a)
        else:
            kind = JOB if a.kind == "job" else WORKLOADS[a.kind]
            try:
                found = self.api.list(kind, a.namespace, fields=f"metadata.name={a.name}")[0]
            except Absent:
                raise ToolError(f"{kind.kind} is not installed on this cluster (no {kind.plural}.{kind.group} "
                                f"CRD, API {kind.api_version}); describe the pods instead") from None
            if not found:
                raise ToolError(f'{kind.plural}.{kind.group or "batch"} "{a.name}" not found'
                                + (f' in namespace "{a.namespace}"' if a.namespace else ""))
            obj = found[0]
            job = parse.workload_job(obj, kind.kind, self.settings.user_labels)
            pod = self.newest_pod(obj)
            if pod is not None:
                job = job.model_copy(update={"nodes": sorted({p["spec"]["nodeName"] for p in self.pods_of(obj)
                                                               if (p.get("spec") or {}).get("nodeName")})})
            lines = render.describe_resource_lines(a.kind, job, self.events_about(kind.kind, a.name, job.partition), now)
            if queued := kueue.workload_of(self.api.list_if_served(WORKLOADS["workload"], job.partition), obj):
                # Kueue holds the job (suspended) until its Workload is admitted: its reason goes first.
                lines = kueue.workload_summary(queued) + self._kueue_binding(queued) + lines
        text, truncated = self._bounded(lines)
        return DescribeOutput(kind=a.kind, name=a.name, text=text, truncated=truncated, job=parse.job_row(job))

    @staticmethod
    def _describable(s: Subject) -> str | None:
        """The describe kind of a subject's workload (job, pytorchjob, ...), None for a bare pod."""
        kind = kind_of(s.workload or {})
        if kind == JOB:
            return "job"
        return next((key for key, k in WORKLOADS.items() if k == kind and key not in ("workload", "clusterqueue")), None)

    def _describe_kueue(self, a: DescribeInput) -> DescribeOutput:
        kind = WORKLOADS[a.kind]
        try:
            if a.kind == "clusterqueue":
                obj = self._clusterqueue(a.name)
                summary = kueue.clusterqueue_summary(obj)
                events = self.events_about("ClusterQueue", a.name, NODE_EVENTS)
            else:
                obj = self._kueue_workload(a.name, a.namespace)
                summary = kueue.workload_summary(obj) + self._kueue_binding(obj) + self._queue_of(obj)
                events = self.events_about("Workload", parse.meta(obj)["name"], parse.meta(obj).get("namespace"))
        except Absent:
            raise ToolError(f"Kueue is not installed on this cluster (discovery lists no {kind.plural}.{kind.group}); "
                            "describe the job or its pods instead") from None
        lines = summary + render.describe_object_lines(obj, events, self.now())
        text, truncated = self._bounded(lines)
        row = None
        if a.kind == "workload":
            state, reason, _ = kueue.workload_state(obj)
            m = parse.meta(obj)
            row = JobRow(job=m["name"], name=(parse.owner(obj) or {}).get("name"), partition=m.get("namespace"),
                         state=state, reason=reason, submit_time=parse.when(m.get("creationTimestamp")))
        return DescribeOutput(kind=a.kind, name=a.name, text=text, truncated=truncated, job=row)

    def _clusterqueue(self, name: str) -> dict[str, Any]:
        kind = WORKLOADS["clusterqueue"]
        try:
            return self.api.get(kind, None, name)
        except NotFound:
            known = [parse.meta(q)["name"] for q in self.api.list(kind)[0]]
            raise ToolError(f'clusterqueues.kueue.x-k8s.io "{name}" not found (known: {_known(known)})') from None

    def _kueue_workload(self, name: str, namespace: str | None) -> dict[str, Any]:
        """A Workload by its own name, or the one queuing the job of that name."""
        kind = WORKLOADS["workload"]
        found = self.api.list(kind, namespace, fields=f"metadata.name={name}")[0]
        if not found:
            found = [w for w in self.api.list(kind, namespace)[0]
                     if any(r.get("name") == name for r in parse.meta(w).get("ownerReferences") or [])]
        if not found:
            raise ToolError(f'workloads.kueue.x-k8s.io "{name}" not found, nor a Workload queuing a job of that name'
                            + (f' in namespace "{namespace}"' if namespace else ""))
        if len(found) > 1:
            where = ", ".join(f"{parse.meta(w).get('namespace')}/{parse.meta(w)['name']}" for w in found)
            raise ToolError(f"{name!r} names several Kueue Workloads ({where}); say which with namespace")
        return found[0]

    def _kueue_binding(self, wl: dict[str, Any]) -> list[str]:
        """What binds a pending Workload when its wait will not end by itself (_kueue_stuck):
        the ClusterQueue and the numbers, as the watch decided it. Nothing for ordinary waiting."""
        if kueue.workload_state(wl)[0] != "Pending":
            return []
        lq = (wl.get("spec") or {}).get("queueName")
        try:
            cq_name = (self.api.get(LOCALQUEUE, parse.meta(wl).get("namespace"), lq).get("spec") or {}).get("clusterQueue")
            cqs = self.api.list(WORKLOADS["clusterqueue"])[0]
            workloads = self.api.list(WORKLOADS["workload"])[0]
        except (NotFound, Absent):
            return []
        cq = next((q for q in cqs if parse.meta(q)["name"] == cq_name), None)
        found = cq and kueue_stuck.stuck(wl, cq, cqs, workloads, self.now(), timedelta(minutes=self.settings.pending_minutes))
        return [f"[crashcart: {line}]" for line in found.lines] if found else []

    def _queue_of(self, wl: dict[str, Any]) -> list[str]:
        """The quota a Workload waits for or holds: its ClusterQueue's (through its LocalQueue when not yet admitted)."""
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if not cq and (lq := (wl.get("spec") or {}).get("queueName")):
            try:
                cq = (self.api.get(LOCALQUEUE, parse.meta(wl).get("namespace"), lq).get("spec") or {}).get("clusterQueue")
            except NotFound:
                return [f"[crashcart: LocalQueue {lq} does not exist in namespace {parse.meta(wl).get('namespace')}: "
                        "Kueue cannot admit a workload sent to it]"]
            except Absent:
                return []
        if not cq:
            return []
        try:
            return kueue.clusterqueue_summary(self.api.get(WORKLOADS["clusterqueue"], None, cq))
        except NotFound:
            return [f"[crashcart: ClusterQueue {cq} does not exist]"]

    def _tool_kubectl_events(self, a: EventsInput) -> EventsOutput:
        fields = ["type=Warning"] if a.warnings_only else []
        wanted = (a.object or "").strip()
        kind, _, name = render.event_parts(wanted) if "/" in wanted else ("", None, wanted)
        raw: list[dict[str, Any]] = []
        namespace = a.namespace or (NODE_EVENTS if kind.lower() == "node" else None)
        if name:
            exact = fields + [f"involvedObject.name={name}"]
            raw = self.api.list(EVENT, namespace, fields=",".join(exact))[0]
        if not raw:
            # Not an exact name: kubectl's user would grep; so does this.
            raw = self.api.list(EVENT, namespace, fields=",".join(fields) or None)[0]
        events = [parse.event(e) for e in raw]
        since = render.aware(a.since) if a.since else None
        needle = wanted.lower()
        events = [e for e in events if (since is None or e.time >= since)
                  and (not needle or needle in e.object.lower() or name.lower() in e.object.lower())
                  and (not kind or e.object.lower().startswith(kind.lower() + "/"))]
        events.sort(key=lambda e: e.time)
        lines = render.events_lines(events, self.now(), lambda ev: render.event_parts(ev.object)[1],
                                    all_namespaces=a.namespace is None, namespace=a.namespace)
        text, truncated = self._bounded(lines, pinned=1)
        return EventsOutput(text=text, truncated=truncated, events=events)

    # --- read tools: nodes -------------------------------------------------------------------

    def node_models(self, raw_nodes: list[dict[str, Any]] | None = None) -> list[Node]:
        raw_nodes = raw_nodes if raw_nodes is not None else self.api.list(NODE)[0]
        running = self.api.list(POD, None, fields="status.phase=Running")[0]
        busy = {(p.get("spec") or {}).get("nodeName") for p in running}
        return [parse.node_model(n, self.settings.node_pool_labels, parse.meta(n)["name"] in busy) for n in raw_nodes]

    def _tool_kubectl_get_nodes(self, a: SinfoInput) -> NodesOutput:
        nodes = self.node_models([self.node(a.node)] if a.node else None)
        if a.partition is not None:
            known = sorted({n.partition for n in nodes if n.partition})
            if a.partition not in known:
                raise ToolError(f"node pool {a.partition!r} is not in this cluster (known: {_known(known)})")
            nodes = [n for n in nodes if n.partition == a.partition]
        text, truncated = self._bounded(render.kubectl_nodes_lines(nodes), pinned=1)
        return NodesOutput(text=text, truncated=truncated, rows=[parse.node_row(n) for n in nodes])

    def _unavailable(self, node: str, what: str) -> str:
        return (f"crashcart: {what} of node {node} is not available: this cluster config sets no node access "
                "(kubernetes.node_access.method: daemonset names a pod on every GPU node to run it in)")

    def _node_exec(self, node: str, command: list[str], what: str) -> str | None:
        """Run a command in the configured DaemonSet's pod on `node` (pods/exec); its stdout,
        or None when no node access is configured."""
        access = self.settings.node_access
        if access.method != "daemonset":
            return None
        pods = self.api.list(POD, access.namespace, labels=access.selector, fields=f"spec.nodeName={node}")[0]
        if not pods:
            raise ToolError(f"no pod of the node-access DaemonSet ({access.selector} in namespace {access.namespace}) "
                            f"runs on node {node}, so {what} cannot be read there")
        from kubernetes.client import CoreV1Api
        from kubernetes.client.rest import ApiException
        from kubernetes.stream import stream

        m = parse.meta(pods[0])
        try:
            resp = stream(CoreV1Api(self.api.client).connect_get_namespaced_pod_exec, m["name"], m["namespace"],
                          command=command, container=access.container, stderr=True, stdin=False, stdout=True,
                          tty=False, _preload_content=False)
            resp.run_forever(timeout=self.settings.connection.request_timeout)
            out, err, rc = resp.read_stdout() or "", resp.read_stderr() or "", resp.returncode
            resp.close()
        except ApiException as e:
            raise ToolError(f"{what} of node {node}: exec in pod {m['namespace']}/{m['name']} failed: {e.reason}") from None
        if rc:
            raise ToolError(f"{what} of node {node}: `{' '.join(command)}` in pod {m['namespace']}/{m['name']} "
                            f"exited {rc}: {err.strip()[-300:]}")
        return out

    def _dcgm(self, node: str) -> tuple[str, list, str | None] | None:
        """The DCGM exporter's reading of `node`: (where, samples with each GPU's last Xid, model),
        or None when no exporter is configured."""
        dc = self.settings.node_access.dcgm_exporter
        if dc is None:
            return None
        pods = self.api.list(POD, dc.namespace, labels=dc.selector, fields=f"spec.nodeName={node}")[0]
        if not pods:
            raise ToolError(f"no DCGM exporter pod ({dc.selector} in namespace {dc.namespace}) runs on node {node}, "
                            "so its GPU metrics cannot be read")
        m = parse.meta(pods[0])
        where = f"pod {m['namespace']}/{m['name']}:{dc.port}{dc.path}"
        text = self.api.call("GET", f"{self.api.path(POD, m['namespace'], m['name'])}:{dc.port}/proxy{dc.path}",
                             what=f"the DCGM exporter's metrics ({where})")
        try:
            found, model = dcgm.gpu_samples(text if isinstance(text, str) else str(text), node, self.now())
        except dcgm.MetricsError as e:
            raise ToolError(f"the DCGM exporter's metrics ({where}) cannot be read: {e}") from None
        return where, found, model

    def _tool_nvidia_smi_query(self, a: NodeInput) -> GpuOutput:
        self.node(a.node)
        out = self._node_exec(a.node, ["nvidia-smi", f"--query-gpu={render.NVIDIA_SMI_QUERY}", "--format=csv"], "nvidia-smi")
        if out is None and (read := self._dcgm(a.node)):
            where, found, model = read
            lines = [f"# no node access for nvidia-smi: the same fields from the DCGM exporter ({where})",
                     *render.nvidia_smi_csv(found, model), *render.xid_lines(found)]
            text, truncated = self._bounded(lines)
            return GpuOutput(node=a.node, text=text, truncated=truncated, gpus=found)
        if out is None:
            return GpuOutput(node=a.node, text=self._unavailable(a.node, "nvidia-smi"), gpus=[])
        from crashcart.tools.backends.slurm._parse import nvidia_smi_samples

        samples, _ = nvidia_smi_samples(out, self.now())
        text, truncated = self._bounded(out.splitlines())
        return GpuOutput(node=a.node, text=text, truncated=truncated, gpus=samples)

    def _tool_gpu_metrics(self, a: MetricsInput) -> GpuOutput:
        self.node(a.node)
        read = self._dcgm(a.node)
        if read is None:
            return GpuOutput(node=a.node, gpus=[], text=(
                f"No GPU samples for node {a.node}: GPU metrics are not available on this cluster "
                "(kubernetes.node_access.dcgm_exporter names the DCGM exporter to read them from)."))
        where, found, _ = read
        now = self.now()
        if (a.until and render.aware(a.until) < now - timedelta(minutes=1)) or (a.since and render.aware(a.since) > now):
            return GpuOutput(node=a.node, gpus=[], text=(
                f"No GPU samples for node {a.node} in that window: the DCGM exporter ({where}) serves only the "
                f"current reading ({render.iso_z(now)}), no history."))
        if not found:
            return GpuOutput(node=a.node, gpus=[], text=f"The DCGM exporter ({where}) reported no GPU of node {a.node}.")
        lines = [f"# DCGM exporter {where}: the current reading (it keeps no history)",
                 *render.gpu_metrics_table(found, now), *render.xid_lines(found)]
        text, truncated = self._bounded(lines, pinned=2)
        return GpuOutput(node=a.node, text=text, truncated=truncated, gpus=found)

    def _tool_kernel_log(self, a: NodeLogInput) -> NodeLogOutput:
        self.node(a.node)
        out = self._node_exec(a.node, ["dmesg", "-T"], "the kernel log")
        if out is None:
            text = self._unavailable(a.node, "the kernel log")
            if read := self._dcgm(a.node):
                # Not the kernel log, but the one kernel-log fact the exporter carries.
                text += "\n" + "\n".join(render.xid_lines(read[1]) or ["(the DCGM exporter reports no Xid field)"]) \
                    + f" [from the DCGM exporter, {read[0]}]"
            return NodeLogOutput(node=a.node, text=text, total_lines=0)
        text, truncated, total = render.bound_lines(out.splitlines(), a.tail, a.grep, a.since,
                                                    render.kernel_log_stamp(self.now()))
        return NodeLogOutput(node=a.node, text=text, truncated=truncated, total_lines=total)


__all__ = ["KubernetesBackend", "Subject"]
