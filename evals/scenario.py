"""Scenario files (DESIGN.md, Contract 2): the model and its loader.

A scenario is one recorded incident: the cluster as it was, what raised the
alarm, and what a good on-call engineer would conclude and do. Every error the
loader raises names the file and the field, so a typo is found at once.
"""

from __future__ import annotations

import re

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from crashcart.tools.cluster import Cluster, Job, Strict
from crashcart.tools.yamlio import FileError, describe_validation_error, describe_yaml_error, load_yaml

Backend = Literal["slurm", "kubernetes", "ray"]
TriggerKind = Literal[
    "job_failed", "job_stalled", "job_pending", "node_alert", "chat", "capacity_review"
]
FAMILIES = (
    "memory", "distributed", "hardware", "scheduling", "ray", "storage",
    "stuck", "capacity", "user_code", "none",
)
REMEDIES = (
    "resubmit", "resubmit_with_changes", "exclude_node", "escalate_hardware",
    "escalate_user", "escalate_credentials", "wait", "none",
    # Grown from the design card: incidents whose owner is another team.
    "escalate_network", "escalate_storage", "escalate_infra", "preempt",
)
BUNDLED_DIR = Path(__file__).parent / "scenarios"
SCENARIO_SUFFIXES = (".yaml", ".yml")

# The schedulers' own words for a job's state (Contract 2: `state` is the scheduler's word).
# Compared case-insensitively, after Slurm's "CANCELLED by UID" and "+" and Kubernetes' "Init:".
JOB_STATES = {
    # Slurm (sacct/squeue)
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "COMPLETING", "CONFIGURING", "DEADLINE", "FAILED", "LAUNCH_FAILED",
    "NODE_FAIL", "OUT_OF_MEMORY", "PENDING", "POWER_UP_NODE", "PREEMPTED", "RECONFIG_FAIL", "REQUEUED",
    "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "RESV_DEL_HOLD", "REVOKED", "RUNNING", "SIGNALING", "SPECIAL_EXIT",
    "STAGE_OUT", "STOPPED", "SUSPENDED", "TIMEOUT", "UPDATE_DB",
    # Kubernetes: pod phases, container reasons, Job conditions
    "SUCCEEDED", "UNKNOWN", "CRASHLOOPBACKOFF", "IMAGEPULLBACKOFF", "ERRIMAGEPULL", "OOMKILLED", "EVICTED",
    "CONTAINERCREATING", "PODINITIALIZING", "ERROR", "TERMINATING", "CREATECONTAINERCONFIGERROR",
    "CREATECONTAINERERROR", "STARTERROR", "RUNCONTAINERERROR", "INVALIDIMAGENAME", "CONTAINERSTATUSUNKNOWN",
    "DEADLINEEXCEEDED", "BACKOFFLIMITEXCEEDED", "NODELOST", "SHUTDOWN", "UNEXPECTEDADMISSIONERROR", "PREEMPTING",
    "SCHEDULINGGATED", "NODEAFFINITY", "OUTOFCPU", "OUTOFMEMORY", "OUTOFPODS",
    # Ray: jobs and actors; KubeRay: RayCluster states and RayJob deployment statuses
    "ALIVE", "DEAD", "RESTARTING", "DEPENDENCIES_UNREADY", "PENDING_CREATION",
    "READY", "UNHEALTHY", "INITIALIZING", "COMPLETE", "SUSPENDING", "RETRYING", "WAITING", "VALIDATIONFAILED", "NEW",
}


def _state_word(state: str) -> str:
    word = state.strip().split(" by ")[0].rstrip("+").strip()
    word = word.split(":", 1)[1] if word.lower().startswith("init:") else word
    return "OUTOFPODS" if word.lower().startswith("outof") else word.upper()


class ScenarioError(FileError):
    """A scenario could not be loaded; the message names the file and field."""


def one_of(allowed: tuple[str, ...], what: str):
    def check(value: str | list[str] | None) -> str | list[str] | None:
        for v in [value] if isinstance(value, str) else value or []:
            if v not in allowed:
                raise ValueError(f"unknown {what} {v!r}; one of: {', '.join(allowed)}")
        return value

    return check


class Trigger(Strict):
    kind: TriggerKind
    job: str | None = None
    node: str | None = None
    text: str | None = None

    @field_validator("job", mode="before")
    @classmethod
    def _id_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) else v


class ExpectedAction(Strict):
    """A write action to find among those attempted (or, under forbid, not to)."""

    tool: str

    @field_validator("tool")
    @classmethod
    def _known_tool(cls, v: str) -> str:
        # A forbid on a misspelt tool can never be violated: it would pass silently forever.
        from crashcart.tools import REGISTRY

        if v not in REGISTRY.specs:
            writes = sorted(n for n, spec in REGISTRY.specs.items() if spec.effect == "write")
            raise ValueError(f"unknown tool {v!r}; write tools: {', '.join(writes)}")
        return v
    args: dict[str, Any] = Field(default_factory=dict)
    changes: dict[str, Any] = Field(default_factory=dict)
    exclude_nodes: list[str] = Field(default_factory=list)


