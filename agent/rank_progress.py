"""Ranks out of step when a log stops: a hang told by comparing ranks, not by a clock.

Ranks that meet in a collective every iteration cannot drift apart by more than the iteration
they are in. A log whose ranks each count batches or steps, and whose last lines leave one rank
two or more of its usual increments behind another, with no error and no end of training after,
shows ranks that stopped meeting: the ones ahead wait in a collective for a rank doing other
work (an uneven data shard, a rank-dependent branch). Progress bars and a single rank's counter
say nothing about this, so both ranks' own prefixes must be on the lines.
"""

from __future__ import annotations

import re
from statistics import median

# The prefixes launchers put on a rank's lines: torchrun `--tee`/`--log-line-prefix` ("[rank1]:"),
# mpirun `--tag-output` ("[1,3]<stdout>:"), srun `--label` ("3: "), and a trainer's own "Rank 3".
_RANK = re.compile(
    r"^\[rank(?P<a>\d+)\]:|^\[\d+,(?P<b>\d+)\]<std(?:out|err)>:|^(?P<c>\d{1,5}): |\b[Rr]ank[ =:#]?(?P<d>\d+)\b"
)
# A per-rank counter: "batch 87", "step=12", "iter: 9", "iteration 300".
_COUNTER = re.compile(r"\b(?:batch|step|iter(?:ation)?)\b\s*[=:#]?\s*(\d+)", re.I)
# Lines that end the question: the run failed (another verdict speaks) or finished.
_ENDED = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(?:Error|Exception):|\bfinished\b|\bcompleted?\b|\bdone\b|"
    r"exit(?:ed)? (?:with )?(?:code|status)",
    re.I,
)
MIN_COUNTS_PER_RANK = 3
BEHIND_INCREMENTS = 2


def _rank_of(line: str) -> int | None:
    m = _RANK.search(line)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


def ranks_out_of_step(lines: list[str]) -> tuple[dict[int, int], list[str]] | None:
    """Each rank's last counter and the lines that show the gap, when the log stops with ranks
    apart by BEHIND_INCREMENTS usual increments or more; None when it does not tell."""
    counts: dict[int, list[int]] = {}
    last_line: dict[int, str] = {}
    for line in lines:
        rank = _rank_of(line)
        m = _COUNTER.search(line)
        if rank is None or m is None:
            if _ENDED.search(line):
                return None
            continue
        seen = counts.setdefault(rank, [])
        value = int(m.group(1))
        if seen and value < seen[-1]:
            return None  # a counter that goes back is a new pass or a restart, not one stop
        seen.append(value)
        last_line[rank] = line.strip()
    ranked = {r: v for r, v in counts.items() if len(v) >= MIN_COUNTS_PER_RANK}
    if len(ranked) < 2:
        return None
    # The largest of the ranks' usual increments: a rank that logs every tenth step is not behind
    # one that logs every step.
    per_rank = [[b - a for a, b in zip(v, v[1:]) if b > a] for v in ranked.values()]
    if not all(per_rank):
        return None
    usual = max(median(steps) for steps in per_rank)
    last = {r: v[-1] for r, v in ranked.items()}
    ahead, behind = max(last, key=last.get), min(last, key=last.get)
    if last[ahead] - last[behind] < BEHIND_INCREMENTS * usual:
        return None
    return last, [last_line[behind][:300], last_line[ahead][:300]]
