"""A job silent for no longer than it was silent before, at the same point, is in that phase again.

A training log goes quiet during work that prints nothing until it ends: a generative evaluation,
a sharded checkpoint upload, a dataset re-shard. A stall watchdog cannot tell that from a hang,
but the job's own history can: the line it fell silent after (its shape, numbers aside) appeared
before in the same log, and each time the next stamped line, a different one (the phase's end),
came only much later. A silence no
longer than the longest of those (with slack: an evaluation's length varies with what it
generates) is that phase again, not a hang. A span in which the training-progress feed saw the
step move was not quiet (the log is an excerpt there), so it does not count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from crashcart.agent.policies.evidence import RUNNING_STATES, Evidence

SLACK = 1.5
"""How much longer than its longest earlier run a phase may take and still be that phase: a
generative eval's length follows what it generates, a save's the filesystem's load."""
_NUMBER = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")


@dataclass
class QuietPhase:
    job: str
    line: str
    """The stamped line the job fell silent after."""
    silent_min: float
    earlier_min: list[float]
    """How long the same line was followed by silence before, in minutes, oldest first."""

    def describe(self) -> str:
        before = ", ".join(f"{m:.0f}" for m in self.earlier_min)
        return (f"job {self.job}: silent {self.silent_min:.0f} min since \"{self.line[:160]}\"; "
                f"the same phase lasted {before} min before")


def shape(line: str) -> str:
    """A log line with its numbers (stamp, step, counts) blanked: the same message at another time."""
    return _SPACE.sub(" ", _NUMBER.sub("#", line)).strip()


def quiet_as_before(ev: Evidence, job: str, slack: float = SLACK) -> QuietPhase | None:
    """The quiet phase a running job is in, when its own log shows it went through it before."""
    from crashcart.tools.render import job_log_stamp

    facts = ev.jobs.get(job)
    if ev.now is None or facts is None or facts.state.upper() not in RUNNING_STATES:
        return None
    stamp_of = job_log_stamp(ev.now)
    for doc in ev.docs:
        if doc.source != "log" or doc.entity != f"job:{job}":
            continue
        stamped = [(t, line.strip()) for line in doc.lines if (t := stamp_of(line)) is not None]
        if len(stamped) < 3:
            return None
        last_time, last_line = stamped[-1]
        silent = (ev.now - last_time).total_seconds() / 60
        if silent <= 0:
            return None
        wanted = shape(last_line)
        # A phase is opened by one line and closed by another ("starting eval" ... "eval done"); a
        # line followed by its own kind again is the run's periodic logging, and the gap between two
        # of them is the training in between (or an excerpt's cut), not a quiet phase.
        earlier = [(t, nxt) for (t, line), (nxt, closing) in zip(stamped[:-1], stamped[1:])
                   if shape(line) == wanted and shape(closing) != wanted and nxt > t
                   and not _steps_moved(ev, job, t, nxt)]
        durations = [(nxt - t).total_seconds() / 60 for t, nxt in earlier]
        if durations and silent <= slack * max(durations):
            return QuietPhase(job, last_line, silent, durations)
        return None
    return None


def _steps_moved(ev: Evidence, job: str, start: datetime, end: datetime) -> bool:
    """Whether the training-progress feed saw the step change between two log lines."""
    points = sorted(ev.progress.get(job, ([], []))[0], key=lambda p: p.time)
    before = [p.step for p in points if p.time <= start]
    inside = [p.step for p in points if start < p.time < end]
    if not inside:
        return False
    return len(set(inside)) > 1 or (bool(before) and inside[0] != before[-1])
