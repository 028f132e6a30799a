"""The cluster as data: nodes, jobs and events, as a scenario records them.

The fixture backend serves this state and mutates it when write tools run;
live backends build the same shapes from what the real CLI prints, so tools
and the agent see one vocabulary whatever the cluster is.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

NodeState = Literal[
    "idle", "allocated", "mixed", "down", "drained", "draining", "not_ready", "cordoned"
]


class Strict(BaseModel):
    """Unknown keys are an error: a typo in a scenario must not pass silently."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # The contract lets every optional field be null; null takes the default.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


# A time without a zone is UTC: scenario clocks and tool output compare safely.
Time = Annotated[datetime, AfterValidator(_utc)]


class Taint(Strict):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class GpuSample(Strict):
    """One GPU's telemetry at one moment, in nvidia-smi's units."""

    index: int
    time: Time | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    util_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    ecc_uncorrected: int | None = None
    remapped_rows_pending: int | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    xid: int | None = None
    """The last Xid the GPU reported, as NVIDIA's DCGM exporter counts it (DCGM_FI_DEV_XID_ERRORS:
    0 = none since the exporter started); where the node's kernel log cannot be read, the one
    kernel-log fact the exporter carries. None when nothing reports it."""



class Node(Strict):
    name: str
    state: NodeState = "idle"
    partition: str | None = None
    gpus: int = Field(0, ge=0)
    gpu_model: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    kernel_log: str | None = None
    nvidia_smi: str | None = None
    gpu_telemetry: list[GpuSample] = Field(default_factory=list)
    reason: str | None = None
    """Why the node is in its state (Slurm's drain reason, a NotReady condition)."""
    df: str | None = None
    """`df -hP` on the node, as it printed it (which disks are full, which are empty)."""


class Checkpoint(Strict):
    step: int
    time: Time
    path: str | None = None



class ProgressPoint(Strict):
    time: Time
    step: int | None = None
    loss: float | None = None
    tokens_per_sec: float | None = None



class Job(Strict):
    id: str
    name: str | None = None
    user: str | None = None
    state: str
    reason: str | None = None
    exit_code: str | None = None
    partition: str | None = None
    nodes: list[str] = Field(default_factory=list)
    gpus: int = Field(0, ge=0)
    submit_time: Time | None = None
    start_time: Time | None = None
    end_time: Time | None = None
    time_limit: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    log: str | None = None
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    progress: list[ProgressPoint] = Field(default_factory=list)
    attempts: list[Job] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    account: str | None = None
    """The Slurm account (or team) the job is charged to."""
    qos: str | None = None
    """The Slurm QOS (or Kueue ClusterQueue, Ray node type) whose limits the job counts against."""

    @field_validator("id", mode="before")
    @classmethod
    def _id_text(cls, v: Any) -> Any:
        # YAML reads 48213 as an int; a job id is a name, not a number.
        return str(v) if isinstance(v, int) else v

    @field_validator("depends_on", mode="before")
    @classmethod
    def _ids_text(cls, v: Any) -> Any:
        # The same for the ids a job depends on: `depends_on: [48212]` names a job.
        return [str(x) if isinstance(x, int) else x for x in v] if isinstance(v, list) else v



class Event(Strict):
    time: Time
    type: str = "Normal"
    reason: str
    object: str
    message: str = ""
    count: int | None = None



class Partition(Strict):
    """A Slurm partition's limits, as `scontrol show partition` prints them."""

    name: str
    max_time: str | None = None
    """MaxTime: "2-00:00:00", or UNLIMITED."""
    default_time: str | None = None
    max_nodes: str | None = None
    state: str = "UP"
# --- the scheduler's own limits (what binds when nodes sit idle) ----------------------------


class Qos(Strict):
    """One Slurm QOS as `sacctmgr show qos` lists it; TRES limits in Slurm's own form."""

    name: str
    priority: int = 0
    grp_tres: str | None = None
    """e.g. `gres/gpu=64` or `cpu=2048,gres/gpu=64`: what all jobs of the QOS hold at most."""
    max_tres_pu: str | None = None
    max_wall: str | None = None


class Association(Strict):
    """One row of `sacctmgr show assoc`: an account (or a user in it) and its limits."""

    account: str
    user: str | None = None
    partition: str | None = None
    share: str = "1"
    grp_tres: str | None = None
    qos: list[str] = Field(default_factory=lambda: ["normal"])


class FairShareRow(Strict):
    """One row of `sshare -a`: shares granted against usage charged (FairShare 1.0 = unused, 0 = spent)."""

    account: str
    user: str | None = None
    raw_shares: str = "1"
    norm_shares: float = 0.0
    raw_usage: int = 0
    effectv_usage: float = 0.0
    fairshare: float = 1.0


class JobPriority(Strict):
    """One pending job's row of `sprio`: its priority and the weighted factors it is made of."""

    job: str
    partition: str | None = None
    user: str | None = None
    priority: int
    age: int = 0
    fairshare: int = 0
    jobsize: int = 0
    partition_factor: int = 0
    qos: int = 0

    @field_validator("job", mode="before")
    @classmethod
    def _id_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v


class ClusterQueue(Strict):
    """A Kueue ClusterQueue's quota for one flavor of one resource, and what it has reserved."""

    name: str
    cohort: str | None = None
    strategy: str = "BestEffortFIFO"
    flavor: str = "default-flavor"
    resource: str = "nvidia.com/gpu"
    nominal_quota: int
    borrowing_limit: int | None = None
    reserved: int = 0
    """status.flavorsReservation: what admitted workloads hold (borrowed quota included)."""
    pending_workloads: int = 0
    admitted_workloads: int = 0


class NodeType(Strict):
    """One Ray autoscaler node type (a KubeRay worker group): its bounds and what runs now."""

    name: str
    min_workers: int = 0
    max_workers: int
    running: int = 0
    resources: dict[str, float] = Field(default_factory=dict)


class ResourceDemand(Strict):
    """A line of `ray status`'s demands: `{'GPU': 8.0}: 3+ pending tasks/actors`."""

    resources: dict[str, float]
    count: int
    kind: Literal["tasks/actors", "placement groups"] = "tasks/actors"


class Autoscaler(Strict):
    node_types: list[NodeType] = Field(default_factory=list)
    demands: list[ResourceDemand] = Field(default_factory=list)


class Scheduler(Strict):
    """The limits the scheduler enforces beyond free nodes: Slurm QOS, associations and fair
    share; Kueue ClusterQueues; the Ray autoscaler's node types. All optional."""

    qos: list[Qos] = Field(default_factory=list)
    associations: list[Association] = Field(default_factory=list)
    shares: list[FairShareRow] = Field(default_factory=list)
    priorities: list[JobPriority] = Field(default_factory=list)
    cluster_queues: list[ClusterQueue] = Field(default_factory=list)
    autoscaler: Autoscaler | None = None


class Cluster(Strict):
    now: Time
    nodes: list[Node] = Field(default_factory=list)
    jobs: list[Job] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)
    partitions: list[Partition] = Field(default_factory=list)
    """Slurm partitions' configured limits; optional (a partition without one still has its nodes)."""
    scheduler: Scheduler = Field(default_factory=Scheduler)


    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def job(self, job_id: str) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)
