"""Why jobs wait: the constraint that binds, read from the scheduler, with demand by hour of day.

"Our jobs wait every afternoon" has one of a few answers, and each is a number the scheduler
holds: a QOS or account cap (GrpTRES) that is full while nodes sit idle, a Kueue ClusterQueue
whose quota is reserved, an autoscaler node type at its max_workers, a fair-share factor spent,
or simply every GPU busy. The answer names which one, with the arithmetic, and the hours it binds.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median
from typing import Any

from crashcart.agent.policies.capacity import _mentioned
from crashcart.agent.policies.evidence import Evidence, _time

OUT_OF_SERVICE = {"down", "drain", "drained", "draining", "cordoned", "not_ready", "notready", "dead"}
GROUP_LIMIT_REASON = re.compile(r"^(QOS|Assoc)Grp(GRES|TRES|Node|Cpu|Mem)", re.I)
# Kueue's workload condition when its ClusterQueue cannot admit it (v0.4 onwards).
KUEUE_QUOTA_REASON = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^\s,]+), (?P<more>\d+) more needed")
PEAK_SHARE = 0.5
"""An hour is part of the peak when at least this share of the worst hour's GPUs wait."""
LOW_FAIRSHARE = 0.25
WAIT_MINUTES = 30
"""A job that started later than this after submission waited for something."""
FULL_SHARE = 0.7
"""Capacity binds when at least this share of waits found too few GPUs free."""


def gpus_in(tres: str | None) -> int:
    """GPUs in a Slurm TRES limit (`gres/gpu=48`, `cpu=512,gres/gpu:h100=32`)."""
    return sum(int(m[1]) for m in re.finditer(r"gres/gpu(?::[\w.-]+)?=(\d+)", tres or ""))


@dataclass
class HourlyDemand:
    """Average GPUs waiting and running at each hour of the day (UTC) over the days seen."""

    waiting: list[float] = field(default_factory=lambda: [0.0] * 24)
    running: list[float] = field(default_factory=lambda: [0.0] * 24)
    days: int = 0

    def peak_hours(self) -> list[int]:
        top = max(self.waiting)
        return [h for h in range(24) if top > 0 and self.waiting[h] >= PEAK_SHARE * top]

    def window(self) -> str:
        """The peak hours as ranges: `13:00-18:00 UTC`."""
        hours = self.peak_hours()
        if not hours:
            return "no hour"
        ranges: list[list[int]] = []
        for h in hours:
            if ranges and h == ranges[-1][1] + 1:
                ranges[-1][1] = h
            else:
                ranges.append([h, h])
        return ", ".join(f"{a:02d}:00-{(b + 1) % 24:02d}:00" for a, b in ranges) + " UTC"

    def at_peak(self, series: list[float]) -> float:
        hours = self.peak_hours()
        return sum(series[h] for h in hours) / len(hours) if hours else 0.0


def _spread(series: list[float], start: datetime, end: datetime, gpus: int) -> None:
    """Add `gpus` for every hour-of-day bucket the interval covers, weighted by the time in it."""
    t = start
    while t < end:
        nxt = min(end, t.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1))
        series[t.hour] += gpus * (nxt - t).total_seconds() / 3600
        t = nxt


def hourly_demand(rows: list[dict[str, Any]], now: datetime) -> HourlyDemand:
    """From job rows (submit, start, end, GPUs): GPUs waiting (submitted, not started) and running,
    averaged per hour of day over the days the rows span."""
    demand = HourlyDemand()
    firsts = [t for r in rows if (t := _time(r.get("submit_time")) or _time(r.get("start_time")))]
    if not firsts:
        return demand
    since = min(firsts)
    demand.days = max(1, round((now - since).total_seconds() / 86400))
    # How many times each hour of the day occurred in the window: an average per hour divides by
    # its own count (the first and last day are partial).
    seen = [0.0] * 24
    _spread(seen, since, now, 1)
    for r in rows:
        gpus = r.get("gpus") or 0
        submit, start, end = _time(r.get("submit_time")), _time(r.get("start_time")), _time(r.get("end_time"))
        if not gpus:
            continue
        if submit:
            _spread(demand.waiting, submit, min(start or now, now), gpus)
        if start:
            _spread(demand.running, start, min(end or now, now), gpus)
    demand.waiting = [round(v / seen[h], 2) if seen[h] else 0.0 for h, v in enumerate(demand.waiting)]
    demand.running = [round(v / seen[h], 2) if seen[h] else 0.0 for h, v in enumerate(demand.running)]
    return demand


