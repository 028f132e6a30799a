"""The guard's policy (DESIGN.md, Contract 4): declarative, default-deny, immutable.

Loaded from YAML through strict models: an unknown key or a bad value is an
error naming the file and the field, because a typo in a safety policy must
never pass silently. Every model is frozen and every list a tuple, so nothing
that reaches the guard at run time (a tool call's args, a log line, a model's
output) can change the policy once it is loaded.
"""

from __future__ import annotations

import hashlib
import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel, ConfigDict, Field, StringConstraints, ValidationError, ValidationInfo, field_validator,
    model_validator,
)

from crashcart.agent.guard._lines import line_of
from crashcart.tools import REGISTRY
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


Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
"""A partition, a user, a config key glob, an approver: never empty (an empty string matches nothing
and reads as 'any' to a person)."""
SlackId = Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,}$")]


def write_tools() -> list[str]:
    return sorted(name for name, spec in REGISTRY.specs.items() if spec.effect == "write")


def _write_tools_matching(glob: str) -> set[str]:
    return {t for t in write_tools() if fnmatchcase(t, glob)}


def _a_write_tool_glob(glob: str) -> str:
    # A glob that names no write tool is a typo: it would silently deny (a permission) or
    # silently let everything through unapproved (a risk tier).
    if not _write_tools_matching(glob):
        raise ValueError(f"{glob!r} matches no write tool (write tools: {', '.join(write_tools())})")
    return glob


