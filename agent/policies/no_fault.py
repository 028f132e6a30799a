"""What a "no fault" verdict rests on, and the honest verdict when nothing does.

No playbook label matched. That alone says nothing is *recognised*, not that nothing is wrong:
"healthy" needs positive evidence for every job the incident is about (it finished, it runs and,
when a stall alert is about it, visibly makes progress, or it waits for a reason that is by
design). A job that waits, stalls or sits in a state nothing explains is reported as such
(label `unrecognized`, the evidence read) and goes to a person (playbooks/settings/no_fault.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from crashcart.agent.policies.evidence import RUNNING_STATES, SUCCEEDED_STATES, Evidence, JobFacts
from crashcart.agent.policies.matching import _stalled_minutes, signal_hits
from crashcart.playbooks import KnowledgeBase
from crashcart.playbooks._loader import BUNDLED_DIR
from crashcart.tools.yamlio import DataFileError, read_model_file

TABLE_PATH = BUNDLED_DIR / "settings" / "no_fault.yaml"
# The schedulers' word for a job that has not started (Slurm, a pod's phase, Ray's job status).
PENDING_STATES = {"PENDING"}
Unexplained = Literal["pending", "stalled", "missing", "other"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ByDesign(_Strict):
    pending_reasons: dict[str, str] = Field(default_factory=dict)
    states: dict[str, str] = Field(default_factory=dict)


class Progress(_Strict):
    step_minutes: float = Field(gt=0)
    log_minutes: float = Field(gt=0)


class Route(_Strict):
    family: Literal["scheduling", "stuck", "unknown"]
    team: Literal["infra", "user", "hardware", "network", "storage"]


class NoFaultTable(_Strict):
    by_design: ByDesign
    progress: Progress
    undetermined: dict[Unexplained, Route]


class NoFaultTableError(DataFileError):
    pass


@lru_cache(maxsize=4)
def load_table(path: str | None = None) -> NoFaultTable:
    where = Path(path) if path else TABLE_PATH
    table = read_model_file(where, NoFaultTable, NoFaultTableError)
    missing = [k for k in get_args(Unexplained) if k not in table.undetermined]
    if missing:
        raise NoFaultTableError(where, f"undetermined: no route for {', '.join(missing)}")
    return table


@dataclass
class Standing:
    """One job's standing: fine (and why), or what is unexplained about it."""

    job: str
    why: str
    """The line a verdict quotes: what shows it fine, or what was seen of it."""
    unexplained: Unexplained | None = None


def standing(ev: Evidence, job: str, kb: KnowledgeBase, table: NoFaultTable | None = None) -> Standing:
    """Whether the evidence shows `job` fine without a playbook label, and on what."""
    table = table or load_table()
    facts = ev.jobs.get(job)
    if facts is None:
        return Standing(job, f"job {job}: no record of it in what the scheduler returned", "missing")
    state = (facts.state or "").strip()
    word = state.upper().split()[0] if state else ""
    seen = f"job {job}: {state or 'no state'}" + (f" ({facts.reason})" if facts.reason else "")
    if word in SUCCEEDED_STATES:
        return Standing(job, f"{seen}: it finished")
    if state in table.by_design.states:
        return Standing(job, f"{seen}: {table.by_design.states[state]}")
    if word in PENDING_STATES:
        why = table.by_design.pending_reasons.get(facts.reason or "")
        return Standing(job, f"{seen}: {why}") if why else Standing(job, f"{seen}, and nothing read explains the wait", "pending")
    if word in RUNNING_STATES:
        if ev.trigger.get("kind") != "job_stalled" or str(ev.trigger.get("job") or job) != job:
            return Standing(job, f"{seen}: the scheduler runs it")
        moving = _progress_shown(ev, facts, kb, table)
        return Standing(job, f"{seen}: {moving}") if moving else Standing(job, _silence(ev, facts), "stalled")
    return Standing(job, f"{seen}: a state nothing read explains", "other")


def _progress_shown(ev: Evidence, facts: JobFacts, kb: KnowledgeBase, table: NoFaultTable) -> str | None:
    """What shows a running job moving: a recent step, a recent log line, or a hang a playbook
    ruled out on the job's own output (its log ends inside an evaluation pass on busy GPUs)."""
    minutes = _stalled_minutes(ev, facts.job)
    if minutes is not None and minutes < table.progress.step_minutes:
        return f"its step counter moved {minutes:.0f} min ago"
    for doc in ev.docs:
        if doc.source == "log" and doc.entity == f"job:{facts.job}" and doc.last_time and ev.now:
            quiet = (ev.now - doc.last_time).total_seconds() / 60
            if quiet <= table.progress.log_minutes:
                return f"its log was written {quiet:.0f} min ago"
    return _hang_ruled_out(ev, facts.job, kb)


def _hang_ruled_out(ev: Evidence, job: str, kb: KnowledgeBase) -> str | None:
    # Only a label that calls a stall (it reads the step counter) rules out what shows the job busy;
    # other labels' rule-outs (a step line that proves a run got going) say nothing about now.
    for entry in kb:
        if not any(sig.where == "progress" for sig in entry.label.signals):
            continue
        for idx, (sig, pattern) in enumerate(zip(entry.label.signals, entry.patterns)):
            if not sig.rules_out:
                continue
            hits = [h for h in signal_hits(idx, sig, pattern, ev) if h.entity == f"job:{job}"]
            if hits:
                return f"not a hang ({entry.name} ruled out by {sig.where}: {hits[0].line})"
    return None


def _silence(ev: Evidence, facts: JobFacts) -> str:
    minutes = _stalled_minutes(ev, facts.job)
    step = f"no new step for {minutes:.0f} min" if minutes is not None else "no step counter reported"
    logs = [d for d in ev.docs if d.source == "log" and d.entity == f"job:{facts.job}"]
    if not logs:
        log = "its log not read"
    elif logs[0].last_time and ev.now:
        log = f"last log line {(ev.now - logs[0].last_time).total_seconds() / 60:.0f} min ago"
    else:
        log = "its log carries no time"
    return f"job {facts.job}: {facts.state}, {step}, {log}, and no hang signature"


def unexplained(ev: Evidence, kb: KnowledgeBase) -> list[Standing]:
    """The focus jobs nothing shows fine (the trigger's job included when the scheduler has no record of it)."""
    table = load_table()
    return [s for j in ev.focus_jobs() if (s := standing(ev, j, kb, table)).unexplained]