def _gpus_in_service(ev: Evidence) -> int:
    return sum(int(row.get("gpus") or 0) for row in ev.nodes.values()
               if str(row.get("state", "")).lower().replace("-", "_") not in OUT_OF_SERVICE)


def free_when_waiting(rows: list[dict[str, Any]], waiting: list[dict[str, Any]], total: int,
                      now: datetime) -> list[tuple[int, int]]:
    """(GPUs free, GPUs asked) half an hour into each wait: whether the jobs waited for GPUs that
    were not there, or for something else while GPUs were free."""
    samples = []
    for r in waiting:
        submit, start = _time(r.get("submit_time")), _time(r.get("start_time"))
        t = submit + timedelta(minutes=30) if submit else None
        if t is None or t > now or (start is not None and start <= t):
            continue
        samples.append((total - _held_at(rows, t), r.get("gpus") or 0))
    return samples


def _qos_cap(ev: Evidence, rows: list[dict[str, Any]], demand: HourlyDemand, idle: float) -> list[str] | None:
    """A QOS or account GrpTRES GPU cap that the waiting jobs name, or that its jobs fill."""
    waiting_on_group = [r for r in rows if GROUP_LIMIT_REASON.match(str(r.get("reason") or ""))]
    caps = [(q["name"], gpus_in(q.get("grp_tres")), "QOS") for q in ev.limits.get("qos") or []]
    caps += [(a["account"], gpus_in(a.get("grp_tres")), "account") for a in ev.limits.get("associations") or []
             if not a.get("user")]
    caps = [c for c in caps if c[1]]
    if not caps:
        return None
    for name, cap, kind in caps:
        key = "qos" if kind == "QOS" else "account"
        mine = [r for r in rows if r.get(key) == name]
        named = [r for r in waiting_on_group if not r.get(key) or r.get(key) == name]
        if not mine and not named:
            continue
        held = max((_held_at(mine, t) for t in _starts(mine)), default=0)
        if not named and held < cap:
            continue
        reason = named[0].get("reason") if named else None
        lines = [f"{kind} {name} GrpTRES=gres/gpu={cap}: its running jobs hold at most {cap} GPUs together"
                 + (f"; they reached {held} of {cap}" if held else "")]
        if named:
            lines.append(f"{len(named)} jobs waited with reason {reason} (the group limit, not free nodes)")
        lines.append(f"meanwhile {idle:.0f} GPUs were free while the jobs waited (median)")
        return lines
    return None


def _group_limit_from_reasons(ev: Evidence, rows: list[dict[str, Any]], idle: float) -> list[str] | None:
    """No GrpTRES read from sacctmgr, but the waiting jobs' own pending reason (squeue %r) names a
    group limit: the cap is then bounded by what the group's running jobs hold now."""
    named = [r for r in rows if not _time(r.get("start_time"))
             and GROUP_LIMIT_REASON.match(str(r.get("reason") or ""))]
    if not named or ev.now is None:
        return None
    reason = Counter(str(r["reason"]) for r in named).most_common(1)[0][0]
    kind, key = ("QOS", "qos") if reason.upper().startswith("QOS") else ("account", "account")
    groups = sorted({str(r[key]) for r in named if r.get(key)})
    members = [r for r in rows if r.get(key) in groups] if groups else []
    held = _held_at(members, ev.now)
    smallest = min((r.get("gpus") or 0 for r in named), default=0)
    who = f"{kind} {', '.join(groups)}" if groups else f"their {kind}"
    lines = [f"{len(named)} jobs of {who} wait with reason {reason}: the {kind}'s group limit (GrpTRES) "
             "is reached, not the nodes"]
    if members and held:
        lines.append(f"the {kind}'s running jobs hold {held} GPUs now, so its cap is at least {held} and below "
                     f"{held} + {smallest} = {held + smallest} (the smallest waiting request)")
    lines.append(f"meanwhile {idle:.0f} GPUs were free while the jobs waited (median)")
    return lines


