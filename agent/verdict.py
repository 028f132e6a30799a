"""A verdict from a log alone (Contract 3): what can be told without a cluster.

The same playbooks as the agent, matched over the text as if it were every
kind of text the agent reads (a job log, a kernel log, an event dump), so a
pasted dmesg or `kubectl get events` works as well as a job's output.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from statistics import median
from typing import Any

from pydantic import BaseModel, Field

from crashcart.agent.policies.config_keys import load_key_table
from crashcart.agent.policies.evidence import Evidence, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.agent.policies.playbook import SUSPICIOUS
from crashcart.agent.policies.remedy import parse_number, captured_values
from crashcart.playbooks import Change, KnowledgeBase, load_playbooks

TEXT_KINDS = ("log", "kernel_log", "events", "describe", "status_message")

# A trainer's step counter ("step 41210", "global_step=12", "iteration 300", "iter: 9"); not "last_step".
_STEP = re.compile(r"\b(?:global[_ ]?)?(?:step|iter(?:ation)?)\b\s*[=:]?\s*(\d+)", re.I)
STALL_MINUTES = 30


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


# Settings every trainer has in some form: a log alone is enough to recommend changing them.
COMMON_SETTINGS = {"per_gpu_batch", "dataloader_workers", "activation_checkpointing"}


def _described_changes(rules: dict[str, Change], captures: dict[str, str]) -> dict[str, Any]:
    """Without the job's config, a change is named by its setting's most common key
    (`batch_size` for the per-GPU batch) and described, not computed."""
    table = load_key_table()
    described: dict[str, Any] = {}
    for name, rule in rules.items():
        if rule.only_if_present and name not in COMMON_SETTINGS and rule.capture not in captures:
            continue
        setting = table.settings.get(name)
        described[setting.keys[0].key if setting else name] = _describe_change(rule, captures)
    return described


def _describe_change(rule: Change, captures: dict[str, str]) -> Any:
    if rule.capture and rule.capture in captures:
        # The log itself printed the value that fits: report it, not a formula.
        return parse_number(captures[rule.capture])
    if rule.previous_checkpoint or rule.compute == "newest_complete_checkpoint":
        return "<previous checkpoint>"
    if rule.compute:
        return f"<computed: {rule.compute.replace('_', ' ')}>"
    if rule.set is not None:
        return rule.set
    if rule.divide:
        return f"<current / {rule.divide:g}>"
    if rule.multiply:
        return f"<current x {rule.multiply:g}>"
    return "<changed>"


def _stalled_in_log(lines: list[str]) -> tuple[float, list[str]] | None:
    """A hang told by the log's own clock: the step counter advanced, then stopped, while stamped
    lines (heartbeats, warnings) kept coming for STALL_MINUTES and ten usual step intervals."""
    from crashcart.tools.render import job_log_stamp

    stamp_of = job_log_stamp(datetime.now(timezone.utc))
    steps: list[tuple[datetime, int, str]] = []
    last: tuple[datetime, str] | None = None
    for line in lines:
        t = stamp_of(line)
        if t is None:
            continue
        last = (t, line.strip())
        if m := _STEP.search(line):
            steps.append((t, int(m.group(1)), line.strip()))
    values = [s[1] for s in steps]
    if last is None or len(set(values)) < 3 or values != sorted(values):
        return None
    final = values[-1]
    advanced_at = next(s for s in steps if s[1] == final)
    changes = [b[0] - a[0] for a, b in zip(steps, steps[1:]) if b[1] != a[1]]
    usual = median(changes).total_seconds() / 60
    quiet = (last[0] - advanced_at[0]).total_seconds() / 60
    after = sum(1 for line in lines if (t := stamp_of(line)) is not None and t > advanced_at[0])
    if quiet < max(STALL_MINUTES, 10 * usual) or after < 2:
        return None
    return quiet, [advanced_at[2][:300], last[1][:300]]


def diagnose_text(text: str, source: str | None = None, kb: KnowledgeBase | None = None) -> Verdict:
    kb = kb or load_playbooks()
    lines = text.splitlines()
    ev = Evidence(now=None, trigger={"kind": "chat"})
    ev.docs = [TextDoc(kind, "job:log", lines, "log") for kind in TEXT_KINDS]
    matches = [m for entry in kb if (m := match_label(entry, ev))]
    matches.sort(key=lambda m: (-m.entry.label.priority, -m.score, m.name))
    if not matches and (stall := _stalled_in_log(lines)):
        minutes, evidence = stall
        return Verdict(
            family="stuck", diagnosis="progress_stalled_in_log", remedy="resubmit", retriable=True,
            confidence=0.5, evidence=evidence,
            summary=f"The step counter stopped advancing {minutes:.0f} min before the log's last line while "
            "the process kept printing: a stall, not a finished run. Restart from the last checkpoint; "
            "a second stall at the same step points at the code or data.",
            source=source,
        )
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
    captures = captured_values(best)
    changes = _described_changes(label.remedy.changes, captures)
    # A symptom alone (an NCCL timeout) says little about its cause: say so in the confidence.
    confidence = 0.45 if label.symptom else min(0.95, 0.6 + 0.15 * best.matched_signals)
    return Verdict(
        family=best.entry.family, diagnosis=best.name, remedy=remedy, retriable=label.retriable,
        changes=changes, confidence=round(confidence, 2),
        evidence=list(dict.fromkeys(h.line for h in best.hits))[:10],
        summary=label.title + (f". {label.remedy.advice}" if label.remedy.advice else ""),
        source=source,
    )
