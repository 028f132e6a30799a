"""Match a playbook label's signals against the evidence seen so far."""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Any

from crashcart.agent.policies.evidence import Evidence, RUNNING_STATES, _time, cancelled_by, gave_up_after_pod_failures
from crashcart.playbooks._loader import LabelEntry
from crashcart.agent.policies.config_keys import parse_size
from crashcart.agent.policies.quiet_phase import quiet_as_before
from crashcart.playbooks._model import TEXT_SOURCES, Arithmetic, Signal

# A run's end state that says it finished its work (Slurm, Kubernetes, Ray).
FINISHED_STATES = {"COMPLETED", "SUCCEEDED", "COMPLETE"}
MAX_EVIDENCE_LINE = 300


@dataclass
class Hit:
    signal: int
    entity: str
    line: str
    call: str
    captures: dict[str, str] = field(default_factory=dict)


@dataclass
class LabelMatch:
    entry: LabelEntry
    hits: list[Hit]
    score: float
    matched_signals: int
    history: list[Hit] = field(default_factory=list)
    """Values the label's `from_history` signals captured from the job's earlier runs' logs."""

    @property
    def name(self) -> str:
        return self.entry.name

    def entities(self, kind: str) -> list[str]:
        """Entities of one kind the hits point at: most-pointed-at first, then the latest seen."""
        mine = [h.entity for h in self.hits if h.entity.startswith(kind + ":")]
        counts = Counter(mine)
        last_seen = {e: i for i, e in enumerate(mine)}
        return sorted(counts, key=lambda e: (-counts[e], -last_seen[e]))