def _starts(rows: list[dict[str, Any]]) -> list[datetime]:
    return [t for r in rows if (t := _time(r.get("start_time")))]


def _held_at(rows: list[dict[str, Any]], t: datetime) -> int:
    held = 0
    for r in rows:
        start, end = _time(r.get("start_time")), _time(r.get("end_time"))
        if start and start <= t and (end is None or end > t):
            held += r.get("gpus") or 0
    return held


def _kueue_quota(ev: Evidence) -> list[str] | None:
    for q in ev.limits.get("cluster_queues") or []:
        ceiling = q["nominal_quota"] + (q.get("borrowing_limit") or 0)
        if q.get("pending_workloads") and q.get("reserved", 0) >= q["nominal_quota"]:
            borrow = q.get("borrowing_limit")
            return [
                f"ClusterQueue {q['name']}: {q['reserved']} of {q['nominal_quota']} {q['resource']} reserved in flavor "
                f"{q['flavor']} (nominal quota {q['nominal_quota']}"
                + (f", borrowing limit {borrow}: at most {ceiling}" if borrow is not None else ", borrowing unbounded")
                + ")",
                f"{q['pending_workloads']} workloads wait for quota while {q['admitted_workloads']} are admitted",
            ]
    return None


def _kueue_quota_from_reasons(ev: Evidence, rows: list[dict[str, Any]], idle: float) -> list[str] | None:
    """No ClusterQueue read, but Kueue's own message on the waiting workloads says their queue's
    quota is used up: what the same namespaces' admitted workloads hold is that quota's use."""
    held = [(r, m) for r in rows if not _time(r.get("start_time"))
            if (m := KUEUE_QUOTA_REASON.search(str(r.get("reason") or "")))]
    if not held or ev.now is None:
        return None
    namespaces = sorted({str(r["partition"]) for r, _ in held if r.get("partition")})
    using = _held_at([r for r in rows if r.get("partition") in namespaces], ev.now)
    resource, flavor = held[0][1]["resource"], held[0][1]["flavor"]
    more = sum(int(m["more"]) for _, m in held)
    return [f"{len(held)} workloads of {', '.join(namespaces) or 'the queue'} are not admitted: Kueue reports "
            f"insufficient unused quota for {resource} in flavor {flavor} ({more} more needed in all)",
            f"the admitted workloads there hold {using} GPUs: that is the ClusterQueue's quota in use, so the "
            f"waiting ones stay suspended while {idle:.0f} GPUs sit free (median while they waited)"]


def _autoscaler_max(ev: Evidence) -> list[str] | None:
    scaler = ev.limits.get("autoscaler") or {}
    demands = scaler.get("demands") or []
    for t in scaler.get("node_types") or []:
        if t["running"] < t["max_workers"]:
            continue
        wanted = [d for d in demands if set(d["resources"]) <= set(t.get("resources") or {}) | {"CPU", "memory"}
                  and any(k in (t.get("resources") or {}) for k in d["resources"])]
        if not wanted:
            continue
        asked = ", ".join(f"{d['count']}+ pending {d['kind']} asking {d['resources']}" for d in wanted)
        return [f"autoscaler node type {t['name']} runs {t['running']} of max_workers={t['max_workers']}: it cannot "
                f"add a node", f"demands it cannot place: {asked}"]
    return None


