"""A verdict from a log alone (Contract 3): what can be told without a cluster.

The same playbooks as the agent, matched over the text as if it were every
kind of text the agent reads (a job log, a kernel log, an event dump), so a
pasted dmesg or `kubectl get events` works as well as a job's output.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from crashcart.agent.policies.evidence import Evidence, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.agent.policies.playbook import SUSPICIOUS
from crashcart.playbooks import Change, KnowledgeBase, load_playbooks

TEXT_KINDS = ("log", "kernel_log", "events", "describe", "status_message")


class LogError(Exception):
    """The input is not a log we can read (empty, binary)."""


class Verdict(BaseModel):
    family: str
    diagnosis: str
    remedy: str
    retriable: bool
    changes: dict[str, Any] = Field(default_factory=dict)
    confidence: float
    evidence: list[str] = Field(default_factory=list)
    summary: str
    source: str | None = None


def read_log_bytes(data: bytes, source: str) -> str:
    if not data.strip():
        raise LogError(f"{source}: the log is empty")
    if b"\x00" in data[:8192]:
        raise LogError(f"{source}: this looks like a binary file, not a log")
    return data.decode("utf-8", errors="replace")


def _describe_change(rule: Change) -> Any:
    if rule.previous_checkpoint:
        return "<previous checkpoint>"
    if rule.set is not None:
        return rule.set
    if rule.divide:
        return f"<current / {rule.divide:g}>"
    if rule.multiply:
        return f"<current x {rule.multiply:g}>"
    return "<changed>"


def diagnose_text(text: str, source: str | None = None, kb: KnowledgeBase | None = None) -> Verdict:
    kb = kb or load_playbooks()
    lines = text.splitlines()
    ev = Evidence(now=None, trigger={"kind": "chat"})
    ev.docs = [TextDoc(kind, "job:log", lines, "log") for kind in TEXT_KINDS]
    matches = [m for entry in kb if (m := match_label(entry, ev))]
    matches.sort(key=lambda m: (-m.entry.label.priority, -m.score, m.name))
    if not matches:
        suspicious = [l.strip()[:300] for l in lines if SUSPICIOUS.search(l)]
        return Verdict(
            family="user_code" if suspicious else "none",
            diagnosis="unrecognized" if suspicious else "healthy",
            remedy="escalate_user" if suspicious else "none",
            retriable=False, confidence=0.2 if suspicious else 0.3,
            evidence=list(dict.fromkeys(suspicious))[-10:],
            summary="No playbook recognises this log; these lines look suspicious."
            if suspicious else "Nothing in this log looks like a failure.",
            source=source,
        )
    best = matches[0]
    label = best.entry.label
    remedy = label.remedy.kind
    changes = {k: _describe_change(c) for k, c in label.remedy.changes.items()
               if not c.only_if_present or k in {"batch_size", "num_workers"}}
    # A symptom alone (an NCCL timeout) says little about its cause: say so in the confidence.
    confidence = 0.45 if label.symptom else min(0.95, 0.6 + 0.15 * best.matched_signals)
    return Verdict(
        family=best.entry.family, diagnosis=best.name, remedy=remedy, retriable=label.retriable,
        changes=changes, confidence=round(confidence, 2),
        evidence=list(dict.fromkeys(h.line for h in best.hits))[:10],
        summary=label.title + (f". {label.remedy.advice}" if label.remedy.advice else ""),
        source=source,
    )
