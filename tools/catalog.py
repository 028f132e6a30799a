"""Every tool crashcart has: its input, its output, its effect and its description.

Read tools return `text` the way the real command prints it (a model reads
it) plus the same facts as typed fields (the playbook policy reads those).
Text is bounded: `tail`/`grep`/`since` narrow it and a size cap says when it cut.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from crashcart.tools.diskfree import Mount
from crashcart.tools._spec import ToolInput, WriteInput, tool
from crashcart.tools.cluster import (
    Association, Autoscaler, Checkpoint, ClusterQueue, Event, FairShareRow, GpuSample, JobPriority, ProgressPoint,
    Qos,
)

MAX_TEXT_CHARS = 12_000
Team = Literal["hardware", "network", "infra", "storage", "user", "credentials", "capacity"]


class TextOutput(BaseModel):
    text: str
    truncated: bool = False
    """True when tail/grep/size cap left lines out; `text` then says so at its top."""


# --- inputs ---------------------------------------------------------------


class LogsInput(ToolInput):
    job: str
    tail: int = Field(200, ge=1, le=5000, description="Last N lines")
    grep: str | None = Field(None, description="Python regex; only matching lines")
    since: datetime | None = Field(None, description="Only lines stamped at or after this time")
    attempt: int | None = Field(
        None, description="An earlier attempt of the job (1 = first); the latest when omitted"
    )


class NodeLogInput(ToolInput):
    node: str
    tail: int = Field(200, ge=1, le=5000)
    grep: str | None = None
    since: datetime | None = None


class NodeInput(ToolInput):
    node: str


class JobInput(ToolInput):
    job: str


class SacctInput(ToolInput):
    job: str | None = None
    user: str | None = None
    node: str | None = Field(None, description="Jobs that ran on this node")
    state: list[str] | None = None
    starttime: datetime | None = None


class QueueInput(ToolInput):
    partition: str | None = None
    user: str | None = None
    state: list[str] | None = None


class SinfoInput(ToolInput):
    partition: str | None = None
    node: str | None = None


class PartitionInput(ToolInput):
    partition: str


class PartitionOutput(TextOutput):
    partition: str
    max_time: str | None = None
    """MaxTime as Slurm prints it ("2-00:00:00", "UNLIMITED"); None when not configured."""


class DescribeInput(ToolInput):
    kind: Literal["pod", "node", "job", "pytorchjob", "mpijob", "jobset", "rayjob", "raycluster", "workload", "clusterqueue"]
    """workload, clusterqueue: Kueue's (a workload's pending reason and admission, a queue's quota
    usage); a workload may be named by its own name or by the job it queues."""
    name: str
    namespace: str | None = None


class EventsInput(ToolInput):
    namespace: str | None = None
    object: str | None = Field(None, description="kind/name or a substring of it")
    since: datetime | None = None
    warnings_only: bool = False


class MetricsInput(ToolInput):
    node: str
    since: datetime | None = Field(None, description="Samples at or after this time (default: the last hour)")
    until: datetime | None = Field(None, description="Samples at or before this time (default: now)")


class ListJobsInput(ToolInput):
    node: str | None = None
    partition: str | None = None
    user: str | None = None
    state: list[str] | None = None


class HistoryInput(ToolInput):
    job: str | None = Field(None, description="Earlier attempts of this job")
    user: str | None = None
    partition: str | None = None
    days: int = Field(30, ge=1, le=365)


class SacctmgrInput(ToolInput):
    entity: Literal["qos", "assoc"] = Field(description="qos: every QOS and its limits; assoc: accounts and users")


class SshareInput(ToolInput):
    account: str | None = Field(None, description="Only this account (and its users)")


class NoInput(ToolInput):
    pass


class ResubmitInput(WriteInput):
    job: str
    changes: dict[str, Any] = Field(
        default_factory=dict,
        description="Config keys to set, dotted for nested (env.NCCL_SOCKET_IFNAME)",
    )
    exclude_nodes: list[str] = Field(default_factory=list)
    request_id: str | None = Field(
        None, description="Idempotency key, set by crashcart when it acts: a resubmit whose key "
        "was already used returns the job it created instead of submitting again",
    )


class NodeWriteInput(WriteInput):
    node: str


class CancelInput(WriteInput):
    job: str


class EscalateInput(WriteInput):
    team: Team
    summary: str
    severity: Literal["low", "medium", "high", "critical"] = "high"
    evidence: list[str] = Field(default_factory=list)


class NotifyInput(WriteInput):
    to: str = Field(description="A user, a team or a channel")
    message: str


# --- outputs --------------------------------------------------------------


class LogOutput(TextOutput):
    job: str
    total_lines: int = 0


class NodeLogOutput(TextOutput):
    node: str
    total_lines: int = 0


class DiskOutput(TextOutput):
    node: str
    mounts: list[Mount] = []


class JobRow(BaseModel):
    """One job as an accounting or queue row (Slurm sacct/squeue, a pod, a Ray job)."""

    job: str
    name: str | None = None
    user: str | None = None
    partition: str | None = None
    state: str
    reason: str | None = None
    exit_code: str | None = None
    nodes: list[str] = []
    gpus: int = 0
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    attempt: int | None = None
    """1-based for earlier attempts of a job; None for the job itself."""
    depends_on: list[str] = []
    account: str | None = None
    qos: str | None = None


class JobsOutput(TextOutput):
    rows: list[JobRow] = []


class NodeRow(BaseModel):
    node: str
    partition: str | None = None
    state: str
    gpus: int = 0
    gpu_model: str | None = None
    reason: str | None = None
    labels: dict[str, str] = {}
    taints: list[str] = []


class NodesOutput(TextOutput):
    rows: list[NodeRow] = []


class DescribeOutput(TextOutput):
    kind: str
    name: str
    job: JobRow | None = None
    """For a pod or job: the same facts as a list_jobs row."""
    node: NodeRow | None = None
    """For a node: the same facts as a kubectl_get_nodes row."""


class EventsOutput(TextOutput):
    events: list[Event] = []


class RayJobOutput(TextOutput):
    job: str
    status: str
    message: str | None = None
    row: JobRow | None = None


class GpuOutput(TextOutput):
    node: str
    gpus: list[GpuSample] = []


class ProgressOutput(TextOutput):
    job: str
    points: list[ProgressPoint] = []
    checkpoints: list[Checkpoint] = []


class ConfigOutput(TextOutput):
    job: str
    config: dict[str, Any] = {}


class SacctmgrOutput(TextOutput):
    qos: list[Qos] = []
    associations: list[Association] = []


class SshareOutput(TextOutput):
    shares: list[FairShareRow] = []


class SprioOutput(TextOutput):
    priorities: list[JobPriority] = []


class ClusterQueuesOutput(TextOutput):
    cluster_queues: list[ClusterQueue] = []


class AutoscalerOutput(TextOutput):
    autoscaler: Autoscaler | None = None
    """None when the cluster runs without an autoscaler."""


class ActionOutput(BaseModel):
    ok: bool
    message: str
    new_job: str | None = None
    """resubmit: the id of the job it created."""


# --- the tools ------------------------------------------------------------

get_logs = tool(
    "get_logs", input=LogsInput, output=LogOutput,
    description="""Read a job's stdout/stderr (for Kubernetes, the pod's container log; for Ray,
    the job driver log). Returns the last `tail` lines, optionally only lines matching the
    regex `grep` or stamped at or after `since`; `attempt` reads an earlier attempt.""",
)
sacct = tool(
    "sacct", input=SacctInput, output=JobsOutput, backends=("slurm",),
    description="""Slurm accounting (sacct -P): state, exit code, times, node list and reason for
    one job or for the jobs of a user, a node or in given states. Use it for jobs that have ended.""",
)
squeue = tool(
    "squeue", input=QueueInput, output=JobsOutput, backends=("slurm",),
    description="""The Slurm queue (squeue): pending and running jobs with their pending reason
    (Resources, Priority, Dependency, ...) or node list.""",
)
sinfo = tool(
    "sinfo", input=SinfoInput, output=NodesOutput, backends=("slurm",),
    description="""Slurm nodes (sinfo -N): state (idle, alloc, mix, down, drain) and the reason a
    node is down or drained, per partition.""",
)
partition_info = tool(
    "partition_info", input=PartitionInput, output=PartitionOutput, backends=("slurm",),
    description="""A Slurm partition's configuration (scontrol show partition): MaxTime, DefaultTime,
    MaxNodes, State. A job asking for more than MaxTime pends forever (PartitionTimeLimit).""",
)
kubectl_get_nodes = tool(
    "kubectl_get_nodes", input=SinfoInput, output=NodesOutput, backends=("kubernetes", "ray"),
    description="""Kubernetes nodes (kubectl get nodes): Ready/NotReady, cordoned, GPU count,
    node pool (the `partition` filter), labels and taints.""",
)
kubectl_describe = tool(
    "kubectl_describe", input=DescribeInput, output=DescribeOutput,
    backends=("kubernetes", "ray"),
    description="""kubectl describe of a pod, node, job, PyTorchJob, RayJob or RayCluster: its
    status, conditions, container states (OOMKilled, exit codes), taints, and its recent events.""",
)
kubectl_events = tool(
    "kubectl_events", input=EventsInput, output=EventsOutput, backends=("kubernetes", "ray"),
    description="""Kubernetes events (kubectl get events): FailedScheduling, BackOff, Failed,
    NodeNotReady, Preempted, Evicted, ... filtered by namespace, object and time.""",
)
ray_job_status = tool(
    "ray_job_status", input=JobInput, output=RayJobOutput, backends=("ray",),
    description="""Ray Jobs API status of a job (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)
    with Ray's status message.""",
)
ray_list_nodes = tool(
    "ray_list_nodes", input=SinfoInput, output=NodesOutput, backends=("ray",),
    description="""Ray cluster nodes (ray list nodes): ALIVE or DEAD, head or worker, resources.""",
)
nvidia_smi_query = tool(
    "nvidia_smi_query", input=NodeInput, output=GpuOutput,
    description="""nvidia-smi --query-gpu on a node: per GPU temperature, power, SM clock,
    utilisation, memory, uncorrectable ECC, pending row remaps and active throttle reasons.
    A GPU missing from the list has fallen off the bus or is not detected.""",
)
gpu_metrics = tool(
    "gpu_metrics", input=MetricsInput, output=GpuOutput,
    description="""GPU telemetry history of a node (the DCGM exporter's samples): temperature,
    power, SM clock, utilisation, memory, ECC and throttle reasons over a time window. Use it for
    what a GPU did while a job that has since ended was running.""",
)
kernel_log = tool(
    "kernel_log", input=NodeLogInput, output=NodeLogOutput,
    description="""The node's kernel log (dmesg): NVRM Xid errors, ECC, NVLink, PCIe AER, the OOM
    killer, InfiniBand port changes, hung tasks. Narrow it with tail, grep and since.""",
)
disk_usage = tool(
    "disk_usage", input=NodeInput, output=DiskOutput,
    description="""df -hP on a node: each filesystem's size, free space and mount point. Shows which
    disk a job filled (a small root disk, /tmp) and which large local disk sits empty.""",
)
list_jobs = tool(
    "list_jobs", input=ListJobsInput, output=JobsOutput,
    description="""Jobs known to the cluster now (running, pending and recently ended), filtered by
    node, partition/namespace, user or state: e.g. the other jobs on a suspect node.""",
)
job_history = tool(
    "job_history", input=HistoryInput, output=JobsOutput,
    description="""History: earlier attempts of one job (with how each ended), or all jobs of a
    user or partition over the last `days` days, for patterns and capacity questions.""",
)
training_progress = tool(
    "training_progress", input=JobInput, output=ProgressOutput,
    description="""A job's training progress (step, loss, throughput over time) and its
    checkpoints: tells a hang or a stall from a slow but healthy job.""",
)
job_config = tool(
    "job_config", input=JobInput, output=ConfigOutput,
    description="""The job's submitted configuration: the knobs a resubmit can change (batch size,
    workers, precision, memory, environment such as NCCL_* variables, image, resume path).""",
)
sacctmgr_show = tool(
    "sacctmgr_show", input=SacctmgrInput, output=SacctmgrOutput, backends=("slurm",),
    description="""Slurm's limits (sacctmgr show qos / show assoc -P): each QOS's priority, GrpTRES
    (e.g. gres/gpu=64 for all its jobs together), MaxTRESPU and MaxWall; each account's share,
    GrpTRES and QOS. What keeps jobs pending while nodes sit idle.""",
)
sshare = tool(
    "sshare", input=SshareInput, output=SshareOutput, backends=("slurm",),
    description="""Slurm fair share (sshare -a -P): each account's and user's raw and normalized
    shares, usage charged, and FairShare factor (1.0 unused, near 0 spent: its jobs rank last).""",
)
sprio = tool(
    "sprio", input=QueueInput, output=SprioOutput, backends=("slurm",),
    description="""Slurm job priorities (sprio): for each pending job its priority and the weighted
    factors it is made of (age, fair share, job size, partition, QOS): why one job starts before
    another.""",
)
kueue_cluster_queues = tool(
    "kueue_cluster_queues", input=NoInput, output=ClusterQueuesOutput, backends=("kubernetes",),
    description="""Kueue ClusterQueues (kubectl get clusterqueues, with their quota and status): per
    flavor the nominal quota and borrowing limit, what admitted workloads reserve, and how many
    workloads wait.""",
)
ray_autoscaler_status = tool(
    "ray_autoscaler_status", input=NoInput, output=AutoscalerOutput, backends=("ray",),
    description="""The Ray autoscaler's view (ray status): nodes per type against each type's
    max_workers, pending nodes, resource usage and the demands it cannot place yet.""",
)
node_drain = tool(
    "node_drain", input=NodeWriteInput, output=ActionOutput, effect="write",
    description="""Take a node out of service (Slurm: scontrol update State=DRAIN; Kubernetes:
    cordon and evict respecting PodDisruptionBudgets; Ray: drain-node). Needs a reason.""",
)
node_resume = tool(
    "node_resume", input=NodeWriteInput, output=ActionOutput, effect="write",
    description="""Return a drained or cordoned node to service.""",
)
resubmit = tool(
    "resubmit", input=ResubmitInput, output=ActionOutput, effect="write",
    description="""Submit the job again from its latest checkpoint, with config `changes` applied
    (dotted keys for nested values, e.g. env.NCCL_SOCKET_IFNAME) and never on `exclude_nodes`. A Slurm
    job held after a failed launch ("launch failed requeued held") and given no `changes` is released
    in place without those nodes (scontrol update ExcNodeList, scontrol release), not copied.""",
)
cancel_job = tool(
    "cancel_job", input=CancelInput, output=ActionOutput, effect="write",
    description="""Cancel a pending or running job (scancel, delete the pod/job, ray job stop).""",
)
escalate = tool(
    "escalate", input=EscalateInput, output=ActionOutput, effect="write",
    description="""Hand the incident to a team (hardware, network, infra, storage, user,
    credentials, capacity) with a summary, a severity and the evidence lines.""",
)
notify = tool(
    "notify", input=NotifyInput, output=ActionOutput, effect="write",
    description="""Send a message to a user, team or channel (a recommendation, a status).""",
)
