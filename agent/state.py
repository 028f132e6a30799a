"""The incident's state as the graph carries it: plain JSON-able data only.

Checkpoints must load in another process (approval from a second terminal),
so nothing here is a live object: typed views are rebuilt from these dicts.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, Field


class Observation(BaseModel):
    """One read tool call and what it returned."""

    seq: int
    tool: str
    args: dict[str, Any]
    ok: bool
    text: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    backend_failed: bool = False
    """The call was well formed and the cluster could not answer it (unreachable, misconfigured)."""


class Diagnosis(BaseModel):
    label: str
    family: str
    root_cause: str | None = None
    """node:NAME | job:ID | cluster"""
    remedy: str
    confidence: float
    retriable: bool = False
    evidence: list[str] = Field(default_factory=list)
    evidence_path: list[str] = Field(default_factory=list)
    """The tool calls whose output the evidence came from, in order (tool:entity)."""
    signals: list[str] = Field(default_factory=list)
    """Which of the label's signals matched (source#index): what the diagnosis rests on."""
    summary: str = ""
    changes: dict[str, Any] = Field(default_factory=dict)
    team: str | None = None
    candidates: list[str] = Field(default_factory=list)
    """Other labels that matched, best first, for the transcript."""
    ruled_out: list[str] = Field(default_factory=list)
    """Labels something pointed at that did not hold up, and why (what a healthy verdict rests on)."""
    chart: dict[str, Any] | None = None
    """A capacity answer's figures as a chart: {title, hours, series: {name: [value per hour]}, capacity}."""
    decided_by: str | None = None
    """Which policy concluded (playbook, llm:MODEL) when more than one could have, and why."""


class ActionRecord(BaseModel):
    """A write action: what was asked, what the guard said, what happened."""

    tool: str
    args: dict[str, Any]
    action_id: str
    decision: str
    reason: str
    rule: str | None = None
    escalate_to: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None


class IncidentState(TypedDict, total=False):
    incident_id: str
    cluster: str
    backend: str
    trigger: dict[str, Any]
    observations: Annotated[list[dict[str, Any]], operator.add]
    pending: list[dict[str, Any]]
    rounds: int
    diagnosis: dict[str, Any] | None
    plan: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    report: str
    status: str
    policy_log: Annotated[list[dict[str, Any]], operator.add]
    """What the policy said along the way: a model's turns (text, tool calls, tokens, cost), a handover."""
