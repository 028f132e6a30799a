"""When a log that ends in a progress bar was last alive.

tqdm-style bars print no wall-clock stamp, so a job inside a long evaluation, generation sweep or
checkpoint upload looks silent to a reader of timestamps while its bar keeps advancing. A bar does
print its own elapsed time, though: a bar that began after a known moment (the log's last stamped
line, or the last step the training-progress feed recorded) was alive at least until that moment
plus the elapsed time its newest update shows. That is a lower bound, never a guess; an anchor the
bar cannot have started after (the sum lands after now) is rejected.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

# "  52%|█████▏    | 376/723 [24:53<22:58,  3.97s/it]", "Uploading:  61%|██  | 682G/1.12T [25:20<16:16, 450MB/s]"
_BAR = re.compile(
    r"\|\s*(?P<done>\d+(?:\.\d+)?)(?P<unit>[kKMGTP]?)(?:i?B)?/(?P<total>\d+(?:\.\d+)?[kKMGTP]?(?:i?B)?)\s*"
    r"\[(?P<elapsed>(?:\d+:)?\d{1,2}:\d{2})(?:<|\])"
)
_SCALE = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
CLOCK_SLACK = timedelta(minutes=2)
"""A bar may appear to end a little after `now`: clocks of the job and the collector differ."""


def _seconds(elapsed: str) -> int:
    parts = [int(p) for p in elapsed.split(":")]
    total = 0
    for p in parts:
        total = total * 60 + p
    return total


def trailing_bar_elapsed(lines: list[str], after: int = -1) -> timedelta | None:
    """The elapsed time of the bar the log ends in, when that bar is visibly advancing.

    Only lines after index `after` count (the anchor line). The last non-blank line must be a bar
    update, and the bar's last two updates (same total) must show more work done, so a bar frozen
    at one count, or a bar from an earlier phase followed by other output, proves nothing.
    """
    tail = [line for line in lines[after + 1:] if line.strip()]
    if not tail or not _BAR.search(tail[-1]):
        return None
    updates = [m for m in (_BAR.search(line) for line in tail) if m]
    if len(updates) < 2:
        return None
    last, before = updates[-1], updates[-2]
    if last["total"] != before["total"]:
        return None
    done = float(last["done"]) * _SCALE[last["unit"]]
    done_before = float(before["done"]) * _SCALE[before["unit"]]
    if done <= done_before or _seconds(last["elapsed"]) <= _seconds(before["elapsed"]):
        return None
    return timedelta(seconds=_seconds(last["elapsed"]))


def bar_alive_until(lines: list[str], stamped_index: int | None, anchors: list[datetime],
                    now: datetime) -> datetime | None:
    """The latest moment the trailing progress bar proves the job alive, or None.

    `stamped_index` is the index of the log's last line carrying a wall-clock stamp (None if none
    does); `anchors` are moments the bar began after (that line's stamp, the last recorded step).
    The latest anchor that still places the bar's newest update no later than now is used.
    """
    elapsed = trailing_bar_elapsed(lines, -1 if stamped_index is None else stamped_index)
    if elapsed is None:
        return None
    alive = [a + elapsed for a in anchors if a + elapsed <= now + CLOCK_SLACK]
    return min(max(alive), now) if alive else None


def extend_log_times(ev) -> None:
    """Move each live job log's `last_time` forward to what its trailing progress bar proves.

    Runs after every observation is indexed, so the training-progress feed can anchor a log with
    no stamped line at all (a Ray worker's prefix carries none).
    """
    if ev.now is None:
        return
    from crashcart.tools.render import job_log_stamp

    stamp_of = job_log_stamp(ev.now)
    for doc in ev.docs:
        if doc.source != "log" or not doc.entity.startswith("job:"):
            continue
        stamped_index, anchors = None, []
        for i in range(len(doc.lines) - 1, max(-1, len(doc.lines) - 201), -1):
            stamp = stamp_of(doc.lines[i])
            if stamp is not None:
                stamped_index, anchors = i, [stamp]
                break
        points = ev.progress.get(doc.entity[4:], ([], []))[0]
        if points:
            anchors.append(max(p.time for p in points))
        alive = bar_alive_until(doc.lines, stamped_index, anchors, ev.now)
        if alive is not None and (doc.last_time is None or alive > doc.last_time):
            doc.last_time = alive
