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



class Cluster(Strict):
    now: Time
    nodes: list[Node] = Field(default_factory=list)
    jobs: list[Job] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)


    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)

    def job(self, job_id: str) -> Job | None:
        return next((j for j in self.jobs if j.id == job_id), None)
