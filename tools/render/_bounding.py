"""Bounding tool output: since, grep, tail and a size cap, and the readers of log-line timestamps."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone

from crashcart.tools._spec import ToolError
from crashcart.tools.catalog import MAX_TEXT_CHARS
from crashcart.tools.render._formats import aware

StampOf = Callable[[str], "datetime | None"]

# --- bounding ---------------------------------------------------------------------

_NOTE_ROOM = 240  # characters kept free for the "[crashcart: ...]" line


def bound_lines(
    lines: Sequence[str],
    tail: int | None = None,
    grep: str | None = None,
    since: datetime | None = None,
    stamp_of: StampOf | None = None,
    *,
    pinned: int = 0,
) -> tuple[str, bool, int]:
    """Narrow lines by since, grep and tail, then cap the size; returns (text, truncated, total).

    `pinned` leading lines (a table's header) survive every cut. When anything
    was left out, the text's first line says what and how much, so a reader
    never mistakes a tail for the whole log.
    """
    head, body = list(lines[:pinned]), list(lines[pinned:])
    total = len(body)
    notes: list[str] = []

    kept = body
    since_applied = False
    if since is not None and stamp_of is not None:
        kept, since_applied = _since(kept, aware(since), stamp_of)
        if not since_applied and body:
            notes.append("no line has a timestamp crashcart can read, so 'since' was not applied")
    if grep:
        try:
            pattern = re.compile(grep, re.IGNORECASE)
        except re.error as e:
            raise ToolError(f"invalid grep pattern '{grep}': {e}") from None
        kept = [line for line in kept if pattern.search(line)]
    matched = len(kept)
    if tail is not None and len(kept) > tail:
        kept = kept[-tail:]
    kept, capped = _cap(kept, MAX_TEXT_CHARS - _NOTE_ROOM - sum(len(h) + 1 for h in head))

    if grep or since_applied:
        conditions = ([f"match '{grep}'"] if grep else []) + (
            [f"are stamped at or after {aware(since):%Y-%m-%dT%H:%M:%S}"] if since_applied else []
        )
        if matched < total:
            notes.insert(0, f"{matched} of {total} lines {' and '.join(conditions)}")
        if len(kept) < matched:
            notes.append(f"showing the last {len(kept)}")
    elif len(kept) < total:
        notes.insert(0, f"showing last {len(kept)} of {total} lines")
    if capped:
        notes.append(f"cut to the last {len(kept)} lines to stay under {MAX_TEXT_CHARS} characters")

    truncated = len(kept) < total or capped
    out = ([f"[crashcart: {'; '.join(notes)}]"] if notes else []) + head + kept
    return "\n".join(out), truncated, total


def _since(lines: list[str], since: datetime, stamp_of: StampOf) -> tuple[list[str], bool]:
    kept: list[str] = []
    keep = False  # an unstamped line (a traceback's body) goes with the line above it
    seen_stamp = False
    for line in lines:
        stamp = stamp_of(line)
        if stamp is not None:
            seen_stamp = True
            keep = aware(stamp) >= since
        if keep:
            kept.append(line)
    return (kept, True) if seen_stamp else (lines, False)


def _cap(lines: list[str], budget: int) -> tuple[list[str], bool]:
    """Keep the end: the latest lines are where a failure shows."""
    size, start = 0, len(lines)
    while start > 0 and size + len(lines[start - 1]) + 1 <= budget:
        start -= 1
        size += len(lines[start]) + 1
    if start == 0:
        return lines, False
    if start == len(lines):  # one line longer than the whole budget: keep its end
        return [lines[-1][-budget:]], True
    return lines[start:], True


# --- timestamps in log lines --------------------------------------------------------

# ISO and Python-logging stamps, optionally behind an `srun -l` or torchrun rank prefix.
_ISO = re.compile(
    r"^(?:\d+:\s*|\[rank\d+\]:\s*)?\[?(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})"
    r"(?:[.,](\d{1,9}))?\s?(Z|[+-]\d{2}:?\d{2})?"
)
_GLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}:\d{2}:\d{2})\b")
_DMESG_T = re.compile(r"^\[[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}:\d{2}:\d{2}) (\d{4})\]")
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


def _iso_stamp(line: str) -> datetime | None:
    m = _ISO.match(line)
    if not m:
        return None
    date, clock, frac, zone = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        dt = datetime.fromisoformat(f"{date}T{clock}").replace(microsecond=micro)
    except ValueError:
        return None
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        return dt.replace(tzinfo=timezone(sign * offset))
    return dt.replace(tzinfo=timezone.utc)


def _clock(text: str) -> tuple[int, int, int]:
    h, mi, s = (int(x) for x in text.split(":"))
    return h, mi, s


def _yearless(month: int, day: int, clock: str, now: datetime) -> datetime | None:
    # glog and syslog stamps carry no year: take now's, or last year's when
    # that would put the line in the future (December lines read in January).
    for year in (now.year, now.year - 1):
        try:
            dt = datetime(year, month, day, *_clock(clock), tzinfo=timezone.utc)
        except ValueError:
            continue
        if dt <= aware(now) + timedelta(days=1):
            return dt
    return None


def _dmesg_t_stamp(line: str) -> datetime | None:
    m = _DMESG_T.match(line)
    if not m or m[1] not in _MONTHS:
        return None
    return datetime(int(m[4]), _MONTHS[m[1]], int(m[2]), *_clock(m[3]), tzinfo=timezone.utc)


def _first_of(*readers: StampOf) -> StampOf:
    """A reader that returns the first stamp any of `readers` finds in a line."""

    def stamp(line: str) -> datetime | None:
        for read in readers:
            if (dt := read(line)) is not None:
                return dt
        return None

    return stamp


def job_log_stamp(now: datetime) -> StampOf:
    """Stamps in job logs: ISO, Python logging, and Kubernetes/glog `I0302 09:41:03.123456`."""

    def glog(line: str) -> datetime | None:
        m = _GLOG.match(line)
        return _yearless(int(m[1]), int(m[2]), m[3], now) if m else None

    return _first_of(_iso_stamp, glog)


def kernel_log_stamp(now: datetime) -> StampOf:
    """Stamps in kernel logs. Plain dmesg `[12345.678]` counts from boot and has no wall clock."""

    def syslog(line: str) -> datetime | None:
        m = _SYSLOG.match(line)
        return _yearless(_MONTHS[m[1]], int(m[2]), m[3], now) if m and m[1] in _MONTHS else None

    return _first_of(_iso_stamp, syslog, _dmesg_t_stamp)