@lru_cache(maxsize=65536)
def _first_match(pattern: re.Pattern[str], text: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """The line of the first match and its named groups. Cached: every investigation round
    re-reads the same texts, and scanning them is the policy's main cost."""
    m = pattern.search(text)
    if not m:
        return None
    # The line where the match ends: for an error spanning lines, its last line.
    end = max(m.end() - 1, m.start())
    line = text[text.rfind("\n", 0, end) + 1: (text.find("\n", end) + 1 or len(text) + 1) - 1]
    caps = tuple((k, v) for k, v in m.groupdict().items() if v is not None)
    return line.strip()[:MAX_EVIDENCE_LINE], caps


def _text_hits(idx: int, sig: Signal, pattern, ev: Evidence) -> list[Hit]:
    hits: list[Hit] = []
    own = {f"job:{j}" for j in ev.focus_jobs()} if sig.focus_only else None
    for doc in ev.docs:
        if doc.source != sig.where or (own is not None and doc.entity not in own):
            continue
        if sig.newest_of and not _newest(doc, sig.newest_of, ev):
            continue
        # One search over the whole text (patterns compile with re.M, so ^ and $ are per line);
        # the first match per document is evidence enough, more is noise.
        found = _first_match(pattern, doc.text)
        if found:
            line, caps = found
            if sig.exceeds_job and not _exceeds_job(sig.exceeds_job, dict(caps), doc.entity, ev):
                continue
            if sig.gpus_busy_pct is not None and not _gpus_busy(sig.gpus_busy_pct, doc.entity, ev):
                continue
            if sig.largest_share and not _largest_share(dict(caps).get("count"), line):
                continue
            if sig.covers and not _covers(sig.covers, dict(caps)):
                continue
            if sig.where == "kernel_log" and sig.min_minutes and not _quiet_since(line, sig.min_minutes, ev):
                continue
            caps = dict(caps)
            if "peak" in pattern.groupindex:
                caps["peak"] = _largest_size(pattern, doc.text) or caps.get("peak", "")
            hits.append(Hit(idx, _pointed_at(caps.get("node"), doc.entity, ev), line, doc.call, caps))
    if sig.min_count and len({h.entity for h in hits}) < sig.min_count:
        return []
    return hits


def _quiet_since(line: str, minutes: float, ev: Evidence) -> bool:
    """Whether a kernel-log line carries a wall-clock stamp (`dmesg -T`, syslog, ISO) at least
    `minutes` before now. Plain dmesg counts seconds from boot: no wall clock, so no."""
    from crashcart.tools.render import kernel_log_stamp

    stamp = kernel_log_stamp(ev.now)(line) if ev.now else None
    return stamp is not None and (ev.now - stamp).total_seconds() >= minutes * 60


def _newest(doc, regex: str, ev: Evidence) -> bool:
    """Whether an event is the newest of its object's events that match `regex`, and no older
    than the focus jobs' end (it happened since the failure)."""
    if doc.last_time is None:
        return False
    _, failed_at = ev.focus_window()
    if failed_at is not None and doc.last_time < failed_at:
        return False
    rx = _compiled_newest(regex)
    return not any(d.source == "events" and d.entity == doc.entity and d.last_time and d.last_time > doc.last_time
                   and rx.search(d.text) for d in ev.docs)


@lru_cache(maxsize=64)
def _compiled_newest(regex: str) -> re.Pattern[str]:
    return re.compile(regex, re.I | re.M)


def _pointed_at(node: str | None, entity: str, ev: Evidence) -> str:
    """A line that names a node (a named group `node`: "srun: error: Node failure on gpu-07") points
    at that node, when it is one the incident knows; otherwise at the text's own entity."""
    if node and (node in ev.nodes or node in ev.relevant_nodes()):
        return f"node:{node}"
    return entity


_NODE_COUNT = re.compile(r"\b(\d+) (?:node\(s\)|Insufficient\b)")


def _largest_share(count: str | None, line: str) -> bool:
    """Whether the matched reason kept at least as many nodes out as any other in its line."""
    counts = [int(c) for c in _NODE_COUNT.findall(line)]
    if not count or not count.isdigit():
        return not counts  # a message without counts names one reason
    return int(count) >= max(counts, default=0)


def _largest_size(pattern: re.Pattern[str], text: str) -> str | None:
    """A group named `peak` means the largest size it reads anywhere in the text: a monitor
    reports its running peak many times, and the last word on memory is the highest."""
    found = [(parse_size(m["peak"].replace(" ", "")) or 0, m["peak"]) for m in pattern.finditer(text) if m["peak"]]
    return max(found)[1] if found else None


def _covers(rule: Arithmetic, caps: dict[str, str]) -> bool:
    """Whether the sizes in the message add up: sum(add) - sum(subtract) >= at_least."""
    sizes = {name: parse_size(text.replace(" ", "")) for name, text in caps.items()}
    needed = [*rule.add, *rule.subtract, rule.at_least]
    if any(sizes.get(n) is None for n in needed):
        return False
    total = sum(sizes[n] for n in rule.add) - sum(sizes[n] for n in rule.subtract)
    return total >= sizes[rule.at_least]
def _gpus_busy(min_pct: float, entity: str, ev: Evidence) -> bool:
    """Every GPU sampled on the job's nodes is busy in its latest sample (and some were sampled)."""
    facts = ev.jobs.get(entity[4:]) if entity.startswith("job:") else None
    latest: dict[tuple[str, int], Any] = {}
    for node in facts.nodes if facts else []:
        for s in ev.telemetry.get(node, []):
            key = (node, s.index)
            if key not in latest or (s.time and (latest[key].time is None or s.time >= latest[key].time)):
                latest[key] = s
    return bool(latest) and all(
        s.util_pct is not None and s.util_pct >= min_pct and (s.memory_used_mib or 0) > 0 for s in latest.values())


def _exceeds_job(what: str, caps: dict[str, str], entity: str, ev: Evidence) -> bool:
    """What the job asked for in its own log, against what the scheduler gave it."""
    facts = ev.jobs.get(entity[4:]) if entity.startswith("job:") else None
    count, per = caps.get("count") or "", caps.get("per") or "1"
    if not count and (caps.get("index") or "").isdigit():
        count = str(int(caps["index"]) + 1)  # local rank 4 exists only where 5 processes run
    if facts is None or not count.isdigit() or not per.isdigit():
        return False
    if what == "gpus_per_node":
        from crashcart.agent.policies.allocation import gpus_each_node

        # Without one count for every node, the average rounded down: some node has no more.
        has = gpus_each_node(ev, entity[4:]) or (facts.gpus // len(facts.nodes) if facts.nodes else 0)
    else:
        has = len(facts.nodes) if what == "nodes" else facts.gpus
    return has > 0 and int(count) * int(per) > has


def _word_matches(sig: Signal, pattern, value: str | None) -> bool:
    if not value:
        return False
    if sig.values and value.upper() in {v.upper() for v in sig.values}:
        return True
    return bool(pattern and pattern.search(value))


def _telemetry_hits(idx: int, sig: Signal, ev: Evidence) -> list[Hit]:
    hits = []
    for node, samples in ev.telemetry.items():
        for s in samples:
            ok = all(
                getattr(s, t.field) is not None
                and (t.ge is None or getattr(s, t.field) >= t.ge)
                and (t.le is None or getattr(s, t.field) <= t.le)
                for t in sig.thresholds
            )
            if sig.throttle_any:
                reasons = " ".join(s.throttle_reasons).lower()
                ok = ok and any(r.lower() in reasons for r in sig.throttle_any)
            if ok:
                desc = ", ".join(
                    f"{t.field}={getattr(s, t.field)}" for t in sig.thresholds
                ) or ", ".join(s.throttle_reasons)
                if sig.throttle_any and sig.thresholds:
                    desc += " throttle: " + ", ".join(s.throttle_reasons)
                hits.append(Hit(idx, f"node:{node}", f"{node} GPU {s.index}: {desc}", f"nvidia_smi_query:{node}"))
                break
    if sig.min_count and len(hits) < sig.min_count:
        return []
    return hits


def _xid_hits(idx: int, sig: Signal, ev: Evidence) -> list[Hit]:
    """GPUs whose telemetry (the DCGM exporter's DCGM_FI_DEV_XID_ERRORS) last reported one of the
    signal's Xid codes: the node's kernel log need not be readable to know it."""
    codes = {int(v) for v in sig.values or []}
    hits = []
    for node, samples in ev.telemetry.items():
        s = next((s for s in samples if s.xid in codes), None)
        if s is not None:
            hits.append(Hit(idx, f"node:{node}", f"{node} GPU {s.index}: last Xid {s.xid} (DCGM_FI_DEV_XID_ERRORS)",
                            f"nvidia_smi_query:{node}"))
    return hits


def _stalled_minutes(ev: Evidence, job: str) -> float | None:
    points, _ = ev.progress.get(job, ([], []))
    if not points or ev.now is None:
        return None
    points = sorted(points, key=lambda p: p.time)
    last_step = points[-1].step
    changed_at = points[-1].time
    for p in reversed(points):
        if p.step != last_step:
            break
        changed_at = p.time
    return (ev.now - changed_at).total_seconds() / 60


def _setting_value(config: dict[str, Any], name: str) -> Any:
    """A config key's value wherever the job nests it; a setting's name (config_keys.yaml) reads
    whichever of its keys the job has."""
    from crashcart.agent.policies.config_keys import load_key_table

    table = load_key_table()
    if name in table.settings:
        return table.value_of(config, name)
    return next((f.value for f in table.locate(config, name) if f.value is not None), None)


def _config_value(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, dict) and ".".join(parts[i:]) in node and i < len(parts) - 1:
            return node[".".join(parts[i:])]  # a config that spells the rest flat ("runtime_env.env_vars.X")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


_CANCELLERS = {
    "system": "uid 0, root or slurmctld", "owner": "the owner's own uid (its `id` output)",
    "other": "not the owner's uid (its `id` output says whose it is)", "person": "a person's uid",
}


def signal_hits(idx: int, sig: Signal, pattern, ev: Evidence) -> list[Hit]:
    if sig.where in TEXT_SOURCES:
        return _text_hits(idx, sig, pattern, ev)
    focus = ev.focus_jobs()
    hits: list[Hit] = []
    if sig.where in {"job_state", "job_reason", "exit_code"}:
        attr = {"job_state": "state", "job_reason": "reason", "exit_code": "exit_code"}[sig.where]
        for j in focus + ev.upstream_jobs():
            facts = ev.jobs.get(j)
            value = getattr(facts, attr) if facts else None
            if _word_matches(sig, pattern, value):
                hits.append(Hit(idx, f"job:{j}", f"job {j} {attr}: {value}", f"{sig.where}:{j}"))
            elif facts and attr != "exit_code" and gave_up_after_pod_failures(facts.reason):
                # The Job's own state says only that it stopped retrying; each failed pod's
                # termination state and reason (OOMKilled, Evicted) say why.
                pod = next((a for a in reversed(facts.attempts) if _word_matches(sig, pattern, a.get(attr))), None)
                if pod:
                    hits.append(Hit(idx, f"job:{j}", f"job {j} pod {pod.get('job') or pod.get('id') or pod.get('attempt')} "
                                    f"{attr}: {pod.get(attr)}", f"job_history:{j}"))
    elif sig.where == "cancelled_by":
        for j in focus:
            who = cancelled_by(ev, j)
            if _word_matches(sig, pattern, who):
                hits.append(Hit(idx, f"job:{j}", f"job {j} {ev.jobs[j].state}: {_CANCELLERS[who]}", f"sacct:{j}"))
    elif sig.where == "node_state":
        for n in ev.relevant_nodes():
            row = ev.nodes.get(n)
            if not row:
                continue
            text = f"{row.get('state', '')} {row.get('reason') or ''}".strip()
            if _word_matches(sig, pattern, row.get("state")) or (pattern and pattern.search(text)):
                hits.append(Hit(idx, f"node:{n}", f"node {n}: {text}", f"node_state:{n}"))
        if sig.min_count and len(hits) < sig.min_count:
            return []
    elif sig.where == "telemetry":
        return _telemetry_hits(idx, sig, ev)
    elif sig.where == "xid":
        return _xid_hits(idx, sig, ev)
    elif sig.where == "progress":
        for j in focus:
            facts = ev.jobs.get(j)
            minutes = _stalled_minutes(ev, j)
            running = facts is not None and facts.state.upper() in RUNNING_STATES
            if minutes is not None and running and minutes >= (sig.min_minutes or 30):
                hits.append(Hit(idx, f"job:{j}", f"job {j}: no new step for {minutes:.0f} min", f"training_progress:{j}"))
    elif sig.where == "named_job":
        hits += [Hit(idx, f"job:{j}", f"the trigger names job {j}", "trigger") for j in focus if j in ev.jobs]
    elif sig.where == "trigger":
        kind, text = ev.trigger.get("kind", ""), ev.trigger.get("text") or ""
        if (sig.values and kind in sig.values) or (pattern and pattern.search(text)):
            hits.append(Hit(idx, "cluster", f"trigger {kind}: {text}".strip(), "trigger"))
    elif sig.where == "config":
        for j in focus:
            value = _setting_value(ev.configs.get(j, {}), sig.config_key or "")
            ok = value is not None and (
                (sig.config_ge is not None and isinstance(value, (int, float)) and value >= sig.config_ge)
                or (sig.config_values is not None and value in sig.config_values)
                # A text setting of the required form (an external store's address).
                or (pattern is not None and isinstance(value, str) and bool(pattern.search(value)))
                # A count the job's own config asks for per node/in all, above what the scheduler gave.
                # Kubernetes specs write counts as strings (a PyTorchJob's nprocPerNode: "8").
                or (sig.exceeds_job is not None and not isinstance(value, bool)
                    and (isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()))
                    and _exceeds_job(sig.exceeds_job, {"count": str(value).strip()}, f"job:{j}", ev))
            )
            if ok:
                hits.append(Hit(idx, f"job:{j}", f"job {j} config {sig.config_key}={value}", f"job_config:{j}"))
    elif sig.where == "log_recent":
        for doc in ev.docs:
            if doc.source == "log" and doc.entity in {f"job:{j}" for j in focus} and doc.last_time and ev.now:
                quiet = (ev.now - doc.last_time).total_seconds() / 60
                if quiet <= (sig.min_minutes or 10):
                    hits.append(Hit(idx, doc.entity, f"{doc.entity[4:]}: last log line {quiet:.0f} min ago", doc.call))
    elif sig.where == "gpus_busy":
        pct = sig.gpus_busy_pct if sig.gpus_busy_pct is not None else 50
        hits += [Hit(idx, f"job:{j}", f"job {j}: every GPU sampled on its nodes is at least {pct:g}% busy, memory in use",
                     f"nvidia_smi_query:{j}") for j in focus if _gpus_busy(pct, f"job:{j}", ev)]
    elif sig.where == "quiet_as_before":
        for j in focus:
            phase = quiet_as_before(ev, j)
            busy = sig.gpus_busy_pct is None or _gpus_busy(sig.gpus_busy_pct, f"job:{j}", ev)
            if phase and busy and phase.silent_min >= (sig.min_minutes or 0):
                hits.append(Hit(idx, f"job:{j}", phase.describe(), f"get_logs:{j}"))
    elif sig.where == "throughput":
        for j in focus:
            rates = [p.tokens_per_sec for p in sorted(ev.progress.get(j, ([], []))[0], key=lambda p: p.time)
                     if p.tokens_per_sec]
            if len(rates) >= 3:
                earlier = sorted(rates[:-1])[len(rates[:-1]) // 2]
                drop = 100 * (1 - rates[-1] / earlier) if earlier else 0
                if drop >= (sig.min_drop_pct or 30):
                    hits.append(Hit(idx, f"job:{j}", f"job {j}: {rates[-1]:g} tokens/s, {drop:.0f}% below its usual {earlier:g}", f"training_progress:{j}"))
    elif sig.where == "memory_growth":
        hits = _logged_memory_growth_hits(idx, sig, pattern, ev) if pattern else _memory_growth_hits(idx, sig, ev)
    elif sig.where == "node_labels":
        for n in ev.relevant_nodes():
            labels = (ev.nodes.get(n) or {}).get("labels") or {}
            text = "\n".join(f"{k}={v}" for k, v in labels.items())
            m = pattern.search(text) if pattern and text else None
            if m:
                hits.append(Hit(idx, f"node:{n}", f"node {n} label {m.group(0)}", f"node_labels:{n}"))
    elif sig.where == "co_failures":
        hits = _co_failure_hits(idx, sig, ev)
    elif sig.where == "node_ran_since":
        hits = _ran_since_hits(idx, sig, pattern, ev)
    elif sig.where == "driver_behind_peers":
        hits = _driver_behind_hits(idx, ev)
    elif sig.where == "finished_before":
        for j in focus:
            done = [a for a in (ev.jobs[j].attempts if j in ev.jobs else [])
                    if str(a.get("state", "")).upper() in FINISHED_STATES]
            if done:
                a = done[-1]
                hits.append(Hit(idx, f"job:{j}", f"job {j}: an earlier run ({a.get('job') or a.get('attempt')}) "
                                f"finished {a.get('state')}", f"job_history:{j}"))
    elif sig.where == "attempts":
        for j in focus:
            facts = ev.jobs.get(j)
            failed = [a for a in (facts.attempts if facts else []) if str(a.get("state", "")).upper() != "COMPLETED"]
            runs = [(_time(a.get("start_time")), _time(a.get("end_time"))) for a in failed]
            runs.append((facts.start_time, facts.end_time) if facts else (None, None))
            if sig.min_minutes:
                # Only runs that lasted this long before failing: a batch too big fails in its
                # first steps, memory that grows per step fails hours in, every time.
                runs = [(a, b) for a, b in runs if a and b and (b - a).total_seconds() >= sig.min_minutes * 60]
            if len(runs) >= (sig.min_count or 2):
                hours = sorted(round((b - a).total_seconds() / 3600, 1) for a, b in runs if a and b)
                detail = f" each after {hours[0]:g}+ hours" if sig.min_minutes and hours else ""
                hits.append(Hit(idx, f"job:{j}", f"job {j}: {len(runs)} failed attempts{detail}", f"job_history:{j}"))
    return hits


def _memory_growth_hits(idx: int, sig: Signal, ev: Evidence) -> list[Hit]:
    """A GPU whose memory use only ever rises across the samples: a leak, not a big batch."""
    hits = []
    for node, samples in ev.telemetry.items():
        by_gpu: dict[int, list] = {}
        for s in samples:
            if s.time and s.memory_used_mib is not None:
                by_gpu.setdefault(s.index, []).append(s)
        for index, series in sorted(by_gpu.items()):
            series = sorted({s.time: s for s in series}.values(), key=lambda s: s.time)
            used = [s.memory_used_mib for s in series]
            if len(used) < 3 or used[0] <= 0 or not steady_rise(used):
                continue
            growth = 100 * (used[-1] / used[0] - 1)
            if growth >= (sig.min_growth_pct or 20):
                hits.append(Hit(idx, f"node:{node}", f"{node} GPU {index}: memory {used[0]:g} -> {used[-1]:g} MiB "
                                f"over {len(used)} samples (+{growth:.0f}%)", f"gpu_metrics:{node}"))
                break
    return hits


def _logged_memory_growth_hits(idx: int, sig: Signal, pattern, ev: Evidence) -> list[Hit]:
    """A memory figure the job prints as it trains (RSS, host memory) that only ever rises:
    the leak shows in the job's own log when no GPU telemetry covers the run."""
    focus = {f"job:{j}" for j in ev.focus_jobs()}
    hits = []
    for doc in ev.docs:
        if doc.source != "log" or doc.entity not in focus:
            continue
        values = [float(m["value"]) for m in pattern.finditer(doc.text)]
        if len(values) < 3 or values[0] <= 0 or not steady_rise(values):
            continue
        growth = 100 * (values[-1] / values[0] - 1)
        if growth >= (sig.min_growth_pct or 20):
            hits.append(Hit(idx, doc.entity, f"{doc.entity[4:]}: logged memory {values[0]:g} -> {values[-1]:g} "
                            f"over {len(values)} lines (+{growth:.0f}%)", doc.call))
    return hits


def steady_rise(values: list[float]) -> bool:
    """A series that climbs for the whole run, allowing the small dips of a real allocator
    (a freed buffer, garbage collection): most steps rise or hold, and each third of the run
    sits above the one before. A sawtooth that returns to its floor is not a leak."""
    if len(values) < 3:
        return False
    if all(b >= a for a, b in zip(values, values[1:])):
        return True
    if len(values) < 6:
        return False
    holding = sum(b >= a for a, b in zip(values, values[1:])) / (len(values) - 1)
    third = len(values) // 3
    means = [sum(part) / len(part) for part in (values[:third], values[third:-third], values[-third:])]
    return holding >= 0.6 and means[0] < means[1] < means[2]


def _ran_since_hits(idx: int, sig: Signal, pattern, ev: Evidence) -> list[Hit]:
    """Nodes whose kernel log matches the pattern and that have run another job since the focus
    jobs failed: started after the failure, not failed, running or finished for at least
    min_minutes. Work carried through that long on the node is the proof a fault there has passed."""
    _, failed_at = ev.focus_window()
    if failed_at is None or ev.now is None:
        return []
    focus = set(ev.focus_jobs())
    need = (sig.min_minutes or 30) * 60
    hits = []
    for doc in ev.docs:
        if doc.source != "kernel_log" or not doc.entity.startswith("node:") or not pattern.search(doc.text):
            continue
        node = doc.entity[5:]
        for f in ev.jobs.values():
            state = f.state.upper().split()[0] if f.state else ""
            if (f.job in focus or node not in f.nodes or f.start_time is None or f.start_time < failed_at
                    or state not in RUNNING_STATES | {"COMPLETED", "SUCCEEDED"}):
                continue
            ran = ((f.end_time or ev.now) - f.start_time).total_seconds()
            if ran >= need:
                hits.append(Hit(idx, doc.entity, f"{node} has run job {f.job} ({f.state}) for {ran / 60:.0f} min "
                                f"since the failure", f"list_jobs:{node}"))
                break
    return hits


# The driver version a node runs: the kernel module's load line in dmesg, or nvidia-smi's banner.
_DRIVER_VERSION = re.compile(
    r"(?:NVRM: loading NVIDIA UNIX \S+ Kernel Module\s+|Driver Version:\s*)(\d+\.\d+(?:\.\d+)?)", re.I)


def driver_versions(ev: Evidence) -> dict[str, tuple[int, ...]]:
    """Each node's NVIDIA driver version, as its kernel log or nvidia-smi printed it (the newest load)."""
    found: dict[str, tuple[int, ...]] = {}
    for doc in ev.docs:
        if doc.source == "kernel_log" and doc.entity.startswith("node:"):
            versions = [tuple(int(p) for p in m.group(1).split(".")) for m in _DRIVER_VERSION.finditer(doc.text)]
            if versions:
                found[doc.entity[5:]] = versions[-1]
    return found


def _driver_behind_hits(idx: int, ev: Evidence) -> list[Hit]:
    """The incident's nodes whose driver is an older branch than another node of the same
    partition runs: a node reimaged or rolled back apart from its peers. A whole partition on one
    old driver is not this (the image asks for too new a CUDA there)."""
    versions = driver_versions(ev)
    hits = []
    for n in ev.relevant_nodes():
        mine = versions.get(n)
        if mine is None:
            continue
        part = (ev.nodes.get(n) or {}).get("partition")
        peers = {p: v for p, v in versions.items() if p != n
                 and (not part or not (ev.nodes.get(p) or {}).get("partition") or (ev.nodes.get(p) or {}).get("partition") == part)}
        newer = {p: v for p, v in peers.items() if v[0] > mine[0]}
        if newer:
            peer, version = max(newer.items(), key=lambda kv: kv[1])
            show = lambda v: ".".join(map(str, v))
            hits.append(Hit(idx, f"node:{n}", f"node {n} runs NVIDIA driver {show(mine)}, {peer} runs {show(version)}",
                            f"kernel_log:{n}"))
    return hits


def _co_failure_hits(idx: int, sig: Signal, ev: Evidence) -> list[Hit]:
    """Jobs that ended badly on the same node within a window: one cause, many victims."""
    window = (sig.min_minutes or 10) * 60
    hits = []
    for n in ev.relevant_nodes():
        victims = [
            f for f in ev.jobs.values()
            if n in f.nodes and f.failed and f.end_time is not None
        ]
        if not victims:
            continue
        latest = max(v.end_time for v in victims)
        together = [v for v in victims if (latest - v.end_time).total_seconds() <= window]
        if len(together) >= (sig.min_count or 2):
            ids = ", ".join(sorted(v.job for v in together))
            hits.append(Hit(idx, f"node:{n}", f"{len(together)} jobs failed on {n} within {window / 60:.0f} min: {ids}", f"list_jobs:{n}"))
    return hits


def match_label(entry: LabelEntry, ev: Evidence) -> LabelMatch | None:
    hits: list[Hit] = []
    score = 0.0
    matched = 0
    groups: dict[str, bool] = {}
    for idx, (sig, pattern) in enumerate(zip(entry.label.signals, entry.patterns)):
        found = signal_hits(idx, sig, pattern, ev)
        if sig.rules_out:
            if found:
                return None
            continue
        if sig.group:
            groups[sig.group] = groups.get(sig.group, False) or bool(found)
        if not found:
            if sig.required:
                return None
            continue
        hits += found
        score += sig.weight
        matched += 1
    if not matched or not all(groups.values()):
        return None
    history = [h for idx, (sig, pattern) in enumerate(zip(entry.label.signals, entry.patterns))
               if sig.from_history for h in _history_hits(idx, pattern, ev)]
    return LabelMatch(entry, hits, score, matched, history)


def _history_hits(idx: int, pattern: re.Pattern[str], ev: Evidence) -> list[Hit]:
    """The named groups a pattern captures in the focus jobs' earlier runs' logs, the largest
    `peak` first (the most memory any run was seen to need)."""
    own = {f"job:{j}" for j in ev.focus_jobs()}
    hits: list[Hit] = []
    for doc in ev.docs:
        if doc.source != "attempt_log" or doc.entity not in own:
            continue
        found = _first_match(pattern, doc.text)
        if found:
            line, caps = found
            caps = dict(caps)
            if "peak" in pattern.groupindex:
                caps["peak"] = _largest_size(pattern, doc.text) or caps.get("peak", "")
            hits.append(Hit(idx, doc.entity, line, doc.call, caps))
    return sorted(hits, key=lambda h: -(parse_size(h.captures.get("peak", "").replace(" ", "")) or 0))


def waits_for_config(entry: LabelEntry, ev: Evidence) -> bool:
    """Every other required signal of the label is there and a test of the job's config decides
    (zero RDMA devices asked for): the job's config is worth one read (a read made is not repeated)."""
    if not any(s.where == "config" and s.required for s in entry.label.signals):
        return False
    confirmed = False
    for idx, (sig, pattern) in enumerate(zip(entry.label.signals, entry.patterns)):
        if sig.where == "config":
            continue
        found = signal_hits(idx, sig, pattern, ev)
        if (sig.rules_out and found) or (sig.required and not found):
            return False
        confirmed = confirmed or (sig.required and bool(found))
    return confirmed


def near_miss(entry: LabelEntry, ev: Evidence) -> str | None:
    """Why a label that something pointed at did not match, or None if nothing pointed at it.

    A healthy verdict rests on these: the hang ruled out by a log still being written, the
    OOM hint that never became an OOM."""
    positive, blockers = False, []
    for idx, (sig, pattern) in enumerate(zip(entry.label.signals, entry.patterns)):
        found = signal_hits(idx, sig, pattern, ev)
        if sig.rules_out and found:
            blockers.append(f"ruled out by {sig.where}: {found[0].line}")
        elif not sig.rules_out and found:
            positive = True
        elif sig.required:
            blockers.append(f"no {sig.where} evidence")
    if not positive or not blockers or match_label(entry, ev):
        return None
    return f"{entry.name} ({blockers[0]})"
