"""The contract between the agent and a kind of cluster."""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from typing import Any

from pydantic import BaseModel

from crashcart.tools._spec import REGISTRY, ToolCall, ToolInput, ToolSpec


@dataclass(frozen=True)
class ActionTarget:
    """What a write action would touch, as the cluster itself says (never as a log or a model says).

    The guard decides on these facts; a backend fills them from its own state.
    """

    tool: str
    job: str | None = None
    node: str | None = None
    partition: str | None = None
    """Slurm partition, Kubernetes namespace (for a job) or node pool (for a node)."""
    user: str | None = None
    gpus: int = 0
    """GPUs the action affects: the job's, or the node's."""
    partition_nodes: int = 0
    """Nodes in the node's partition (for the share-of-partition breaker)."""
    partition_unavailable: int = 0
    """Of those, already drained, draining, down or cordoned."""
    node_unavailable: bool = False
    """The node itself is already among them: draining it takes no capacity away."""
    restarts_without_progress: int = 0
    """Earlier attempts of the job since its latest checkpoint."""
    last_checkpoint: datetime | None = None


_incident: ContextVar[str | None] = ContextVar("crashcart_incident", default=None)


@contextmanager
def acting_for(incident_id: str | None) -> Iterator[None]:
    """Write actions inside this block act for this incident (a live backend names it on the
    cluster: in a drain reason, in a resubmitted job's comment)."""
    token = _incident.set(incident_id)
    try:
        yield
    finally:
        _incident.reset(token)


def current_incident() -> str | None:
    return _incident.get()


@dataclass
class ClusterChanges:
    """What a watch poll needs to know, as of `now`: only what changed since the last poll."""

    now: datetime
    failed: list = field(default_factory=list)
    """JobRows of jobs that ended badly since the last poll."""
    stalled: list = field(default_factory=list)
    """JobRows of running jobs with no new step or log line for the stall time."""
    pending: list = field(default_factory=list)
    """JobRows of jobs pending for a reason that will not resolve by waiting."""
    nodes_down: list = field(default_factory=list)
    """NodeRows of nodes down or not ready: out of service without anyone deciding so (a drain
    or a cordon is a person's or crashcart's decision, not an alert)."""


# Pending reasons that waiting will not fix (Slurm's words, Kubernetes' where they differ).
STUCK_PENDING_REASONS = frozenset({
    "DependencyNeverSatisfied", "InvalidAccount", "InvalidQOS", "PartitionTimeLimit",
    "PartitionNodeLimit", "PartitionDown", "ReqNodeNotAvail", "BadConstraints",
    "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
})

# slurmctld's own words for a batch job it requeued and held because its launch failed (a node's
# prolog failed, a node did not boot): squeue prints them with spaces, scontrol with underscores.
# A hold a person set (JobHeldUser, JobHeldAdmin, `scontrol requeuehold`) is not this.
_HELD_AFTER_FAILED_LAUNCH = re.compile(r"^launch[ _]failed[ _]requeued[ _]held$", re.I)


def held_after_failed_launch(state: str | None, reason: str | None) -> bool:
    """A job still queued that Slurm itself held after a failed launch: releasing it (without the
    node that failed it) runs the same job again, so it needs no copy."""
    return (state or "").upper().split(" ")[0] in {"PENDING", "REQUEUED", "REQUEUE_HOLD"} \
        and bool(_HELD_AFTER_FAILED_LAUNCH.match((reason or "").strip()))


def set_dotted(config: dict, key: str, value: object) -> None:
    """Set `env.NCCL_SOCKET_IFNAME`-style keys in a job's config, as a resubmit's changes say."""
    from crashcart.tools._spec import ToolError

    *parents, leaf = key.split(".")
    here = config
    for i, part in enumerate(parents):
        rest = ".".join([*parents[i:], leaf])
        if rest in here:
            # The config spells the rest flat ("preprocess.concurrency", "nvidia.com/gpu"): that key.
            here[rest] = copy.deepcopy(value)
            return
        child = here.setdefault(part, {})
        if not isinstance(child, dict):
            raise ToolError(f"resubmit: config key {'.'.join(parents[: i + 1])!r} is {child!r}, "
                            f"not a mapping, so {key!r} cannot be set")
        here = child
    here[leaf] = copy.deepcopy(value)


class Backend(ABC):
    kind: str

    @abstractmethod
    def now(self) -> datetime: ...

    @abstractmethod
    def run(self, spec: ToolSpec, args: ToolInput) -> BaseModel:
        """Run one tool; raise ToolError with a clear message when it cannot."""

    @abstractmethod
    def target(self, call: ToolCall) -> ActionTarget:
        """Facts about what a write call would touch; ToolError if the node or job is unknown."""

    def tools(self) -> list[ToolSpec]:
        return REGISTRY.for_backend(self.kind)

    def checked_args(self, spec: ToolSpec, args: ToolInput | dict[str, Any]) -> ToolInput:
        """The call's arguments, parsed; ToolError if this backend has no such tool."""
        from crashcart.tools._spec import ToolError

        if self.kind not in spec.backends:
            offered = ", ".join(s.name for s in self.tools())
            raise ToolError(f"{spec.name} is not available on a {self.kind} cluster (tools here: {offered})")
        return spec.parse_args(args) if isinstance(args, dict) else args

    def changes_since(self, since: datetime, stall_minutes: float) -> ClusterChanges:
        """For `crashcart watch`: what changed since `since` (ask the cluster for no more)."""
        raise NotImplementedError(f"a {self.kind} backend of this type cannot be watched")


class LiveBackend(Backend):
    """What every live backend (slurm, kubernetes, ray) does the same way: a tool runs as the
    backend's `_tool_<name>` method, a write as its actions' method of that name, and a write
    forgets what was read before it (it may no longer hold)."""

    actions: Any

    def forget(self) -> None:
        """Drop what was cached from the cluster (nothing, unless a backend caches)."""

    def run(self, spec: ToolSpec, args: ToolInput | dict[str, Any]) -> BaseModel:
        args = self.checked_args(spec, args)
        if spec.effect == "write":
            self.forget()
            try:
                return getattr(self.actions, spec.name)(args)
            finally:
                self.forget()
        return getattr(self, f"_tool_{spec.name}")(args)

    def target(self, call: ToolCall) -> ActionTarget:
        return self.actions.target(call)


class PeopleActions:
    """escalate and notify on a live backend: recorded with the incident, for the notifiers
    (agent/notify) to deliver; the same on every backend."""

    b: Any

    def escalate(self, a):
        from crashcart.tools.catalog import ActionOutput

        self.b.escalations.append({**a.model_dump(), "incident": current_incident(), "time": self.b.now()})
        return ActionOutput(ok=True, message=f"Escalated to {a.team} ({a.severity}): {a.summary} "
                                             "[recorded; the notifier delivers it]")

    def notify(self, a):
        from crashcart.tools.catalog import ActionOutput

        self.b.notifications.append({**a.model_dump(), "incident": current_incident(), "time": self.b.now()})
        return ActionOutput(ok=True, message=f"Sent to {a.to}: {a.message} [recorded; the notifier delivers it]")

