"""The fixture backend: a scenario's cluster, served from memory.

Read tools answer from the recorded state the way the real commands would;
write tools change that state (a drained node, a new job) so that scoring can
read what the agent did from `self.cluster`, `self.escalations` and
`self.notifications`.
"""

from __future__ import annotations

import copy
import re
from datetime import datetime, timedelta
from typing import Any

import yaml
from pydantic import BaseModel

from crashcart.tools import render
from crashcart.tools._spec import ALL_BACKENDS, ToolCall, ToolError, ToolInput, ToolSpec
from crashcart.tools.backends.base import (
    STUCK_PENDING_REASONS, ActionTarget, Backend, ClusterChanges, held_after_failed_launch, set_dotted,
)
from crashcart.tools.catalog import (
    ActionOutput, CancelInput, ConfigOutput, DescribeInput, DiskOutput, DescribeOutput, EscalateInput, EventsInput,
    EventsOutput, GpuOutput, HistoryInput, JobInput, JobRow, JobsOutput, ListJobsInput, LogOutput,
    LogsInput, MetricsInput, NodeInput, NodeLogInput, NodeLogOutput, NodeRow, NodesOutput, NodeWriteInput,
    NotifyInput, PartitionInput, PartitionOutput, ProgressOutput, QueueInput, RayJobOutput, ResubmitInput,
    SacctInput, SinfoInput, AutoscalerOutput, ClusterQueuesOutput, NoInput, SacctmgrInput, SacctmgrOutput,
    SprioOutput, SshareInput, SshareOutput,
)
from crashcart.tools.diskfree import parse_df
from crashcart.tools.render import scheduler as render_scheduler
from crashcart.tools.backends.slurm._parse import scontrol_record
from crashcart.tools.cluster import Cluster, Event, GpuSample, Job, Node, Partition, Taint

UNAVAILABLE = ("down", "drained", "draining", "not_ready", "cordoned")
QUEUED = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
# A run that finished its work (Slurm, Kubernetes, Ray spellings).
FINISHED_RUN_STATES = frozenset({"COMPLETED", "SUCCEEDED", "COMPLETE"})
# sacct/squeue accept short state codes; a model may use either form.
STATE_CODES = {
    "PD": "PENDING", "R": "RUNNING", "CF": "CONFIGURING", "CG": "COMPLETING", "CD": "COMPLETED",
    "F": "FAILED", "CA": "CANCELLED", "NF": "NODE_FAIL", "TO": "TIMEOUT", "OOM": "OUT_OF_MEMORY",
    "PR": "PREEMPTED", "S": "SUSPENDED", "RQ": "REQUEUED", "BF": "BOOT_FAIL", "DL": "DEADLINE",
}
CORDON_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def _known(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown}, ... ({len(names)} in all)" if len(names) > limit else shown or "none"


