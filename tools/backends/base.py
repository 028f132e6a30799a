"""The contract between the agent and a kind of cluster."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime

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