def _distinct(values: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    seen = [getattr(v, "name", v) for v in values]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise ValueError(f"{what} named twice: {', '.join(twice)}")
    return values


class Approver(_Strict):
    """A person who may approve. A plain string in YAML is `name` alone."""

    name: Name
    os_users: tuple[Name, ...] = ()
    """OS accounts this person approves from; when given, an approval from any other is refused."""
    slack_ids: tuple[SlackId, ...] = ()
    """Slack user ids (U..., W...) this person approves from in Slack."""

    @model_validator(mode="before")
    @classmethod
    def _a_string_is_a_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    def bound_os_users(self, require_os_user: bool) -> tuple[str, ...]:
        """The OS accounts an approval from this person must come from; () = any."""
        return self.os_users or ((self.name,) if require_os_user else ())


class PermissionRule(_Strict):
    tool: str
    """fnmatch glob over tool names; "*" is every write tool."""
    partitions: tuple[Name, ...] = ()
    """Slurm partitions, Kubernetes namespaces or node pools; empty = any."""
    users: tuple[Name, ...] = ()
    """Job owners; empty = any."""
    changes: tuple[Name, ...] | None = None
    """resubmit only: globs over the config keys it may set (dotted: `env.NCCL_*`); not given = any
    key, `[]` = none (a plain resubmit)."""

    _tool_is_a_write_tool = field_validator("tool")(classmethod(lambda cls, v: _a_write_tool_glob(v)))

    @field_validator("changes")
    @classmethod
    def _changes_only_for_resubmit(cls, v: tuple[str, ...] | None, info: ValidationInfo) -> tuple[str, ...] | None:
        tool = info.data.get("tool")
        if v is not None and tool is not None and "resubmit" not in _write_tools_matching(tool):
            raise ValueError(f"only a resubmit changes config keys, and {tool!r} does not match resubmit")
        return v

    def matches(self, tool: str, target: ActionTarget, changes: tuple[str, ...] = ()) -> bool:
        # A scoped rule never matches a target whose scope is unknown: default-deny.
        return (
            fnmatchcase(tool, self.tool)
            and (not self.partitions or target.partition in self.partitions)
            and (not self.users or target.user in self.users)
            and (self.changes is None or all(any(fnmatchcase(k, g) for g in self.changes) for k in changes))
        )


class ApprovalTier(_Strict):
    tool: str = "*"
    min_gpus: int | None = Field(None, ge=1)
    """When set, the tier applies only to actions affecting at least this many GPUs."""
    approvers: tuple[Approver, ...] = ()
    """Who may approve this tier; empty = anyone in the policy's top-level `approvers`."""

    _tool_is_a_write_tool = field_validator("tool")(classmethod(lambda cls, v: _a_write_tool_glob(v)))
    _each_once = field_validator("approvers")(classmethod(lambda cls, v: _distinct(v, "approver")))

    def matches(self, tool: str, target: ActionTarget) -> bool:
        return fnmatchcase(tool, self.tool) and (self.min_gpus is None or target.gpus >= self.min_gpus)

    def hides(self, later: ApprovalTier) -> bool:
        """True when every action `later` would catch is caught by this tier first."""
        return (_write_tools_matching(later.tool) <= _write_tools_matching(self.tool)
                and (self.min_gpus is None or (later.min_gpus is not None and later.min_gpus >= self.min_gpus)))


class ApprovalSettings(_Strict):
    expires_minutes: float = Field(60, gt=0)
    """A request for approval not answered within this is refused: the cluster has moved on."""
    require_os_user: bool = False
    """True: every approver approves only from their own OS account (their `name`, or the
    `os_users` their entry lists)."""


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
    approvers: tuple[Approver, ...] = ()
    """Who may approve and reset the breaker; empty = nobody."""
    approval_settings: ApprovalSettings = ApprovalSettings()
    breaker: BreakerSettings = BreakerSettings()
    restart_budget: RestartBudget = RestartBudget()
    escalation: Escalation = Escalation()

    _each_once = field_validator("approvers")(classmethod(lambda cls, v: _distinct(v, "approver")))

    @field_validator("approval")
    @classmethod
    def _every_tier_can_apply(cls, tiers: tuple[ApprovalTier, ...]) -> tuple[ApprovalTier, ...]:
        # Tiers are first-match: one hidden behind another would never name its approvers.
        for j, later in enumerate(tiers):
            for i, earlier in enumerate(tiers[:j]):
                if earlier.hides(later):
                    raise ValueError(f"approval[{j}] never applies: approval[{i}] catches every action it would")
        return tiers

    def permission_for(
        self, tool: str, target: ActionTarget, changes: tuple[str, ...] = ()
    ) -> tuple[int, PermissionRule] | None:
        return next(((i, r) for i, r in enumerate(self.permissions) if r.matches(tool, target, changes)), None)

    def tier_for(self, tool: str, target: ActionTarget) -> tuple[int, ApprovalTier] | None:
        return next(((i, t) for i, t in enumerate(self.approval) if t.matches(tool, target)), None)

    def approvers_of(self, tier: ApprovalTier) -> tuple[str, ...]:
        """The names of who may approve this tier."""
        return tuple(a.name for a in self.approver_entries(tier))

    def approver_entries(self, tier: ApprovalTier) -> tuple[Approver, ...]:
        """Who may approve this tier; a tier naming a person by name alone gets the details
        (OS accounts, Slack ids) the top-level entry of that name gives."""
        if not tier.approvers:
            return self.approvers
        known = {a.name: a for a in self.approvers}
        return tuple(known.get(a.name, a) if a == Approver(name=a.name) else a for a in tier.approvers)


MODES: tuple[str, ...] = get_args(Mode)
"""From the strictest to the widest (Mode's own order): observe reads, dry_run proposes, autonomous acts."""


def mode_wider(mode: str, than: str) -> bool:
    """True when `mode` lets more happen than `than` does."""
    return MODES.index(mode) > MODES.index(than)


def within(policy: GuardPolicy, ceiling: GuardPolicy) -> bool:
    """True when `policy` is `ceiling` itself or it with a stricter mode: the only policies an
    incident on a live cluster may run under. Exact by construction: any other difference
    (a permission, an approver, a breaker limit) is treated as wider, because whether two rule
    lists allow the same actions cannot be decided field by field without leaving a gap."""
    if mode_wider(policy.mode, ceiling.mode):
        return False
    return policy_sha256(policy.model_copy(update={"mode": ceiling.mode})) == policy_sha256(ceiling)


def other_policy_flags(own: GuardPolicy, given: GuardPolicy | None, mode: str | None) -> list[str]:
    """How a --guard and --mode someone passed differ from an incident's own policy (nothing
    when they are the same). The file's own `mode` is set aside: the incident's is what ran."""
    out = []
    if given is not None and policy_sha256(given.model_copy(update={"mode": own.mode})) != policy_sha256(own):
        out.append("--guard names a different policy")
    if mode is not None and mode != own.mode:
        out.append(f"--mode {mode} is not the incident's mode {own.mode}")
    return out


def canonical_policy(policy: GuardPolicy) -> str:
    """The policy as one canonical JSON text: what an incident stores and hashes."""
    return json.dumps(policy.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def policy_sha256(policy: GuardPolicy) -> str:
    return hashlib.sha256(canonical_policy(policy).encode()).hexdigest()


def policy_from_dict(
    data: dict[str, Any] | GuardPolicy | None, source: str | Path = "<scenario>",
    base: GuardPolicy | None = None, text: str | None = None,
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
        raise PolicyError(source, _describe(e, data, text)) from None


def _describe(err: ValidationError, data: Any, text: str | None) -> str:
    """Each problem as `field: what (line N)`, the line when the YAML text is at hand."""
    problems = []
    for one in err.errors():
        # describe_validation_error reads only .errors(): one problem at a time gets its own line.
        message = describe_validation_error(_OneError([one]), data).replace("Value error, ", "")
        line = line_of(text, one["loc"]) if text is not None else None
        problems.append(f"{message} (line {line})" if line else message)
    return "; ".join(problems)


class _OneError:
    def __init__(self, errors: list[Any]):
        self._errors = errors

    def errors(self) -> list[Any]:
        return self._errors


def load_policy(path: str | Path | None = None) -> GuardPolicy:
    """Load a guard.yaml; the packaged default when `path` is None."""
    path = Path(path) if path is not None else DEFAULT_POLICY_PATH
    try:
        data = read_yaml_file(path)
    except DataFileError as e:
        raise PolicyError(path, e.message) from None
    return policy_from_dict(data, path, text=Path(path).read_text(encoding="utf-8"))
