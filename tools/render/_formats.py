"""Small formats shared by more than one renderer: columns, times, durations, job activity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from crashcart.tools.cluster import Job


def aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], gap: int = 3) -> list[str]:
    """Left-aligned columns, as kubectl's tabwriter prints them."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [(" " * gap).join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def slurm_time(dt: datetime | None) -> str:
    return aware(dt).strftime("%Y-%m-%dT%H:%M:%S") if dt else "Unknown"


def iso_z(dt: datetime | None) -> str:
    return aware(dt).strftime("%Y-%m-%dT%H:%M:%SZ") if dt else "<unknown>"


def elapsed_seconds(job: Job, now: datetime) -> float:
    if not job.start_time:
        return 0.0
    return max(0.0, ((job.end_time or now) - job.start_time).total_seconds())


_ACTIVE = {
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
    "CRASHLOOPBACKOFF", "IMAGEPULLBACKOFF", "ERRIMAGEPULL", "CONTAINERCREATING",
    "PODINITIALIZING", "CREATECONTAINERCONFIGERROR", "TERMINATING",
}


def is_active(state: str) -> bool:
    """Still pending or running, in any scheduler's words."""
    return state.upper() in _ACTIVE
