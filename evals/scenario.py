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

from crashcart.tools.cluster import Cluster, Strict
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
        return self

    @property
    def expected_families(self) -> list[str]:
        fam = self.expect.family or self.family
        return [fam] if isinstance(fam, str) else list(fam)

    @property
    def split(self) -> str:
        return "holdout" if "holdout" in self.tags else "main"


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
            files.extend(sorted(p for p in root.rglob("*.yaml") if not p.name.startswith("_")))
        else:
            files.append(root)
    return files


def json_schema() -> dict[str, Any]:
    """The scenario schema for editors (referenced from a YAML header)."""
    return Scenario.model_json_schema()