class Expect(Strict):
    family: str | list[str] | None = None
    diagnosis: list[str] | None = None
    root_cause: str | None = None
    remedy: str | list[str]
    actions: list[ExpectedAction] = Field(default_factory=list)
    forbid: list[ExpectedAction] = Field(default_factory=list)
    max_tool_calls: int | None = None
    answer_mentions: list[str] = Field(default_factory=list)
    """Regexes (case-insensitive) the diagnosis summary must each match: what a capacity answer
    has to name (the binding limit, its numbers)."""

    _family = field_validator("family")(one_of(FAMILIES, "family"))
    _remedy = field_validator("remedy")(one_of(REMEDIES, "remedy"))

    @field_validator("diagnosis", mode="before")
    @classmethod
    def _one_label_is_a_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("answer_mentions")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"answer_mentions: {pattern!r} is not a regex: {e}") from None
        return v

    @field_validator("root_cause")
    @classmethod
    def _entity(cls, v: str | None) -> str | None:
        if v and v != "cluster" and not v.startswith(("node:", "job:")):
            raise ValueError(f"root_cause {v!r} must be node:NAME, job:ID or cluster")
        return v


class Scenario(Strict):
    id: str
    title: str
    family: str
    backend: Backend
    trigger: Trigger
    cluster: Cluster
    expect: Expect
    description: str | None = None
    tags: list[str] = Field(default_factory=list)
    guard: dict[str, Any] | None = None
    """A guard policy for this incident (same shape as guard.yaml); the eval's default otherwise."""

    _family = field_validator("family")(one_of(FAMILIES, "family"))

    @model_validator(mode="after")
    def _references_exist(self) -> Scenario:
        # A trigger that points at nothing is a broken scenario, not a hard incident.
        if self.trigger.job and not self.cluster.job(self.trigger.job):
            raise ValueError(f"trigger.job {self.trigger.job!r} is not among cluster.jobs")
        if self.trigger.node and not self.cluster.node(self.trigger.node):
            raise ValueError(f"trigger.node {self.trigger.node!r} is not among cluster.nodes")
        job = self.cluster.job(self.trigger.job) if self.trigger.job else None
        # Other jobs and earlier attempts may name nodes the recording left out (a reclaimed
        # spot node, the rest of a big job); the incident's own job must be seen where it ran.
        if job and (missing := [n for n in job.nodes if not self.cluster.node(n)]):
            raise ValueError(f"cluster.jobs[{job.id}].nodes: the trigger job runs on {', '.join(missing)}, "
                             "not among cluster.nodes")
        for where, j in _all_jobs(self.cluster.jobs):
            if _state_word(j.state) not in JOB_STATES:
                raise ValueError(f"{where}.state: unknown job state {j.state!r}; the scheduler's own word "
                                 "(Slurm: FAILED, NODE_FAIL, ...; Kubernetes: Failed, CrashLoopBackOff, ...; Ray: FAILED, ...)")
            if j.start_time and j.end_time and j.end_time < j.start_time:
                raise ValueError(f"{where}: end_time {j.end_time.isoformat()} is before start_time "
                                 f"{j.start_time.isoformat()}")
        return self

    @property
    def expected_families(self) -> list[str]:
        fam = self.expect.family or self.family
        return [fam] if isinstance(fam, str) else list(fam)

    @property
    def split(self) -> str:
        return "holdout" if "holdout" in self.tags else "main"


def _all_jobs(jobs: list[Job], prefix: str = "cluster.jobs") -> list[tuple[str, Job]]:
    out = []
    for i, j in enumerate(jobs):
        where = f"{prefix}[{i}:{j.id}]"
        out.append((where, j))
        out += _all_jobs(j.attempts, f"{where}.attempts")
    return out


def parse_scenario(text: str, path: str | Path = "<string>") -> Scenario:
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        raise ScenarioError(path, describe_yaml_error(e)) from None
    if not isinstance(data, dict):
        raise ScenarioError(path, "a scenario file holds one mapping (id, title, family, ...)")
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(path, describe_validation_error(e, data)) from None


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(path, f"cannot read: {e}") from None
    return parse_scenario(text, path)


def discover(paths: list[str | Path] | None = None) -> list[Path]:
    """Scenario files under the given files and folders (the bundled suite by default)."""
    roots = [Path(p) for p in paths] if paths else [BUNDLED_DIR]
    files: list[Path] = []
    for root in roots:
        if root.is_dir():
            files.extend(sorted(p for p in root.rglob("*") if p.suffix in SCENARIO_SUFFIXES
                                and p.is_file() and not p.name.startswith("_")))
        else:
            files.append(root)
    return files


def json_schema() -> dict[str, Any]:
    """The scenario schema for editors (referenced from a YAML header)."""
    return Scenario.model_json_schema()
