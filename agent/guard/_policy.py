"""The guard's policy (DESIGN.md, Contract 4): declarative, default-deny, immutable.

Loaded from YAML through strict models: an unknown key or a bad value is an
error naming the file and the field, because a typo in a safety policy must
never pass silently. Every model is frozen and every list a tuple, so nothing
that reaches the guard at run time (a tool call's args, a log line, a model's
output) can change the policy once it is loaded.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crashcart.tools.backends.base import ActionTarget
from crashcart.tools.catalog import Team
from crashcart.tools.yamlio import DataFileError, FileError, describe_validation_error, read_yaml_file

DEFAULT_POLICY_PATH = Path(__file__).with_name("default.yaml")
Mode = Literal["observe", "dry_run", "autonomous"]


class GuardError(Exception):
    """The guard refused a request (an approval, a reset) or could not load its policy."""


class PolicyError(GuardError, FileError, ValueError):
    """A policy file is wrong; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # YAML authors write `users:` or `min_gpus: null` for "not set".
        if isinstance(data, dict):
            return {
                k: v for k, v in data.items()
                if not (v is None and k in cls.model_fields and not cls.model_fields[k].is_required())
            }
        return data


class PermissionRule(_Strict):
    tool: str
    """fnmatch glob over tool names; "*" is every write tool."""
    partitions: tuple[str, ...] = ()
    """Slurm partitions, Kubernetes namespaces or node pools; empty = any."""
    users: tuple[str, ...] = ()
    """Job owners; empty = any."""

    def matches(self, tool: str, target: ActionTarget) -> bool:
        # A scoped rule never matches a target whose scope is unknown: default-deny.
        return (
            fnmatchcase(tool, self.tool)
            and (not self.partitions or target.partition in self.partitions)
            and (not self.users or target.user in self.users)
        )


class ApprovalTier(_Strict):
    tool: str = "*"
    min_gpus: int | None = Field(None, ge=1)
    """When set, the tier applies only to actions affecting at least this many GPUs."""
    approvers: tuple[str, ...] = ()
    """Who may approve this tier; empty = anyone in the policy's top-level `approvers`."""

    def matches(self, tool: str, target: ActionTarget) -> bool:
        return fnmatchcase(tool, self.tool) and (self.min_gpus is None or target.gpus >= self.min_gpus)


class BreakerSettings(_Strict):
    max_drains: int = Field(2, ge=0)
    """Node drains allowed per window, per cluster."""
    window_minutes: float = Field(60, gt=0)
    max_partition_fraction: float = Field(0.10, ge=0, le=1)
    """Never leave more than this share of a partition out of service by our drains
    (taking out the only unavailable node of a partition is always within it)."""


class RestartBudget(_Strict):
    max_restarts: int = Field(3, ge=0)
    """Resubmits of a job without a new checkpoint."""


class Escalation(_Strict):
    default_team: Team = "infra"
    """Where a denied or uncertain action goes."""
    breaker_team: Team = "infra"
    """Where a tripped breaker goes: many drains at once point at the cluster, not one node."""


class GuardPolicy(_Strict):
    mode: Mode = "dry_run"
    permissions: tuple[PermissionRule, ...] = ()
    """Ordered; the first rule that matches allows the write tool. None matching: deny."""
    approval: tuple[ApprovalTier, ...] = ()
    """Ordered risk tiers; the first that matches names who may approve."""
    approvers: tuple[str, ...] = ()
    breaker: BreakerSettings = BreakerSettings()
    restart_budget: RestartBudget = RestartBudget()
    escalation: Escalation = Escalation()

    def permission_for(self, tool: str, target: ActionTarget) -> tuple[int, PermissionRule] | None:
        return next(((i, r) for i, r in enumerate(self.permissions) if r.matches(tool, target)), None)

    def tier_for(self, tool: str, target: ActionTarget) -> tuple[int, ApprovalTier] | None:
        return next(((i, t) for i, t in enumerate(self.approval) if t.matches(tool, target)), None)

    def approvers_of(self, tier: ApprovalTier) -> tuple[str, ...]:
        return tier.approvers or self.approvers


def policy_from_dict(
    data: dict[str, Any] | GuardPolicy | None, source: str | Path = "<scenario>",
    base: GuardPolicy | None = None,
) -> GuardPolicy:
    """A policy from plain data (a scenario's `guard:` section, a parsed file).

    With `base`, each top-level section the data leaves out is taken from it whole
    (sections are replaced, never merged, so a scenario's permissions are exactly its own).
    """
    if isinstance(data, GuardPolicy):
        return data
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise PolicyError(source, "a guard policy is one mapping (mode, permissions, approval, ...)")
    if base is not None:
        data = {**base.model_dump(exclude_unset=False), **data}
    try:
        return GuardPolicy.model_validate(data)
    except ValidationError as e:
        raise PolicyError(source, describe_validation_error(e, data)) from None


def load_policy(path: str | Path | None = None) -> GuardPolicy:
    """Load a guard.yaml; the packaged default when `path` is None."""
    path = Path(path) if path is not None else DEFAULT_POLICY_PATH
    try:
        data = read_yaml_file(path)
    except DataFileError as e:
        raise PolicyError(path, e.message) from None
    return policy_from_dict(data, path)