def _fair_share(ev: Evidence, rows: list[dict[str, Any]], text: str,
                everyone: list[dict[str, Any]]) -> list[str] | None:
    shares = [s for s in ev.limits.get("shares") or [] if not s.get("user") and s["account"] != "root"]
    if not shares:
        return None
    asked = _mentioned(text, {s["account"] for s in shares}) or {
        r.get("account") for r in rows if str(r.get("reason") or "").lower() == "priority" and r.get("account")}
    low = sorted((s for s in shares if s["account"] in asked and s["fairshare"] < LOW_FAIRSHARE),
                 key=lambda s: s["fairshare"])
    if not low:
        return None
    s = low[0]
    lines = [f"account {s['account']} FairShare {s['fairshare']:.2f}: it used {s['effectv_usage']:.0%} of the "
             f"cluster against a {s['norm_shares']:.0%} share, so its jobs rank below others (reason Priority)"]
    # sprio, when read: the fair-share part of the pending jobs' priorities, theirs against the rest.
    accounts = {r.get("job"): r.get("account") for r in everyone}
    prios = ev.limits.get("priorities") or []
    theirs = [p["fairshare"] for p in prios if accounts.get(p["job"]) == s["account"]]
    others = [p["fairshare"] for p in prios if p["job"] in accounts and accounts.get(p["job"]) != s["account"]]
    if theirs and others:
        lines.append(f"sprio: the FAIRSHARE factor of its {len(theirs)} pending jobs is {max(theirs)} at most, "
                     f"against {min(others)} or more for the {len(others)} others pending")
    return lines


def priority_factors(ev: Evidence) -> tuple[str, list[str], dict[str, Any] | None]:
    """Why a job waits its turn (reason Priority), from the scheduler's own numbers: its account's
    spent fair share (sshare) and the fair-share part of the pending jobs' priorities (sprio)."""
    waiting = [f for j in ev.focus_jobs() if (f := ev.jobs.get(j)) and str(f.reason or "").lower() == "priority"]
    rows = [_row_of(f) for f in ev.jobs.values()]
    mine = [_row_of(f) for f in waiting]
    lines = _fair_share(ev, mine, "", rows) if mine else None
    if not lines:
        read = "sshare shows no account of the waiting job short of its share" if ev.limits.get("shares") else \
            "the fair-share tables were not read"
        return (f"the job starts in its turn; higher-priority jobs go first ({read}).", [], None)
    return (f"job {waiting[0].job} waits its turn because its account's fair share is spent: {'; '.join(lines)}. "
            "Usage decays over time, so its priority recovers; a larger share is the account's PI to negotiate.", lines,
            {"binds": "fair_share"})


