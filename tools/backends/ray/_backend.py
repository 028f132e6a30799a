"""The ray backend: Contract 1's tools on a real Ray cluster, through Ray's own APIs.

Jobs come from the Jobs API (JobSubmissionClient: status, driver exit code, driver log);
what happened inside a job from the state API (failed tasks with their error_type, dead
actors with their death_cause, workers with their exit_type), the raylet's log (the
memory monitor's kill reason) and the autoscaler's status (`ray status`: pending demands,
DRAINING nodes). Every tool returns the same typed output as the fixture backend, so the
agent cannot tell them apart. Writes and the guard's facts live in `_actions.py`.

A job's id is its submission id (`raysubmit_...` or the one it was submitted with).
Under KubeRay (a `kubernetes:` section in the ray settings) the kubectl_* tools answer
from the Kubernetes backend, ray_job_status adds what the job's RayJob and RayCluster say
(`_kuberay.py`), and the watch reports RayJobs the operator failed before the head ran them;
otherwise the kubectl_* tools say there is no Kubernetes API to ask.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any


from crashcart.tools import render
from crashcart.tools._spec import ToolError, ToolInput
from crashcart.tools.backends.base import LiveBackend, ClusterChanges
from crashcart.tools.backends.ray import _kuberay as kuberay
from crashcart.tools.backends.ray import _parse as parse
from crashcart.tools.backends.ray._client import RayClient
from crashcart.tools.backends.ray._config import RaySettings
from crashcart.tools.backends.slurm._jobfiles import JobFiles
from crashcart.tools.backends.slurm._parse import as_job
from crashcart.tools.backends.slurm._submit import args_config
from crashcart.tools.catalog import (
    ConfigOutput, DescribeInput, DescribeOutput, EventsInput, EventsOutput, GpuOutput, HistoryInput, JobInput,
    JobRow, JobsOutput, ListJobsInput, LogOutput, LogsInput, MetricsInput, NodeInput, NodeLogInput, NodeLogOutput,
    NodesOutput, NoInput, ProgressOutput, RayJobOutput, SinfoInput, AutoscalerOutput,
)
from crashcart.tools.cluster import Autoscaler, ResourceDemand

LINEAGE_KEY = "crashcart_resubmit_of"
"""The metadata key a resubmitted job carries: the submission id it replaces."""
CACHE_SECONDS = 2.0
SUBMIT_KEYS = ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory")
"""Config keys the Jobs API itself owns (plus entrypoint_resources.*): submit options, not arguments."""
NO_KUBERNETES = ("this Ray cluster has no `ray.kubernetes` section in cluster.yaml (it is not KubeRay), "
                 "so there is no Kubernetes API to ask; use ray_job_status and ray_list_nodes")


def _known(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown}, ... ({len(names)} in all)" if len(names) > limit else shown or "none"


class RayBackend(LiveBackend):
    kind = "ray"

    def __init__(self, settings: RaySettings | None = None, client: RayClient | Any = None):
        from crashcart.tools.backends.ray._actions import Actions

        self.settings = settings or RaySettings()
        self.client = client or RayClient(self.settings)
        self.actions = Actions(self)
        self.escalations: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []
        self._cache: dict[str, tuple[float, Any]] = {}
        self._kube = None
        self._rayjob_watch: kuberay.RayJobWatch | None = None
        """Under KubeRay, the watch's RayJobs (list once, then watch)."""

    @property
    def kube(self):
        """The Kubernetes backend of the cluster KubeRay runs in, or None (plain Ray)."""
        if self.settings.kubernetes is None:
            return None
        if self._kube is None:
            from crashcart.tools.backends.kubernetes import KubernetesBackend  # its client loads on first use

            self._kube = KubernetesBackend(self.settings.kubernetes)
        return self._kube

    def forget(self) -> None:
        self._cache.clear()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def close(self) -> None:
        pass


    def _cached(self, key: str, load):
        hit = self._cache.get(key)
        if hit and time.monotonic() - hit[0] < CACHE_SECONDS:
            return hit[1]
        value = load()
        self._cache[key] = (time.monotonic(), value)
        return value

    def _bounded(self, lines: list[str], pinned: int = 0) -> tuple[str, bool]:
        text, truncated, _ = render.bound_lines(lines, pinned=pinned)
        return text, truncated

    # --- nodes -------------------------------------------------------------------------

    def status(self):
        return self._cached("status", self.client.cluster_status)

    def nodes(self) -> list[parse.NodeInfo]:
        return self._cached("nodes", lambda: parse.nodes(self.client.state("nodes"), parse.node_activity(self.status())))

    def node(self, name: str) -> parse.NodeInfo:
        infos = self.nodes()
        for n in infos:
            if name in (n.name, n.node_id):
                return n
        raise ToolError(f"node {name!r} is not in this Ray cluster (known: {_known([n.name for n in infos])})")

    def node_names(self) -> dict[str, str]:
        return {n.node_id: n.name for n in self.nodes()}

    # --- jobs --------------------------------------------------------------------------

    def all_jobs(self) -> list[dict[str, Any]]:
        return self._cached("jobs", lambda: [d for d in self.client.list_jobs() if parse.job_id(d)])

    def details(self, job_id: str) -> dict[str, Any]:
        found = self.client.job(job_id)
        if found is None:
            known = [parse.job_id(d) for d in self.all_jobs()]
            raise ToolError(f"job {job_id!r} is not known to this Ray cluster's Jobs API (known: {_known(known)})")
        return found

    def row(self, details: dict[str, Any]) -> JobRow:
        return parse.job_row(details, self.node_names())

    def attempts(self, details: dict[str, Any]) -> list[dict[str, Any]]:
        """Earlier runs of a job, oldest first: the jobs crashcart resubmitted it from (each
        resubmit's metadata names the job it replaces)."""
        by_id = {parse.job_id(d): d for d in self.all_jobs()}
        chain: list[dict[str, Any]] = []
        here = details
        while (parent := (here.get("metadata") or {}).get(LINEAGE_KEY)) and parent in by_id and len(chain) < 20:
            here = by_id[parent]
            chain.insert(0, here)
        return chain

    def driver_log(self, job_id: str) -> list[str]:
        return self.client.logs(job_id).splitlines()[-self.settings.max_log_lines:]

    # --- what the state API knows about a job ----------------------------------------------------

    def job_internals(self, d: dict[str, Any]) -> list[str]:
        """Failed and unschedulable tasks, dead actors and killed workers of one job, with the
        memory monitor's own kill reason: what `ray list tasks/actors/workers` and raylet.out say."""
        ray_job = d.get("job_id")
        if not ray_job:
            return []
        lines: list[str] = []
        tasks = self.client.state("tasks", [("job_id", "=", ray_job)])
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        waiting = [t for t in tasks if t.get("state") == "PENDING_NODE_ASSIGNMENT"]
        if failed:
            lines += ["", f"Failed tasks (ray list tasks --filter job_id={ray_job} --filter state=FAILED):",
                      *parse.task_lines(failed)]
        if waiting:
            lines += ["", "Tasks waiting for a node (state=PENDING_NODE_ASSIGNMENT):", *parse.task_lines(waiting)]
        actors = [a for a in self.client.state("actors", [("job_id", "=", ray_job)]) if a.get("state") == "DEAD"]
        if actors:
            lines += ["", f"Dead actors (ray list actors --filter job_id={ray_job} --filter state=DEAD):",
                      *parse.actor_lines(actors)]
        pids = {int(t["worker_pid"]) for t in failed if t.get("worker_pid")} | {int(a["pid"]) for a in actors if a.get("pid")}
        if pids:
            workers = [w for w in self.client.state("workers", [("is_alive", "=", False)])
                       if w.get("pid") in pids and w.get("exit_type") not in (None, "INTENDED_USER_EXIT")]
            if workers:
                lines += ["", "Workers that exited (ray list workers --filter is_alive=False):", *parse.worker_lines(workers)]
            if any(t.get("error_type") == "OUT_OF_MEMORY" for t in failed) or \
                    any(w.get("exit_type") == "NODE_OUT_OF_MEMORY" for w in workers):
                lines += self._oom_reasons({t.get("node_id") for t in failed} | {a.get("node_id") for a in actors})
        return lines

    def _oom_reasons(self, node_ids: set[str | None]) -> list[str]:
        found: list[str] = []
        for node_id in sorted(n for n in node_ids if n):
            try:
                text = self.client.node_log(node_id, "raylet.out", tail=5000)
            except ToolError as e:
                found.append(f"  (raylet.out of node {node_id} could not be read: {e})")
                continue
            found += [f"  {line.strip()[:600]}" for line in text.splitlines() if "OOM kill reason" in line][-5:]
        return ["", "The memory monitor's kill reason (raylet.out):", *found] if found else []

    def pending_demands(self) -> list[str]:
        """`ray status` as Ray prints it when something waits, then the bundles no node can ever hold."""
        status = self.status()
        bundles = parse.demand_bundles(status)
        if not bundles:
            return []
        infos = self.nodes()
        never = [b for b in bundles if not parse.fits_somewhere(b, infos)]
        return ["", "$ ray status", *self.client.status_text(status).splitlines(),
                *([""] + [f"[crashcart: no node of this cluster has the resources of {b}]" for b in never] if never else [])]

    # --- read tools: jobs ------------------------------------------------------------------

    def kuberay_lines(self, job: str) -> tuple[dict[str, Any] | None, list[str]]:
        """Under KubeRay, the RayJob behind `job` and what it and its RayCluster say."""
        if not self.kube:
            return None, []
        try:
            rj = kuberay.rayjob_for(self.kube, job)
            return rj, (kuberay.lines(self.kube, rj) if rj else [])
        except ToolError as e:
            return None, ["", f"KubeRay: the RayJob behind this job could not be read ({e})"]

    def _tool_ray_job_status(self, a: JobInput) -> RayJobOutput:
        try:
            d = self.details(a.job)
        except ToolError:
            # A RayJob that failed before the head ran anything is known only to Kubernetes.
            rj, lines = self.kuberay_lines(a.job)
            if rj is None:
                raise
            row = kuberay.failed_row(rj, self.kube.settings.user_labels)
            status = row.state if row else str((rj.get("status") or {}).get("jobStatus") or "PENDING")
            text, truncated = self._bounded([f"The Ray head has no job {a.job!r}; its RayJob says:", *lines[1:]])
            return RayJobOutput(job=a.job, status=status, message=(rj.get("status") or {}).get("message"),
                                text=text, truncated=truncated, row=row)
        row = self.row(d)
        lines = parse.status_lines(d)
        if d.get("driver_exit_code") is not None:
            lines.append(f"Driver exit code: {d['driver_exit_code']}")
        if d.get("error_type"):
            lines.append(f"Error type: {d['error_type']}")
        lines += self.job_internals(d)
        if row.state in parse.ACTIVE:
            lines += self.pending_demands()
            # The autoscaler's verdict on this job's requests is printed into its driver log.
            try:
                said = [l for l in self.driver_log(a.job) if "(autoscaler" in l]
            except ToolError as e:
                said = [f"(the driver log could not be read: {e})"]
            if said:
                lines += ["", "Autoscaler messages in the driver log:", *[_no_ansi(l) for l in said[-5:]]]
        lines += self.kuberay_lines(a.job)[1]
        text, truncated = self._bounded([_no_ansi(l) for l in lines])
        return RayJobOutput(job=a.job, status=row.state, message=_no_ansi(d.get("message") or "") or None,
                            text=text, truncated=truncated, row=row)

    def _tool_get_logs(self, a: LogsInput) -> LogOutput:
        d = self.details(a.job)
        source = a.job
        if a.attempt is not None:
            earlier = self.attempts(d)
            if not 1 <= a.attempt <= len(earlier):
                raise ToolError(f"job {a.job!r} has {len(earlier)} earlier attempt(s); "
                                f"attempt must be 1..{len(earlier)} or omitted for the latest")
            source = parse.job_id(earlier[a.attempt - 1])
        lines = [_no_ansi(l) for l in self.driver_log(source)]
        text, truncated, total = render.bound_lines(lines, a.tail, a.grep, a.since, render.job_log_stamp(self.now()))
        return LogOutput(job=a.job, text=text, truncated=truncated, total_lines=total)

    def _filter(self, rows: list[JobRow], *, node=None, partition=None, user=None, state=None) -> list[JobRow]:
        wanted = {s.upper() for s in state or []}
        return [r for r in rows if (node is None or node in r.nodes) and (partition is None or r.partition == partition)
                and (user is None or r.user == user) and (not wanted or r.state.upper() in wanted)]

    def _tool_list_jobs(self, a: ListJobsInput) -> JobsOutput:
        if a.node:
            self.node(a.node)
        details = self.all_jobs()
        rows = self._filter([self.row(d) for d in details], node=a.node, partition=a.partition, user=a.user, state=a.state)
        keep = {r.job for r in rows}
        text, truncated = self._bounded(parse.jobs_lines([d for d in details if parse.job_id(d) in keep], self.now()), pinned=8)
        return JobsOutput(text=text, truncated=truncated, rows=rows)

    def _tool_job_history(self, a: HistoryInput) -> JobsOutput:
        if a.job:
            d = self.details(a.job)
            entries = [(self.row(e), i) for i, e in enumerate(self.attempts(d), 1)] + [(self.row(d), None)]
        else:
            since = self.now() - timedelta(days=a.days)
            rows = [self.row(d) for d in self.all_jobs()]
            rows = [r for r in self._filter(rows, user=a.user, partition=a.partition)
                    if r.submit_time is None or r.submit_time >= since]
            entries = [(r, None) for r in rows]
        rows = [r.model_copy(update={"attempt": n}) for r, n in entries]
        lines = render.history_lines([(as_job(r), n) for r, n in entries], self.now())
        text, truncated = self._bounded(lines, pinned=1)
        return JobsOutput(text=text, truncated=truncated, rows=rows)

    def _tool_training_progress(self, a: JobInput) -> ProgressOutput:
        row = self.row(self.details(a.job))
        points, checkpoints = self.progress(self.driver_log(a.job))
        text, truncated = self._bounded(render.progress_lines(as_job(row), points, checkpoints, self.now()))
        return ProgressOutput(job=a.job, text=text, truncated=truncated, points=points, checkpoints=checkpoints)

    # The driver log reads like a Slurm job's output: the same progress regexes apply.
    progress = JobFiles.progress

    def config_of(self, d: dict[str, Any]) -> dict[str, Any]:
        """The knobs a resubmit can change: the entrypoint's `--key=value` arguments, the
        runtime_env's env_vars (as env.*), and the Jobs API's own resource options."""
        _, args = parse.entrypoint_args(d.get("entrypoint") or "")
        config = args_config(args)
        env = (d.get("runtime_env") or {}).get("env_vars") or {}
        if env:
            config["env"] = dict(env)
        for key in SUBMIT_KEYS:
            if d.get(key) is not None:
                config[key] = d[key]
        if d.get("entrypoint_resources"):
            config["entrypoint_resources"] = dict(d["entrypoint_resources"])
        return config

    def _tool_job_config(self, a: JobInput) -> ConfigOutput:
        import yaml

        d = self.details(a.job)
        config = self.config_of(d)
        runtime_env = {k: v for k, v in (d.get("runtime_env") or {}).items() if k != "env_vars"}
        lines = [f"# ray job {a.job} as submitted", f"# entrypoint: {d.get('entrypoint')}"]
        if runtime_env:
            lines.append(f"# runtime_env (kept as is): {runtime_env}")
        lines += yaml.safe_dump(config, sort_keys=False).splitlines() if config else ["{}"]
        text, truncated = self._bounded(lines)
        return ConfigOutput(job=a.job, config=config, text=text, truncated=truncated)

    # --- read tools: nodes -----------------------------------------------------------------------

    def _select_nodes(self, a: SinfoInput) -> list[parse.NodeInfo]:
        if a.node:
            return [self.node(a.node)]
        infos = self.nodes()
        if a.partition:
            picked = [n for n in infos if n.group == a.partition]
            if not picked:
                raise ToolError(f"node group {a.partition!r} is not in this Ray cluster "
                                f"(known: {_known(sorted({n.group or '' for n in infos}))})")
            return picked
        return infos

    def _tool_ray_list_nodes(self, a: SinfoInput) -> NodesOutput:
        infos = self._select_nodes(a)
        text, truncated = self._bounded(parse.nodes_lines(infos, self.now()), pinned=8)
        return NodesOutput(text=text, truncated=truncated, rows=[n.row() for n in infos])

    def _tool_ray_autoscaler_status(self, a: NoInput) -> AutoscalerOutput:
        status = self.status()
        demands = [ResourceDemand(resources=bundle, count=count, kind=kind)
                   for bundle, count, kind in parse.demands(status)]
        lines = [*self.client.status_text(status).splitlines(), "",
                 "[crashcart: each node type's max_workers lives in the autoscaler's own config, which "
                 "Ray's cluster status does not carry; node types are not listed]"]
        text, truncated = self._bounded(lines)
        return AutoscalerOutput(text=text, truncated=truncated, autoscaler=Autoscaler(demands=demands))

    def _tool_nvidia_smi_query(self, a: NodeInput) -> GpuOutput:
        node = self.node(a.node)
        return GpuOutput(node=node.name, gpus=[], text=(
            f"nvidia-smi is not available for Ray node {node.name}: Ray's APIs run no commands on a node "
            f"(it reports {node.gpus} GPU(s) in its resources)"))

    def _tool_gpu_metrics(self, a: MetricsInput) -> GpuOutput:
        node = self.node(a.node)
        return GpuOutput(node=node.name, gpus=[], text=(
            f"No GPU samples for Ray node {node.name}: this cluster keeps no GPU telemetry crashcart can read "
            "(no DCGM exporter is configured)"))

    def _tool_kernel_log(self, a: NodeLogInput) -> NodeLogOutput:
        node = self.node(a.node)
        return NodeLogOutput(node=node.name, total_lines=0, text=(
            f"The kernel log of Ray node {node.name} is not readable through Ray's APIs; "
            "the memory monitor's kills are in ray_job_status (raylet.out)"))

    # --- Kubernetes tools: the KubeRay cluster's API, when there is one -------------------------------

    def _kubectl(self, name: str, a: ToolInput):
        from crashcart.tools._spec import REGISTRY

        return self.kube.run(REGISTRY.get(name), a)

    def _tool_kubectl_get_nodes(self, a: SinfoInput) -> NodesOutput:
        if self.kube:
            return self._kubectl("kubectl_get_nodes", a)
        return NodesOutput(text=f"kubectl get nodes: {NO_KUBERNETES}", rows=[])

    def _tool_kubectl_describe(self, a: DescribeInput) -> DescribeOutput:
        if self.kube:
            return self._kubectl("kubectl_describe", a)
        return DescribeOutput(kind=a.kind, name=a.name, text=f"kubectl describe {a.kind} {a.name}: {NO_KUBERNETES}")

    def _tool_kubectl_events(self, a: EventsInput) -> EventsOutput:
        if self.kube:
            return self._kubectl("kubectl_events", a)
        return EventsOutput(text=f"kubectl get events: {NO_KUBERNETES}", events=[])

    # --- watching ----------------------------------------------------------------------------------

    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        """One list_jobs for jobs that failed in the window, the autoscaler's status for demands
        no node can hold (then one state-API call to name their jobs), the node list for nodes
        that died: a handful of calls per poll however many jobs the head remembers, plus one
        log read per job running longer than the stall time (the stall check)."""
        now = self.now()
        since = render.aware(since)
        details = self.client.list_jobs()
        changes = ClusterChanges(now=now)
        names = self.node_names()
        for d in details:
            if str(d.get("status")).upper() in parse.FAILED and parse.job_id(d) and (end := parse.when(d.get("end_time"))) \
                    and end > since:
                changes.failed.append(parse.job_row(d, names))
        if self.kube:
            # RayJobs the operator failed before the head ever ran them (or after it went away).
            known = {parse.job_id(d) for d in details}
            if self._rayjob_watch is None:
                self._rayjob_watch = kuberay.RayJobWatch(self.kube)
            for rj in self._rayjob_watch.rayjobs():
                row = kuberay.failed_row(rj, self.kube.settings.user_labels)
                if row and row.job not in known and row.end_time and row.end_time > since:
                    changes.failed.append(row)
        changes.pending = self._unschedulable(details, names)
        changes.stalled = self._stalled(details, names, now, timedelta(minutes=stall_minutes))
        changes.nodes_down = [n.row() for n in self.nodes() if n.state == "down" and _unplanned(n)]
        return changes

    def _stalled(self, details: list[dict[str, Any]], names: dict[str, str], now: datetime,
                 stall: timedelta) -> list[JobRow]:
        """Running jobs whose driver log's newest timestamped line is older than `stall`: the
        Jobs API records no progress, so the log is the heartbeat. One log read per running
        job old enough to have stalled; a log with no timestamps proves nothing and is skipped."""
        stamp_of = render.job_log_stamp(now)
        stalled = []
        for d in details:
            started = parse.when(d.get("start_time"))
            if str(d.get("status")).upper() != "RUNNING" or not parse.job_id(d) or not started or now - started < stall:
                continue
            lines = self.client.logs(parse.job_id(d)).splitlines()[-200:]
            last = next((t for t in map(stamp_of, reversed(lines)) if t is not None), None)
            if last is not None and now - last >= stall:
                stalled.append(parse.job_row(d, names))
        return stalled

    def _unschedulable(self, details: list[dict[str, Any]], names: dict[str, str]) -> list[JobRow]:
        infos = self.nodes()
        if all(parse.fits_somewhere(b, infos) for b in parse.demand_bundles(self.status())):
            return []
        by_ray_id = {d.get("job_id"): d for d in details if parse.job_id(d) and str(d.get("status")).upper() in parse.ACTIVE}
        waiting = self.client.state("tasks", [("state", "=", "PENDING_NODE_ASSIGNMENT")])
        stuck: dict[str, JobRow] = {}
        for t in waiting:
            d = by_ray_id.get(t.get("job_id"))
            if d and not parse.fits_somewhere(t.get("required_resources") or {}, infos):
                stuck[parse.job_id(d)] = parse.job_row(d, names).model_copy(update={"reason": "Infeasible"})
        return list(stuck.values())


def _unplanned(node: parse.NodeInfo) -> bool:
    """A node the autoscaler retired as idle, or that was drained, did not fail."""
    message = (node.message or "").lower()
    return not any(w in message for w in ("idle", "drain", "autoscaler", "terminated by", "crashcart"))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _no_ansi(line: str) -> str:
    return _ANSI.sub("", line)


__all__ = ["RayBackend"]
