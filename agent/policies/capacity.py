"""Answers for capacity reviews: demand from job history, idle GPUs from telemetry.

A team lead asks in words; the answer is numbers the cluster recorded, with the
rows they come from, never a guess.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from crashcart.agent.policies.evidence import Evidence, _time

IDLE_UTIL_PCT = 5.0


def _mentioned(text: str, names: set[str]) -> set[str]:
    words = set(re.findall(r"[\w.-]+", text.lower()))
    return {n for n in names if n and n.lower() in words}


def _concurrency(rows: list[dict[str, Any]], since: datetime, until: datetime) -> tuple[float, int]:
    """(GPU-hours used in the window, the peak number of GPUs held at once)."""
    events: list[tuple[datetime, int]] = []
    gpu_hours = 0.0
    for r in rows:
        start, end, gpus = _time(r.get("start_time")), _time(r.get("end_time")) or until, r.get("gpus") or 0
        if not start or not gpus:
            continue
        start, end = max(start, since), min(end, until)
        if end <= start:
            continue
        gpu_hours += gpus * (end - start).total_seconds() / 3600
        events += [(start, gpus), (end, -gpus)]
    peak = held = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        held += delta
        peak = max(peak, held)
    return gpu_hours, peak


def demand_forecast(ev: Evidence) -> tuple[str, list[str]]:
    text = ev.trigger.get("text") or ""
    rows = [r for r in ev.history_rows if not r.get("attempt")]
    users = _mentioned(text, {r.get("user") or "" for r in rows})
    partitions = _mentioned(text, {r.get("partition") or "" for r in rows})
    scoped = [r for r in rows if (not users or r.get("user") in users)
              and (not partitions or r.get("partition") in partitions)]
    if not scoped or ev.now is None:
        return "No job history matches the question; nothing to forecast from.", []
    until = ev.now
    since = until - timedelta(days=30)
    hours, peak = _concurrency(scoped, since, until)
    mid = until - timedelta(days=14)
    early, _ = _concurrency(scoped, since, mid)
    late, _ = _concurrency(scoped, mid, until)
    avg = hours / (30 * 24)
    early_rate, late_rate = early / (16 * 24), late / (14 * 24)
    growth = (late_rate / early_rate - 1) if early_rate > 0 else 0.0
    pending = sum(r.get("gpus") or 0 for r in scoped if str(r.get("state", "")).upper() == "PENDING")
    forecast = max(late_rate * (1 + max(growth, 0)), avg) + pending
    scope = ", ".join(sorted(users)) or "all users"
    if partitions:
        scope += f" on {', '.join(sorted(partitions))}"
    # A trend needs a base: with no use in the earlier weeks a percentage would be made up.
    trend = f"{growth:+.0%}" if early_rate > 0 else "no use before, so no trend"
    evidence = [
        f"{len(scoped)} jobs of {scope} in the last 30 days: {hours:,.0f} GPU-hours",
        f"average {avg:.1f} GPUs busy, peak {peak} GPUs at once",
        f"last 14 days {late_rate:.1f} GPUs on average vs {early_rate:.1f} before ({trend})",
    ]
    if pending:
        evidence.append(f"{pending} GPUs requested by jobs still pending")
    against = (f"{growth:+.0%} against the {early_rate:.1f} of the weeks before" if early_rate > 0
               else "none busy in the weeks before, so no trend to extrapolate")
    summary = (f"for {scope}, plan for about {forecast:.0f} GPUs next month: {late_rate:.0f} busy on "
               f"average over the last two weeks ({against})"
               + (f", plus {pending} GPUs queued" if pending else "") + f"; the peak so far was {peak}.")
    return summary, evidence


def idle_gpus(ev: Evidence) -> tuple[str, list[str]]:
    idle: list[str] = []
    busy = 0
    for node, samples in sorted(ev.telemetry.items()):
        by_gpu: dict[int, list[float]] = {}
        for s in samples:
            if s.util_pct is not None:
                by_gpu.setdefault(s.index, []).append(s.util_pct)
        state = str((ev.nodes.get(node) or {}).get("state", "")).lower()
        for index, utils in sorted(by_gpu.items()):
            if max(utils) <= IDLE_UTIL_PCT:
                held = state in {"allocated", "alloc", "mixed", "mix"}
                idle.append(f"{node} GPU {index}: at most {max(utils):.0f}% busy over {len(utils)} samples"
                            + (" while allocated to a job" if held else ""))
            else:
                busy += 1
    if not idle:
        return f"No idle GPUs: all {busy} GPUs sampled were busy.", [f"{busy} GPUs sampled, none idle"]
    held = [i for i in idle if "allocated" in i]
    summary = (f"{len(idle)} of {len(idle) + busy} sampled GPUs sat idle"
               + (f", {len(held)} of them held by jobs that do not use them" if held else "") + ".")
    return summary, idle