def binding_constraint(ev: Evidence) -> tuple[str, list[str], dict[str, Any]]:
    """(the answer, its evidence lines, a chart of GPUs waiting and running by hour of day)."""
    text = ev.trigger.get("text") or ""
    rows = [r for r in ev.history_rows if not r.get("attempt")]
    rows += [_row_of(f) for j, f in ev.jobs.items() if j not in {r.get("job") for r in rows}]
    users = _mentioned(text, {r.get("user") or "" for r in rows})
    accounts = _mentioned(text, {r.get("account") or "" for r in rows})
    scoped = [r for r in rows if (not users or r.get("user") in users)
              and (not accounts or r.get("account") in accounts)] or rows
    if ev.now is None or not scoped:
        return "No job history to tell when jobs wait; nothing to answer from.", [], {}
    demand = hourly_demand(scoped, ev.now)
    everyone = hourly_demand(rows, ev.now)
    total = _gpus_in_service(ev)
    peak_running = everyone.at_peak(everyone.running)
    waiting = demand.at_peak(demand.waiting)
    waits = [r for r in scoped if _waited(r)]
    samples = free_when_waiting(rows, waits, total, ev.now)
    idle = float(median(f for f, _ in samples)) if samples else max(0.0, total - peak_running)
    no_room = sum(free < asked for free, asked in samples)
    base = [f"{len(scoped)} jobs over {demand.days} days: at {demand.window()} on average {waiting:.1f} GPUs wait "
            f"and {peak_running:.1f} of {total} GPUs in service run"]
    if samples:
        base.append(f"half an hour into {len(samples)} waits, {no_room} found fewer GPUs free than they asked for "
                    f"(median {idle:.0f} free of {total})")
    checks = [
        ("qos_cap", "a QOS/account GPU cap (GrpTRES)", lambda: _qos_cap(ev, scoped, demand, idle)),
        ("kueue_quota", "the Kueue ClusterQueue quota", lambda: _kueue_quota(ev)),
        # The limit tables were not read: the waiting jobs' own pending reason names the limit.
        ("group_limit_reason", "a QOS/account GPU cap (GrpTRES)", lambda: _group_limit_from_reasons(ev, scoped, idle)),
        ("kueue_quota_reason", "the Kueue ClusterQueue quota", lambda: _kueue_quota_from_reasons(ev, scoped, idle)),
        ("autoscaler_max", "the autoscaler's max_workers", lambda: _autoscaler_max(ev)),
        ("fair_share", "fair share", lambda: _fair_share(ev, scoped, text, rows)),
    ]
    found = next(((key, what, lines) for key, what, check in checks if (lines := check())), None)
    # `binds` names what the answer rests on (also in the diagnosis' signals).
    chart = {"binds": "unknown", "title": "GPUs waiting and running by hour of day (UTC, average over "
                      f"{demand.days} days)", "hours": list(range(24)),
             "series": {"waiting": demand.waiting, "running": everyone.running}, "capacity": total}
    if found:
        key, what, lines = found
        chart["binds"] = key
        # The limit and its arithmetic (the second line: what the group holds, the quota in use).
        return (f"jobs wait at {demand.window()} because {what} binds, not the cluster's size: "
                f"{'; '.join(lines[:2])}.", lines + base, chart)
    if samples and no_room >= FULL_SHARE * len(samples):
        chart["binds"] = "capacity"
        return (f"jobs wait at {demand.window()} because every GPU is busy then: {no_room} of {len(samples)} waits "
                f"found fewer GPUs free than they asked for (median {idle:.0f} of {total} free); no scheduler limit "
                "binds, only capacity.", base, chart)
    if waiting <= 0:
        return "No waiting in the history read: jobs started when submitted.", base, chart
    return (f"could not tell what binds: {waiting:.1f} GPUs wait at {demand.window()} while {idle:.0f} sit idle, "
            "and no QOS cap, queue quota, autoscaler limit or fair-share shortfall was found in what the "
            "scheduler reported.", base, chart)


def _waited(r: dict[str, Any]) -> bool:
    submit, start = _time(r.get("submit_time")), _time(r.get("start_time"))
    return submit is not None and (start is None or (start - submit).total_seconds() > WAIT_MINUTES * 60)


def _row_of(f) -> dict[str, Any]:
    return {"job": f.job, "user": f.user, "partition": f.partition, "state": f.state, "reason": f.reason,
            "account": f.account, "qos": f.qos, "gpus": f.gpus, "submit_time": f.submit_time, "start_time": f.start_time, "end_time": f.end_time}


# `ray status` as Ray 2.x prints it (also echoed into a driver's log): one section per header.
_RAY_STATUS = re.compile(r"=+ Autoscaler status: [^\n]*=+\n")
_SECTION = re.compile(r"^(Active|Idle|Pending|Recent failures|Usage|Demands|Pending Demands):\s*$")
_USAGE = re.compile(r"^\s*(?P<used>[\d.]+)(?:[KMGT]i?B)?/(?P<total>[\d.]+)(?:[KMGT]i?B)? (?P<res>\w+)")
_DEMAND = re.compile(r"^\s*(?P<bundle>\{[^}]*\})(?: \* (?P<n>\d+))?(?: \(\w+\))?: (?P<count>\d+)\+ pending (?P<kind>.+)$")
_NODES = re.compile(r"^\s*(?P<count>\d+) (?P<type>\S+)\s*$")


