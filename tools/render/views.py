"""crashcart's own views, which no cluster command prints: job history, training progress."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from crashcart.tools.cluster import Checkpoint, Job, ProgressPoint
from crashcart.tools.render._formats import elapsed_seconds, slurm_time, table
from crashcart.tools.render.slurm import compress_hostlist, slurm_elapsed


def history_lines(entries: Sequence[tuple[Job, int | None]], now: datetime) -> list[str]:
    """Jobs and attempts with GPU-hours (GPUs x elapsed): what capacity questions need."""
    rows, total = [], 0.0
    for job, attempt in entries:
        hours = job.gpus * elapsed_seconds(job, now) / 3600
        total += hours
        rows.append((job.id, attempt or "-", job.name or "", job.user or "", job.partition or "",
                     job.state, job.exit_code or "", slurm_time(job.start_time),
                     slurm_time(job.end_time), slurm_elapsed(elapsed_seconds(job, now)), job.gpus,
                     f"{hours:.1f}", compress_hostlist(job.nodes) or "-", job.reason or ""))
    header = ["JOBID", "ATTEMPT", "NAME", "USER", "PARTITION", "STATE", "EXITCODE", "START", "END",
              "ELAPSED", "GPUS", "GPU_HOURS", "NODELIST", "REASON"]
    return table(header, rows, gap=2) + [f"Total: {len(rows)} rows, {total:.1f} GPU-hours"]


def _minutes(delta: timedelta) -> str:
    return f"{int(delta.total_seconds() // 60)} min ago"


def progress_lines(job: Job, points: Sequence[ProgressPoint], checkpoints: Sequence[Checkpoint],
                   now: datetime) -> list[str]:
    """Progress table and the two numbers that tell a stall: time since the step last moved
    and since the last checkpoint."""
    lines = [f"Job {job.id} ({job.name or '-'}): {job.state}; now {slurm_time(now)}"]
    if points:
        lines += table(["TIME", "STEP", "LOSS", "TOKENS/S"], [
            (slurm_time(p.time), "-" if p.step is None else p.step,
             "-" if p.loss is None else f"{p.loss:.4f}",
             "-" if p.tokens_per_sec is None else f"{p.tokens_per_sec:.0f}")
            for p in points
        ], gap=2)
        stepped = [p for p in points if p.step is not None]
        if stepped:
            changed = stepped[0]
            for prev, cur in zip(stepped, stepped[1:]):
                if cur.step != prev.step:
                    changed = cur
            lines.append(f"Last step change: step {changed.step} at {slurm_time(changed.time)}, "
                         f"{_minutes(now - changed.time)}; latest report {slurm_time(stepped[-1].time)}")
        else:
            lines.append("No step numbers recorded.")
    else:
        lines.append("No progress recorded.")
    if checkpoints:
        lines.append("Checkpoints:")
        lines += table(["STEP", "TIME", "PATH"],
                       [(c.step, slurm_time(c.time), c.path or "-") for c in checkpoints], gap=2)
        last = max(checkpoints, key=lambda c: c.time)
        lines.append(f"Last checkpoint: step {last.step} at {slurm_time(last.time)}, {_minutes(now - last.time)}")
    else:
        lines.append("No checkpoints recorded.")
    return lines
