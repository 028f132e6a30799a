"""Values for a Kubernetes probe that can never pass, computed from what the container printed.

A liveness or startup probe aimed at a port nothing listens on, or one that gives up before the
server has finished loading, kills a healthy container forever. The right port is the one the
server says it listens on; the right delay is the time the server was seen to need to come up.
Either returns None when the evidence does not hold it (then the owner decides).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.matching import _config_value

# The lines servers print once they accept connections: Uvicorn, Flask/Werkzeug, gunicorn,
# Go's and Node's usual "listening on :8080", TorchServe/Triton's "Started ... at 0.0.0.0:8000".
_LISTENING = re.compile(
    r"(?:Uvicorn running on|\bRunning on|[Ll]istening (?:on|at):?|[Ss]erving (?:\w+ )?(?:on|at)|Started \w+(?: \w+)? (?:on|at)"
    r"|Started (?:HTTP|GRPC|gRPC|Metrics)Service at)\s+(?:(?:https?|tcp)://)?[\w.\-\[\]]*:(?P<port>\d{2,5})\b"
    r"|\b(?:listening|serving|server (?:started|running|listening)) on port (?P<port2>\d{2,5})\b",
    re.I,
)
# kubelet's Unhealthy event: "Liveness probe failed: Get "http://10.2.3.4:8080/healthz": dial tcp
# 10.2.3.4:8080: connect: connection refused" (startup probes and tcpSocket probes alike).
_PROBE_REFUSED = re.compile(
    r"(?:Liveness|Startup) probe failed:.*?(?:dial tcp|https?://)\s*[\w.\-\[\]]*:(?P<port>\d{2,5})\b.*connection refused",
    re.I,
)
# A progress bar with its remaining time: "9/30 [01:03<02:27,  7.03s/it]".
_BAR = re.compile(
    r"(?P<done>\d+)/(?P<total>\d+)\s*\[(?P<elapsed>(?:\d+:)?\d{1,2}:\d{2})<(?P<left>(?:\d+:)?\d{1,2}:\d{2})"
)
# vLLM's logger ("INFO 11-24 11:27:02 file.py:585]") writes month-day without a year.
_MONTH_DAY = re.compile(r"^\s*(?:\(\w+ pid=\d+\)\s*)?(?:DEBUG|INFO|WARNING|ERROR)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")

# Headroom over the observed start: loads vary with the page cache and the storage's load.
STARTUP_MARGIN = 1.5


def _job_texts(ev: Evidence, job: str, sources: set[str]) -> list[list[str]]:
    return [d.lines for d in ev.docs if d.source in sources and d.entity == f"job:{job}"]


def _served_ports(lines: list[str]) -> set[int]:
    return {int(m["port"] or m["port2"]) for line in lines if (m := _LISTENING.search(line))}


def refused_probe_ports(ev: Evidence, job: str) -> set[int]:
    return {int(m["port"]) for lines in _job_texts(ev, job, {"events"}) for line in lines
            if (m := _PROBE_REFUSED.search(line))}


def port_the_container_serves(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The one port the container's own log says its server listens on, when the probe was refused
    on another: the probe is pointed where the server is. Several served ports (an app and its
    metrics) do not say which one the probe meant, so they give nothing."""
    served = set().union(*[_served_ports(lines) for lines in _job_texts(ev, job, {"log"})] or [set()])
    refused = refused_probe_ports(ev, job)
    if len(served) != 1 or not refused or served & refused:
        return None
    return next(iter(served))


def _seconds(clock: str) -> int:
    total = 0
    for part in clock.split(":"):
        total = total * 60 + int(part)
    return total


def _stamp(line: str, now: datetime | None) -> datetime | None:
    if now is None:
        return None
    from crashcart.tools.render import job_log_stamp

    stamp = job_log_stamp(now)(line)
    if stamp is not None:
        return stamp
    m = _MONTH_DAY.match(line)
    if not m:
        return None
    try:
        stamp = now.replace(month=int(m[1]), day=int(m[2]), hour=int(m[3]), minute=int(m[4]), second=int(m[5]), microsecond=0)
    except ValueError:
        return None
    return stamp if stamp <= now else stamp.replace(year=now.year - 1)


def observed_startup_seconds(lines: list[str], now: datetime | None) -> float | None:
    """How long this run of the server needed (or, still loading, will need) before it listens.

    Up: from its first stamped line to the line that says it listens. Still loading: the time
    from its first stamped line to the last stamped line before its loading bar, plus that bar's
    elapsed and remaining time (tqdm's own projection). None when neither can be read."""
    stamps = [(i, s) for i, line in enumerate(lines) if (s := _stamp(line, now)) is not None]
    if not stamps:
        return None
    first = stamps[0][1]
    for i, line in enumerate(lines):
        if _LISTENING.search(line):
            before = [s for j, s in stamps if j <= i]
            up = max(before) if before else None
            return (up - first).total_seconds() if up and up > first else None
    bars = [(i, m) for i, line in enumerate(lines) if (m := _BAR.search(line))]
    if not bars:
        return None
    start_index, last = bars[0][0], bars[-1][1]
    lead = [s for j, s in stamps if j < start_index]
    before_bar = (max(lead) - first).total_seconds() if lead else 0.0
    return before_bar + _seconds(last["elapsed"]) + _seconds(last["left"])


_PROBES = ("startupProbe", "livenessProbe", "spec.startupProbe", "spec.livenessProbe")


def _probe_budget(config: dict[str, Any]) -> float | None:
    """The seconds the job's killing probe now allows before the first kill (Kubernetes defaults
    for the fields left out), from the startup probe when there is one, else the liveness probe."""
    for name in _PROBES:
        probe = _config_value(config, name)
        if isinstance(probe, dict):
            delay = float(probe.get("initialDelaySeconds", 0) or 0)
            return delay + float(probe.get("periodSeconds", 10) or 10) * float(probe.get("failureThreshold", 3) or 3)
    return None


def probe_delay_from_startup(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """An initial delay that covers the server's observed start (this run's loading projection, or
    an earlier attempt's time to listen, the longest of them) with headroom, rounded up to 10 s.
    None when no start was observed, or when the probe already allowed that long (then slowness
    is not what kills it)."""
    seen = [s for lines in _job_texts(ev, job, {"log", "attempt_log"})
            if (s := observed_startup_seconds(lines, ev.now)) is not None]
    budget = _probe_budget(ev.configs.get(job, {}))
    if not seen or budget is None or max(seen) <= budget:
        return None
    return int(math.ceil(max(seen) * (margin or STARTUP_MARGIN) / 10.0) * 10)