def ray_status(text: str) -> dict[str, Any] | None:
    """The newest `ray status` block in a text: nodes per type (active, pending), recent failures,
    resource usage and unmet demands. None when the text holds none."""
    blocks = _RAY_STATUS.split(text)
    if len(blocks) < 2:
        return None
    status: dict[str, Any] = {"active": {}, "pending": {}, "failures": [], "usage": {}, "demands": []}
    section = None
    for line in blocks[-1].splitlines():
        if line and not line[0].isspace():
            # Entries are indented; any other line is a header, which ends the section before it.
            m = _SECTION.match(line.strip())
            section = m[1] if m else None
            continue
        if not line.strip() or line.strip().startswith(("(no ", "---")) or section is None:
            continue
        if section in {"Active", "Pending"} and (m := _NODES.match(line)):
            status[section.lower()][m["type"]] = int(m["count"])
        elif section == "Recent failures":
            status["failures"].append(line.strip())
        elif section == "Usage" and (m := _USAGE.match(line)):
            status["usage"][m["res"]] = (float(m["used"]), float(m["total"]))
        elif section in {"Demands", "Pending Demands"} and (m := _DEMAND.match(line)):
            status["demands"].append(line.strip())
    return status


def autoscaler_at_max(ev: Evidence) -> tuple[str, list[str], dict[str, Any] | None]:
    """One job waits for resources the cluster will not grow to give: the autoscaler launches no
    node for its demand (none pending, no launch failure) while every GPU is held."""
    docs = [d for d in ev.docs if d.source in {"log", "status_message"} or d.call.startswith("ray_autoscaler_status")]
    status = next((st for d in reversed(docs) if (st := ray_status(d.text))), None)
    job = next(iter(ev.focus_jobs()), None)
    subject = f"job {job}" if job else "the jobs"
    if not status:
        return f"{subject} waits, and no `ray status` was seen to tell why.", [], None
    used, total = status["usage"].get("GPU", (0.0, 0.0))
    active = ", ".join(f"{n} {t}" for t, n in status["active"].items()) or "no nodes"
    seen = (f"ray status: {active} active, no node pending and no launch failure, while "
            f"{used:g} of {total:g} GPUs are in use")
    lines = [seen, *(f"unmet demand: {d}" for d in status["demands"][:3])]
    bound = _configured_max(ev, status["active"])
    if bound:
        lines.insert(0, bound)
    # No node launching and none failing while a GPU demand waits: the autoscaler has nothing it may
    # add (the type is at max_workers, or the cluster does not autoscale).
    why = bound or "the GPU node type is at its max_workers (or the cluster does not autoscale)"
    return (f"{subject} waits because {why}: {seen}. Nothing is broken: it starts "
            "when running work frees GPUs, or sooner if the node type's maximum is raised.", lines, None)


def _configured_max(ev: Evidence, active: dict[str, int]) -> str | None:
    """The node type's max_workers as the autoscaler (ray_autoscaler_status) or the RayCluster's
    worker group (maxReplicas) states it, when it was read and the type runs that many."""
    for t in (ev.limits.get("autoscaler") or {}).get("node_types") or []:
        if t.get("max_workers") and t.get("running", 0) >= t["max_workers"]:
            return f"node type {t['name']} runs {t['running']} of max_workers={t['max_workers']}"
    for config in ev.configs.values():
        for key, value in config.items():
            m = re.fullmatch(r"workerGroupSpecs\.(?P<g>[\w.-]+)\.maxReplicas", str(key))
            if m and isinstance(value, int) and any(t.endswith(m["g"]) or t == m["g"] for t in active) \
                    and active.get(m["g"], 0) >= value:
                return f"worker group {m['g']} runs {active[m['g']]} of maxReplicas={value}"
    return None