class FixtureBackend(Backend):
    def __init__(self, cluster: Cluster, kind: str):
        if kind not in ALL_BACKENDS:
            raise ValueError(f"unknown backend kind {kind!r}; one of {', '.join(ALL_BACKENDS)}")
        self.kind = kind
        self.cluster = cluster.model_copy(deep=True)  # the scenario's own copy stays pristine
        self.escalations: list[dict[str, Any]] = []
        self.requests: dict[str, str] = {}
        """resubmit request ids already served -> the job each created (the submit comment on Slurm)."""
        self.notifications: list[dict[str, Any]] = []

    def now(self) -> datetime:
        return self.cluster.now

    def run(self, spec: ToolSpec, args: ToolInput | dict[str, Any]) -> BaseModel:
        return getattr(self, f"_tool_{spec.name}")(self.checked_args(spec, args))

    # --- lookups --------------------------------------------------------------------

    def _node(self, name: str) -> Node:
        node = self.cluster.node(name)
        if node is None:
            raise ToolError(f"node {name!r} is not in this cluster "
                            f"(known: {_known([n.name for n in self.cluster.nodes])})")
        return node

    def _job(self, job_id: str, noun: str = "job") -> Job:
        job = self.cluster.job(job_id)
        if job is None:
            raise ToolError(f"{noun} {job_id!r} is not in this cluster "
                            f"(known: {_known([j.id for j in self.cluster.jobs])})")
        return job

    def _bounded(self, lines: list[str], pinned: int = 0) -> tuple[str, bool]:
        text, truncated, _ = render.bound_lines(lines, pinned=pinned)
        return text, truncated

    @staticmethod
    def _attempt(parent: Job, attempt: Job) -> Job:
        # Scenario authors often write attempts with only what differs; the rest is the job's.
        inherited = {f: getattr(parent, f) for f in ("name", "user", "partition", "gpus")
                     if not getattr(attempt, f)}
        return attempt.model_copy(update=inherited)

    def _with_attempts(self, job: Job) -> list[tuple[Job, int | None]]:
        return [(self._attempt(job, a), i) for i, a in enumerate(job.attempts, 1)] + [(job, None)]

    @staticmethod
    def _row(job: Job, attempt: int | None = None) -> JobRow:
        return JobRow(
            job=job.id, name=job.name, user=job.user, partition=job.partition, state=job.state,
            reason=job.reason, exit_code=job.exit_code, nodes=job.nodes, gpus=job.gpus,
            submit_time=job.submit_time, start_time=job.start_time, end_time=job.end_time,
            attempt=attempt, depends_on=job.depends_on,
            # sbatch --account/--qos as submitted: sacct prints them whichever way a scenario wrote them.
            account=job.account or _submitted(job, "account"), qos=job.qos or _submitted(job, "qos"),
        )

    def _state_matches(self, job: Job, wanted: list[str] | None) -> bool:
        if not wanted:
            return True
        words = {STATE_CODES.get(w.upper(), w.upper()) for w in wanted}
        have = {job.state.upper().split(" ")[0]}  # "CANCELLED by 1000" is CANCELLED
        if self.kind == "kubernetes":
            have.add(render.pod_status(job).upper())
        return bool(words & have)

    def _job_filter(self, job: Job, *, node: str | None = None, partition: str | None = None,
                    user: str | None = None, state: list[str] | None = None) -> bool:
        return ((node is None or node in job.nodes)
                and (partition is None or job.partition == partition)
                and (user is None or job.user == user)
                and self._state_matches(job, state))

    # --- read tools: jobs ---------------------------------------------------------------

    def _tool_get_logs(self, a: LogsInput) -> LogOutput:
        job = self._job(a.job)
        source = job
        if a.attempt is not None:
            if not 1 <= a.attempt <= len(job.attempts):
                raise ToolError(f"job {job.id!r} has {len(job.attempts)} earlier attempt(s); "
                                f"attempt must be 1..{len(job.attempts)} or omitted for the latest")
            source = job.attempts[a.attempt - 1]
        text, truncated, total = render.bound_lines(
            (source.log or "").splitlines(), a.tail, a.grep, a.since, render.job_log_stamp(self.now()))
        return LogOutput(job=job.id, text=text, truncated=truncated, total_lines=total)

    def _tool_sacct(self, a: SacctInput) -> JobsOutput:
        if a.node:
            self._node(a.node)
        entries = (self._with_attempts(self._job(a.job)) if a.job
                   else [(j, None) for j in self.cluster.jobs])
        now = self.now()
        starttime = render.aware(a.starttime) if a.starttime else None
        entries = [
            (j, n) for j, n in entries
            if self._job_filter(j, node=a.node, user=a.user, state=a.state)
            and (starttime is None or (j.end_time or now) >= starttime)
        ]
        text, truncated = self._bounded(render.sacct_lines([j for j, _ in entries], now), pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=[self._row(j, n) for j, n in entries])

    def _tool_squeue(self, a: QueueInput) -> JobsOutput:
        jobs = [j for j in self.cluster.jobs if j.state.upper() in QUEUED
                and self._job_filter(j, partition=a.partition, user=a.user, state=a.state)]
        text, truncated = self._bounded(render.squeue_lines(jobs, self.now()), pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=[self._row(j) for j in jobs])

    def _tool_list_jobs(self, a: ListJobsInput) -> JobsOutput:
        if a.node:
            self._node(a.node)
        jobs = [j for j in self.cluster.jobs
                if self._job_filter(j, node=a.node, partition=a.partition, user=a.user, state=a.state)]
        now = self.now()
        if self.kind == "slurm":
            lines = render.sacct_lines(jobs, now, steps=False)
        elif self.kind == "kubernetes":
            lines = render.pods_lines(jobs, now)
        else:
            lines = render.ray_jobs_lines(jobs, now)
        text, truncated = self._bounded(lines, pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=[self._row(j) for j in jobs])

    def _tool_job_history(self, a: HistoryInput) -> JobsOutput:
        now = self.now()
        if a.job:
            entries = self._with_attempts(self._job(a.job))
        else:
            since = now - timedelta(days=a.days)
            entries = [
                (j, n) for job in self.cluster.jobs
                if self._job_filter(job, partition=a.partition, user=a.user)
                for j, n in self._with_attempts(job)
                if (j.submit_time or j.start_time) is None or (j.submit_time or j.start_time) >= since
            ]
        text, truncated = self._bounded(render.history_lines(entries, now), pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=[self._row(j, n) for j, n in entries])

    def _tool_training_progress(self, a: JobInput) -> ProgressOutput:
        job = self._job(a.job)
        points = sorted(job.progress, key=lambda p: p.time)
        checkpoints = sorted(job.checkpoints, key=lambda c: c.time)
        text, truncated = self._bounded(render.progress_lines(job, points, checkpoints, self.now()))
        return ProgressOutput(job=job.id, text=text, truncated=truncated, points=points,
                              checkpoints=checkpoints)

    def _tool_job_config(self, a: JobInput) -> ConfigOutput:
        job = self._job(a.job)
        # No scheduler prints a job's knobs; YAML is what a person would have submitted.
        dumped = yaml.safe_dump(job.config, sort_keys=False, default_flow_style=False) if job.config else ""
        lines = [f"# job {job.id} ({job.name or '-'}) as submitted"] + (dumped.splitlines() or ["{}"])
        text, truncated = self._bounded(lines)
        return ConfigOutput(job=job.id, config=copy.deepcopy(job.config), text=text, truncated=truncated)

    def _tool_ray_job_status(self, a: JobInput) -> RayJobOutput:
        job = self._job(a.job)
        text, truncated = self._bounded(render.ray_job_status_lines(job))
        return RayJobOutput(job=job.id, status=render.ray_status(job), message=render.ray_message(job),
                            text=text, truncated=truncated, row=self._row(job))

    # --- read tools: nodes ----------------------------------------------------------------

    def _nodes(self, a: SinfoInput) -> list[Node]:
        if a.node:
            return [self._node(a.node)]
        if a.partition is not None:
            known = sorted({n.partition for n in self.cluster.nodes if n.partition})
            if a.partition not in known:
                word = "partition" if self.kind == "slurm" else "node pool"
                raise ToolError(f"{word} {a.partition!r} is not in this cluster (known: {_known(known)})")
            return [n for n in self.cluster.nodes if n.partition == a.partition]
        return list(self.cluster.nodes)

    @staticmethod
    def _node_row(n: Node) -> NodeRow:
        return NodeRow(node=n.name, partition=n.partition, state=n.state, gpus=n.gpus,
                       gpu_model=n.gpu_model, reason=n.reason, labels=n.labels,
                       taints=render.node_taints(n))

    def _node_rows(self, nodes: list[Node], lines: list[str], pinned: int) -> NodesOutput:
        text, truncated = self._bounded(lines, pinned=pinned)
        return NodesOutput(text=text, truncated=truncated, rows=[self._node_row(n) for n in nodes])

    def _tool_sinfo(self, a: SinfoInput) -> NodesOutput:
        nodes = self._nodes(a)
        return self._node_rows(nodes, render.sinfo_lines(nodes), pinned=1)

    def _tool_partition_info(self, a: PartitionInput) -> PartitionOutput:
        part = next((p for p in self.cluster.partitions if p.name == a.partition), None) \
            or self._recorded_partition(a.partition)
        if part is None and not any(n.partition == a.partition for n in self.cluster.nodes):
            raise ToolError(f"partition {a.partition!r} is not known to this cluster")
        line = render.scontrol_partition_line(part, a.partition, self.cluster.nodes)
        return PartitionOutput(text=line, partition=a.partition, max_time=part.max_time if part else None)

    def _recorded_partition(self, name: str) -> Partition | None:
        """A partition the scenario recorded as scontrol printed it, among its events (object
        partition/NAME, message `PartitionName=NAME ... MaxTime=...`), the latest record first."""
        for e in sorted(self.cluster.events, key=lambda e: e.time, reverse=True):
            kind, _, obj = e.object.partition("/")
            if kind.lower() != "partition" or obj != name or not e.message.startswith(f"PartitionName={name} "):
                continue
            rec = scontrol_record(e.message)
            return Partition(name=name, max_time=rec.get("MaxTime"), default_time=rec.get("DefaultTime"),
                             max_nodes=rec.get("MaxNodes"), state=rec.get("State") or "UP")
        return None

    def _tool_kubectl_get_nodes(self, a: SinfoInput) -> NodesOutput:
        nodes = self._nodes(a)
        return self._node_rows(nodes, render.kubectl_nodes_lines(nodes), pinned=1)

    def _tool_ray_list_nodes(self, a: SinfoInput) -> NodesOutput:
        nodes = self._nodes(a)
        return self._node_rows(nodes, render.ray_nodes_lines(nodes, self.now()), pinned=8)

    def _latest_samples(self, node: Node) -> list[GpuSample]:
        now = self.now()
        latest: dict[int, GpuSample] = {}
        for s in node.gpu_telemetry:
            if s.time is not None and s.time > now:
                continue
            held = latest.get(s.index)
            # An untimed sample is "now"; among timed ones the newest wins.
            if held is None or held.time is not None and (s.time is None or s.time >= held.time):
                latest[s.index] = s
        return [latest[i] for i in sorted(latest)]

    def _tool_nvidia_smi_query(self, a: NodeInput) -> GpuOutput:
        node = self._node(a.node)
        samples = self._latest_samples(node)
        if node.nvidia_smi:
            lines = node.nvidia_smi.splitlines()
        elif samples:
            lines = render.nvidia_smi_csv(samples, node.gpu_model) + render.xid_lines(samples)
        else:
            lines = [f"No telemetry recorded for node {node.name}"]
        text, truncated = self._bounded(lines)
        return GpuOutput(node=node.name, text=text, truncated=truncated, gpus=samples)

    def _tool_gpu_metrics(self, a: MetricsInput) -> GpuOutput:
        node = self._node(a.node)
        until = a.until or self.now()
        since = a.since or until - timedelta(hours=1)
        # An untimed sample is the reading at `now`, as nvidia_smi_query serves it.
        window = sorted(
            (s for s in node.gpu_telemetry if since <= (s.time or self.now()) <= until),
            key=lambda s: (s.time or self.now(), s.index),
        )
        if window:
            lines = render.gpu_metrics_table(window, self.now()) + render.xid_lines(self._latest_samples(node))
        else:
            lines = [f"No GPU samples for node {node.name} between {render.iso_z(since)} and {render.iso_z(until)}"]
        text, truncated = self._bounded(lines)
        return GpuOutput(node=node.name, text=text, truncated=truncated, gpus=window)

    def _tool_kernel_log(self, a: NodeLogInput) -> NodeLogOutput:
        node = self._node(a.node)
        text, truncated, total = render.bound_lines(
            (node.kernel_log or "").splitlines(), a.tail, a.grep, a.since,
            render.kernel_log_stamp(self.now()))
        return NodeLogOutput(node=node.name, text=text, truncated=truncated, total_lines=total)

    def _tool_disk_usage(self, a: NodeInput) -> DiskOutput:
        node = self._node(a.node)
        # A node whose df was not recorded prints only the header: nothing is invented.
        text = node.df or "Filesystem      Size  Used Avail Use% Mounted on"
        return DiskOutput(node=node.name, text=text, mounts=parse_df(text))

    # --- read tools: Kubernetes ---------------------------------------------------------

    @staticmethod
    def _about(ev: Event, name: str) -> bool:
        return ev.object == name or ev.object.endswith(f"/{name}")

    def _event_namespace(self, ev: Event) -> str | None:
        kind, namespace, name = render.event_parts(ev.object)
        if namespace is None and kind != "node" and (job := self.cluster.job(name)):
            return job.partition
        return namespace

    def _tool_kubectl_describe(self, a: DescribeInput) -> DescribeOutput:
        now = self.now()
        events = sorted((e for e in self.cluster.events if self._about(e, a.name)), key=lambda e: e.time)
        facts: dict[str, Any] = {}
        if a.kind == "node":
            node = self._node(a.name)
            pods = [j for j in self.cluster.jobs if node.name in j.nodes and render.is_active(j.state)]
            lines = render.describe_node_lines(node, pods, events, now)
            facts["node"] = self._node_row(node)
        elif a.kind in ("workload", "clusterqueue"):
            raise ToolError(f"no Kueue {a.kind} is recorded in this scenario; describe the job or its pods instead")
        else:
            job = self._job(a.name, noun=a.kind)
            if a.namespace and job.partition and a.namespace != job.partition:
                raise ToolError(f'{a.kind}s "{a.name}" not found in namespace "{a.namespace}" '
                                f'(it is in namespace "{job.partition}")')
            if a.kind == "pod":
                lines = render.describe_pod_lines(job, events, now)
            else:
                lines = render.describe_resource_lines(a.kind, job, events, now)
            facts["job"] = self._row(job)
        text, truncated = self._bounded(lines)
        return DescribeOutput(kind=a.kind, name=a.name, text=text, truncated=truncated, **facts)

    def _tool_kubectl_events(self, a: EventsInput) -> EventsOutput:
        since = render.aware(a.since) if a.since else None
        wanted = (a.object or "").lower()

        def keep(ev: Event) -> bool:
            if a.namespace:
                ns = self._event_namespace(ev)
                if ns != a.namespace and not (ns is None and a.namespace in ev.object):
                    return False
            if wanted:
                kind, _, name = render.event_parts(ev.object)
                if wanted not in ev.object.lower() and wanted not in f"{kind}/{name}".lower():
                    return False
            return ((since is None or ev.time >= since)
                    and (not a.warnings_only or ev.type == "Warning"))

        events = sorted(filter(keep, self.cluster.events), key=lambda e: e.time)
        lines = render.events_lines(events, self.now(), self._event_namespace,
                                    all_namespaces=a.namespace is None, namespace=a.namespace)
        text, truncated = self._bounded(lines, pinned=1)
        return EventsOutput(text=text, truncated=truncated, events=events)

    # --- write tools -------------------------------------------------------------------------

    # --- the scheduler's limits ------------------------------------------------------

    def _tool_sacctmgr_show(self, a: SacctmgrInput) -> SacctmgrOutput:
        sched = self.cluster.scheduler
        if a.entity == "qos":
            text, truncated = self._bounded(render_scheduler.sacctmgr_qos_lines(sched.qos), pinned=1)
            return SacctmgrOutput(text=text, truncated=truncated, qos=sched.qos)
        lines = render_scheduler.sacctmgr_assoc_lines(sched.associations, "cluster")
        text, truncated = self._bounded(lines, pinned=1)
        return SacctmgrOutput(text=text, truncated=truncated, associations=sched.associations)

    def _tool_sshare(self, a: SshareInput) -> SshareOutput:
        rows = [r for r in self.cluster.scheduler.shares if not a.account or r.account == a.account]
        text, truncated = self._bounded(render_scheduler.sshare_lines(rows), pinned=1)
        return SshareOutput(text=text, truncated=truncated, shares=rows)

    def _tool_sprio(self, a: QueueInput) -> SprioOutput:
        rows = [r for r in self.cluster.scheduler.priorities
                if (not a.partition or r.partition == a.partition) and (not a.user or r.user == a.user)]
        text, truncated = self._bounded(render_scheduler.sprio_lines(rows), pinned=1)
        return SprioOutput(text=text, truncated=truncated, priorities=rows)

    def _tool_kueue_cluster_queues(self, a: NoInput) -> ClusterQueuesOutput:
        queues = self.cluster.scheduler.cluster_queues
        if not queues:
            return ClusterQueuesOutput(text="No resources found")
        text, truncated = self._bounded(render_scheduler.cluster_queue_lines(queues), pinned=1)
        return ClusterQueuesOutput(text=text, truncated=truncated, cluster_queues=queues)

    def _tool_ray_autoscaler_status(self, a: NoInput) -> AutoscalerOutput:
        scaler = self.cluster.scheduler.autoscaler
        if scaler is None:
            return AutoscalerOutput(text="No autoscaler is running in this cluster (no node types configured).")
        text, truncated = self._bounded(render_scheduler.ray_status_lines(scaler, self.cluster.now))
        return AutoscalerOutput(text=text, truncated=truncated, autoscaler=scaler)

    def _tool_node_drain(self, a: NodeWriteInput) -> ActionOutput:
        node = self._node(a.node)
        target = "cordoned" if self.kind == "kubernetes" else "drained"
        already = node.state == target
        node.state, node.reason = target, a.reason
        if self.kind == "kubernetes":
            if CORDON_TAINT not in node.taints:
                node.taints.append(CORDON_TAINT.model_copy())
            message = f"node/{node.name} {'already ' if already else ''}cordoned"
            pods = [j for j in self.cluster.jobs if node.name in j.nodes and render.is_active(j.state)]
            message += "".join(f"\nevicting pod {p.partition or 'default'}/{p.id}" for p in pods)
            message += f"\nnode/{node.name} drained"
        elif self.kind == "slurm":
            message = (f"scontrol update NodeName={node.name} State=DRAIN Reason=\"{a.reason}\": "
                       f"node {node.name} is {'already ' if already else 'now '}drained")
        else:
            message = f"ray drain-node: node {node.name} ({render.ray_node_id(node.name)}) drained"
        return ActionOutput(ok=True, message=message)

    def _tool_node_resume(self, a: NodeWriteInput) -> ActionOutput:
        node = self._node(a.node)
        was = node.state
        node.state, node.reason = "idle", None
        node.taints = [t for t in node.taints if t != CORDON_TAINT]
        if self.kind == "kubernetes":
            message = f"node/{node.name} uncordoned"
        elif self.kind == "slurm":
            message = f"scontrol update NodeName={node.name} State=RESUME: node {node.name} was {was}, now idle"
        else:
            message = f"node {node.name} returned to service (was {was})"
        return ActionOutput(ok=True, message=message)

    def _tool_cancel_job(self, a: CancelInput) -> ActionOutput:
        job = self._job(a.job)
        if not render.is_active(job.state):
            raise ToolError(f"job {job.id!r} is {job.state}; only pending or running jobs can be cancelled")
        job.state, job.end_time = "CANCELLED", self.now()
        message = {
            "slurm": f"scancel {job.id}: job {job.id} cancelled",
            "kubernetes": f'pod "{job.id}" deleted',
            "ray": f"Job '{job.id}' was stopped",
        }[self.kind]
        return ActionOutput(ok=True, message=message)

    def _tool_resubmit(self, a: ResubmitInput) -> ActionOutput:
        old = self._job(a.job)
        if a.request_id in self.requests:
            # The same request again (crashcart restarted mid-action): answer, don't resubmit twice.
            done = self.requests[a.request_id]
            return ActionOutput(ok=True, message=f"Already submitted as {done} (request {a.request_id})", new_job=done)
        for name in a.exclude_nodes:
            self._node(name)
        if self.kind == "slurm" and not a.changes and held_after_failed_launch(old.state, old.reason):
            return self._release(old, a)
        config = copy.deepcopy(old.config)
        for key, value in a.changes.items():
            set_dotted(config, key, value)
        excluded = list(dict.fromkeys([*config.get("exclude_nodes", []), *a.exclude_nodes]))
        if excluded:
            config["exclude_nodes"] = excluded
        # Resubmits of a resubmit count against the original id: 48213-r1, 48213-r2, ...
        root = re.sub(r"(-r\d+)+$", "", old.id)
        taken = {j.id for j in self.cluster.jobs}
        n = 1 + sum(bool(re.fullmatch(rf"{re.escape(root)}-r\d+", j)) for j in taken)
        while f"{root}-r{n}" in taken:
            n += 1
        new = old.model_copy(deep=True, update={
            "id": f"{root}-r{n}", "state": "PENDING", "reason": None, "exit_code": None,
            "nodes": [], "submit_time": self.now(), "start_time": None, "end_time": None,
            "config": config, "log": None, "progress": [],
            "attempts": [*copy.deepcopy(old.attempts), old.model_copy(deep=True, update={"attempts": []})],
        })
        self.cluster.jobs.append(new)
        if a.request_id:
            self.requests[a.request_id] = new.id
        details = "".join([f"; changes {a.changes}" if a.changes else "",
                           f"; excluding {','.join(excluded)}" if excluded else ""])
        message = {
            "slurm": f"Submitted batch job {new.id}",
            "kubernetes": f"{new.id} created in namespace {new.partition or 'default'}",
            "ray": f"Job '{new.id}' submitted successfully",
        }[self.kind]
        return ActionOutput(ok=True, message=f"{message} (resubmit of {old.id}{details})", new_job=new.id)

    def _release(self, job: Job, a: ResubmitInput) -> ActionOutput:
        """The held job itself runs again (scontrol update ExcNodeList=..., scontrol release): no copy."""
        excluded = list(dict.fromkeys([*job.config.get("exclude_nodes", []), *a.exclude_nodes]))
        if excluded:
            job.config["exclude_nodes"] = excluded
        job.state, job.reason = "PENDING", None
        if a.request_id:
            self.requests[a.request_id] = job.id
        where = f" ExcNodeList={render.compress_hostlist(excluded)}" if excluded else ""
        return ActionOutput(ok=True, new_job=job.id, message=(
            f"scontrol update JobId={job.id}{where}; scontrol release {job.id}: job {job.id} released"))

    def _tool_escalate(self, a: EscalateInput) -> ActionOutput:
        self.escalations.append({**a.model_dump(), "time": self.now()})
        return ActionOutput(ok=True, message=f"Escalated to {a.team} ({a.severity}): {a.summary}")

    def _tool_notify(self, a: NotifyInput) -> ActionOutput:
        self.notifications.append({**a.model_dump(), "time": self.now()})
        return ActionOutput(ok=True, message=f"Sent to {a.to}: {a.message}")

    # --- facts for the guard ----------------------------------------------------------------

    def target(self, call: ToolCall) -> ActionTarget:
        args = call.args
        if node_name := args.get("node"):
            node = self._node(node_name)
            peers = [n for n in self.cluster.nodes if n.partition == node.partition]
            return ActionTarget(
                tool=call.tool, node=node.name, partition=node.partition, gpus=node.gpus,
                partition_nodes=len(peers),
                partition_unavailable=sum(n.state in UNAVAILABLE for n in peers),
                node_unavailable=node.state in UNAVAILABLE,
            )
        if job_id := args.get("job"):
            job = self._job(job_id)
            checkpoints = [c for run in [job, *job.attempts] for c in run.checkpoints]
            last = max((c.time for c in checkpoints), default=None)
            # An attempt with no recorded end is counted: unknown must not look like progress. A
            # run that finished its work (an earlier run of the job that succeeded) is no restart.
            restarts = sum((last is None or a.end_time is None or a.end_time > last)
                           and str(a.state or "").upper() not in FINISHED_RUN_STATES for a in job.attempts)
            return ActionTarget(
                tool=call.tool, job=job.id, partition=job.partition, user=job.user, gpus=job.gpus,
                restarts_without_progress=restarts, last_checkpoint=last,
            )
        return ActionTarget(tool=call.tool)

    # --- watching -------------------------------------------------------------------------

    FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL",
                               "PREEMPTED", "DEADLINE", "OOMKILLED", "ERROR", "EVICTED"})

    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        now = self.now()
        stall = timedelta(minutes=stall_minutes)
        changes = ClusterChanges(now=now)
        for job in self.cluster.jobs:
            state = job.state.upper()
            if state in self.FAILED_STATES and job.end_time and since < job.end_time <= now:
                changes.failed.append(self._row(job))
            elif state == "RUNNING" and job.progress:
                last = max(job.progress, key=lambda p: p.time)
                changed = max((p.time for p in job.progress if p.step != last.step), default=None)
                # The first sample after the last step change is when progress stopped.
                stopped = min((p.time for p in job.progress if p.step == last.step
                               and (changed is None or p.time > changed)), default=last.time)
                if now - stopped >= stall:
                    changes.stalled.append(self._row(job))
            elif state == "PENDING" and job.reason in STUCK_PENDING_REASONS:
                changes.pending.append(self._row(job))
        changes.nodes_down = [self._node_row(n) for n in self.cluster.nodes if n.state in ("down", "not_ready")]
        return changes


def _submitted(job: Job, key: str) -> str | None:
    value = (job.config or {}).get(key)
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "" else None
