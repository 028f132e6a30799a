"""The model's conclusion: a structured diagnosis, validated before anything acts on it.

It becomes the same `Diagnosis` the playbook policy produces, plus planned write
actions. Evidence must be quoted from what the tools returned: a line the
investigation never saw is a validation error, sent back to the model once.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crashcart.agent.state import Diagnosis
from crashcart.tools._spec import REGISTRY, ToolCall, ToolError
from crashcart.tools.catalog import Team
from crashcart.tools.yamlio import describe_validation_error

Family = Literal["memory", "distributed", "hardware", "scheduling", "ray", "storage", "stuck", "capacity",
                 "user_code", "none", "unknown"]
RemedyKind = Literal["resubmit", "resubmit_with_changes", "exclude_node", "escalate_hardware", "escalate_user",
                     "escalate_credentials", "escalate_network", "escalate_storage", "escalate_infra",
                     "wait", "preempt", "none"]
UNLABELLED = "unlabelled"
"""The label of a cause no playbook names: the model's own words are in the summary."""


class PlannedAction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="A write tool: resubmit, node_drain, node_resume, cancel_job, escalate, notify")
    args: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments, `reason` included")


class Conclusion(BaseModel):
    """What the `conclude` tool takes."""

    model_config = ConfigDict(extra="forbid")

    family: Family
    label: str | None = Field(None, description="A playbook label when one fits (see playbook_candidates); else null")
    cause: str = Field(description="The root cause in one or two sentences, in your own words", min_length=3)
    root_cause: str | None = Field(None, description="node:NAME, job:ID or cluster (a fabric, switch or shared service)")
    remedy: RemedyKind
    confidence: float = Field(ge=0, le=1)
    retriable: bool = False
    evidence: list[str] = Field(default_factory=list, max_length=12,
                                description="Lines copied exactly from the tool results that show the cause")
    changes: dict[str, Any] = Field(default_factory=dict, description="For resubmit_with_changes: config keys to set")
    team: Team | None = None
    actions: list[PlannedAction] = Field(default_factory=list, max_length=10,
                                         description="Write actions to take; the guard decides on each")

    @field_validator("root_cause")
    @classmethod
    def _entity(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(node:\S+|job:\S+|cluster)", v):
            raise ValueError("must be node:NAME, job:ID or cluster")
        return v


def conclusion_schema() -> dict[str, Any]:
    return Conclusion.model_json_schema()


def _normal(text: str) -> str:
    return " ".join(text.split())


def check_conclusion(args: dict[str, Any], observations: list[dict[str, Any]], labels: set[str],
                     backend: str, derived: set[str] | frozenset[str] = frozenset()) -> tuple[Conclusion | None, str | None]:
    """(the conclusion, None) or (None, what is wrong: a message for the model).

    An evidence line is quoted from a tool result's text, or is one of the facts crashcart derived
    from the same results (`derived`: a job's state, a GPU's ECC count, as the runbook states them)."""
    try:
        c = Conclusion.model_validate(args)
    except ValidationError as e:
        return None, f"conclude: {describe_validation_error(e, args, unknown='unknown field')}"
    problems: list[str] = []
    if c.label is not None and c.label not in labels:
        problems.append(f"label {c.label!r} is not a playbook label; set label to null and describe the cause")
    seen = [_normal(o.get("text") or "") for o in observations if o.get("ok")]
    for line in c.evidence:
        if not line.strip() or not (line in derived or any(_normal(line) in text for text in seen)):
            problems.append(f"evidence line {line[:120]!r} does not appear in any tool result; quote lines exactly")
    if c.family not in {"none"} and not c.evidence:
        problems.append("evidence: give the lines (copied from tool results) the cause rests on")
    for i, a in enumerate(c.actions):
        try:
            spec = REGISTRY.get(a.tool)
            if spec.effect != "write":
                raise ToolError(f"{a.tool} only reads; actions are write tools")
            if backend not in spec.backends:
                raise ToolError(f"{a.tool} is not available on a {backend} cluster")
            spec.parse_args(with_reason(a.args, c))
        except ToolError as e:
            problems.append(f"actions[{i}]: {e}")
    if problems:
        return None, "conclude: " + "; ".join(problems)
    return c, None


def with_reason(args: dict[str, Any], c: Conclusion) -> dict[str, Any]:
    """Every write tool takes a reason; a model that leaves it out gets its own cause as one."""
    return args if args.get("reason") else {**args, "reason": f"crashcart (model): {c.cause[:200]}"}


def to_diagnosis(c: Conclusion, observations: list[dict[str, Any]]) -> tuple[Diagnosis, list[ToolCall]]:
    path = []
    for line in c.evidence:
        for o in observations:
            if o.get("ok") and _normal(line) in _normal(o.get("text") or ""):
                entity = next((str(v) for k, v in (o.get("args") or {}).items() if k in {"job", "node", "name"}), "")
                path.append(f"{o['tool']}:{entity}" if entity else o["tool"])
                break
    diagnosis = Diagnosis(
        label=c.label or UNLABELLED, family=c.family, root_cause=c.root_cause, remedy=c.remedy,
        confidence=round(c.confidence, 2), retriable=c.retriable, evidence=c.evidence,
        evidence_path=list(dict.fromkeys(path)), summary=c.cause, changes=c.changes, team=c.team,
    )
    plan = [ToolCall(tool=a.tool, args=with_reason(a.args, c)) for a in c.actions]
    return diagnosis, plan
