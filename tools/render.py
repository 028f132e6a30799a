"""Cluster data as text, the way the real commands print it.

A model reads tool output; it has seen real `sacct`, `kubectl describe` and
`nvidia-smi` output far more often than any invented format, so every renderer
here imitates the real command's layout. The fixture backend uses these; a live
backend returns what the command printed and only needs `bound_lines`.
All functions are pure: data in, lines out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from crashcart.tools._spec import ToolError
from crashcart.tools.catalog import MAX_TEXT_CHARS
from crashcart.tools.cluster import Checkpoint, Event, GpuSample, Job, Node, ProgressPoint

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


def aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


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


def _yearless(month: int, day: int, clock: str, now: datetime) -> datetime | None:
    # glog and syslog stamps carry no year: take now's, or last year's when
    # that would put the line in the future (December lines read in January).
    h, mi, s = (int(x) for x in clock.split(":"))
    for year in (now.year, now.year - 1):
        try:
            dt = datetime(year, month, day, h, mi, s, tzinfo=timezone.utc)
        except ValueError:
            continue
        if dt <= aware(now) + timedelta(days=1):
            return dt
    return None


def job_log_stamp(now: datetime) -> StampOf:
    """Stamps in job logs: ISO, Python logging, and Kubernetes/glog `I0302 09:41:03.123456`."""

    def stamp(line: str) -> datetime | None:
        if (dt := _iso_stamp(line)) is not None:
            return dt
        if m := _GLOG.match(line):
            return _yearless(int(m[1]), int(m[2]), m[3], now)
        return None

    return stamp


def kernel_log_stamp(now: datetime) -> StampOf:
    """Stamps in kernel logs. Plain dmesg `[12345.678]` counts from boot and has no wall clock."""

    def stamp(line: str) -> datetime | None:
        if (dt := _iso_stamp(line)) is not None:
            return dt
        if m := _SYSLOG.match(line):
            if m[1] in _MONTHS:
                return _yearless(_MONTHS[m[1]], int(m[2]), m[3], now)
        if m := _DMESG_T.match(line):
            if m[1] in _MONTHS:
                h, mi, s = (int(x) for x in m[3].split(":"))
                return datetime(int(m[4]), _MONTHS[m[1]], int(m[2]), h, mi, s, tzinfo=timezone.utc)
        return None

    return stamp


# --- small formats -------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], gap: int = 3) -> list[str]:
    """Left-aligned columns, as kubectl's tabwriter prints them."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [(" " * gap).join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def slurm_time(dt: datetime | None) -> str:
    return aware(dt).strftime("%Y-%m-%dT%H:%M:%S") if dt else "Unknown"


def slurm_elapsed(seconds: float) -> str:
    d, rest = divmod(int(max(0, seconds)), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"{d}-{h:02}:{m:02}:{s:02}" if d else f"{h:02}:{m:02}:{s:02}"


def squeue_time(seconds: float) -> str:
    d, rest = divmod(int(max(0, seconds)), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    if d:
        return f"{d}-{h:02}:{m:02}:{s:02}"
    return f"{h}:{m:02}:{s:02}" if h else f"{m}:{s:02}"


def k8s_age(delta: timedelta) -> str:
    """kubectl's HumanDuration: 90s, 5m30s, 45m, 3h15m, 20h, 3d4h, 30d."""
    seconds = int(delta.total_seconds())
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    return f"{hours // 24}d"


def rfc1123z(dt: datetime) -> str:
    return aware(dt).strftime("%a, %d %b %Y %H:%M:%S %z")


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


def taint_text(key: str, value: str | None, effect: str) -> str:
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


# --- Slurm host lists ------------------------------------------------------------------

_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(names: Iterable[str]) -> str:
    """gpu-b05,gpu-b06,gpu-b07,gpu-b08 -> gpu-b[05-08], as Slurm prints node lists."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):
        if m := _NUMBERED.match(name):
            groups.setdefault((m[1], len(m[2])), []).append(int(m[2]))
        else:
            plain.append(name)
    parts = list(plain)
    for (prefix, width), numbers in sorted(groups.items()):
        numbers.sort()
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        runs: list[list[int]] = []
        for n in numbers:
            if runs and n == runs[-1][-1] + 1:
                runs[-1].append(n)
            else:
                runs.append([n])
        ranges = [f"{r[0]:0{width}d}" + (f"-{r[-1]:0{width}d}" if len(r) > 1 else "") for r in runs]
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(parts))


def expand_hostlist(text: str) -> list[str]:
    """The inverse of compress_hostlist: gpu-b[05-06],gpu-a1 -> gpu-b05, gpu-b06, gpu-a1."""
    names: list[str] = []
    for piece in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", text):
        if not piece:
            continue
        m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", piece)
        if not m:
            names.append(piece)
            continue
        prefix, body, suffix = m.groups()
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{len(lo)}d}{suffix}")
    return names


# --- Slurm --------------------------------------------------------------------------------

SACCT_HEADER = "JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NodeList|Reason"


def sacct_lines(jobs: Iterable[Job], now: datetime, steps: bool = True) -> list[str]:
    """`sacct -P -D -o JobID,JobName,...,Reason`; -D shows each requeued attempt as its own row."""
    lines = [SACCT_HEADER]
    for job in jobs:
        end = slurm_time(job.end_time)
        elapsed = slurm_elapsed(elapsed_seconds(job, now))
        nodes = compress_hostlist(job.nodes) if job.nodes else "None assigned"
        lines.append("|".join([
            job.id, job.name or "", job.partition or "", job.user or "", job.state,
            job.exit_code or "0:0", slurm_time(job.start_time), end, elapsed, nodes,
            job.reason or "None",
        ]))
        if steps and job.start_time and not is_active(job.state):
            # The batch step dies with the job; a time limit or scancel shows as CANCELLED there.
            step_state = "CANCELLED" if job.state.upper() in ("TIMEOUT", "CANCELLED") else job.state
            first = job.nodes[0] if job.nodes else ""
            lines.append("|".join([
                f"{job.id}.batch", "batch", "", "", step_state, job.exit_code or "0:0",
                slurm_time(job.start_time), end, elapsed, first, "",
            ]))
    return lines


_SQUEUE_CODE = {
    "PENDING": "PD", "RUNNING": "R", "CONFIGURING": "CF", "COMPLETING": "CG",
    "SUSPENDED": "S", "REQUEUED": "RQ", "RESIZING": "RS",
}


def squeue_lines(jobs: Iterable[Job], now: datetime) -> list[str]:
    """squeue's default `%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`: right-aligned, cut to width."""

    def row(*cells: str) -> str:
        widths = (18, 9, 8, 8, 2, 10, 6)
        fixed = " ".join(c[:w].rjust(w) for c, w in zip(cells, widths))
        return f"{fixed} {cells[-1]}"

    lines = [row("JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)")]
    for job in jobs:
        pending = job.state.upper() == "PENDING"
        where = f"({job.reason or 'None'})" if pending else compress_hostlist(job.nodes)
        lines.append(row(
            job.id, job.partition or "", job.name or "", job.user or "",
            _SQUEUE_CODE.get(job.state.upper(), job.state[:2]),
            "0:00" if pending else squeue_time(elapsed_seconds(job, now)),
            str(max(1, len(job.nodes))), where,
        ))
    return lines


def sinfo_state(node: Node) -> str:
    """sinfo's short state; `*` marks a node that stopped answering."""
    if node.state == "down":
        silent = not node.reason or "not responding" in node.reason.lower()
        return "down*" if silent else "down"
    return {
        "idle": "idle", "allocated": "alloc", "mixed": "mix", "drained": "drain",
        "draining": "drng", "not_ready": "down*", "cordoned": "drain",
    }[node.state]


def sinfo_lines(nodes: Iterable[Node]) -> list[str]:
    """`sinfo -N -o "%N %D %P %t %G %E"`."""
    rows = [
        (n.name, 1, n.partition or "", sinfo_state(n), f"gpu:{n.gpus}" if n.gpus else "(null)",
         n.reason or "none")
        for n in nodes
    ]
    return table(["NODELIST", "NODES", "PARTITION", "STATE", "GRES", "REASON"], rows, gap=1)


# --- nvidia-smi ------------------------------------------------------------------------------

_THROTTLE_BITS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
    "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100,
}
_THROTTLE_COLUMNS = (
    "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
    "sw_thermal_slowdown", "sw_power_cap",
)
NVIDIA_SMI_QUERY = (
    "index,name,temperature.gpu,power.draw,clocks.sm,utilization.gpu,memory.used,memory.total,"
    "ecc.errors.uncorrected.volatile.total,remapped_rows.pending,clocks_throttle_reasons.active,"
    + ",".join(f"clocks_throttle_reasons.{c}" for c in _THROTTLE_COLUMNS)
)


def throttle_reason(name: str) -> str | None:
    """A scenario's throttle reason ("HW Slowdown", "sw_thermal") as nvidia-smi's field name."""
    key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    key = key.removeprefix("clocks_throttle_reasons_").removeprefix("clocks_event_reasons_")
    for candidate in (key, f"{key}_slowdown", f"{key}_setting"):
        if candidate in _THROTTLE_BITS:
            return candidate
    return None


def nvidia_smi_csv(samples: Iterable[GpuSample], gpu_model: str | None) -> list[str]:
    """`nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv`, units in the header and the cells."""
    units = {"power.draw": " [W]", "clocks.sm": " [MHz]", "utilization.gpu": " [%]",
             "memory.used": " [MiB]", "memory.total": " [MiB]"}
    lines = [", ".join(f + units.get(f, "") for f in NVIDIA_SMI_QUERY.split(","))]

    def num(value: float | int | None, fmt: str, unit: str = "") -> str:
        return "[N/A]" if value is None else f"{value:{fmt}}{unit}"

    for s in samples:
        active = {r for r in map(throttle_reason, s.throttle_reasons) if r}
        mask = sum(_THROTTLE_BITS[r] for r in active)
        lines.append(", ".join([
            str(s.index), gpu_model or "[N/A]", num(s.temperature_c, ".0f"),
            num(s.power_w, ".2f", " W"), num(s.sm_clock_mhz, ".0f", " MHz"),
            num(s.util_pct, ".0f", " %"), num(s.memory_used_mib, ".0f", " MiB"),
            num(s.memory_total_mib, ".0f", " MiB"), num(s.ecc_uncorrected, "d"),
            num(s.remapped_rows_pending, "d"), f"0x{mask:016X}",
            *("Active" if c in active else "Not Active" for c in _THROTTLE_COLUMNS),
        ]))
    return lines


def gpu_metrics_table(samples: Iterable[GpuSample], now: datetime) -> list[str]:
    """GPU samples over time, one row each, in DCGM field terms."""
    rows = [
        [iso_z(s.time or now), s.index,
         *("-" if v is None else f"{v:g}" for v in (
             s.temperature_c, s.power_w, s.sm_clock_mhz, s.util_pct, s.memory_used_mib,
             s.ecc_uncorrected, s.remapped_rows_pending)),
         ",".join(s.throttle_reasons) or "-"]
        for s in samples
    ]
    header = ["TIME", "GPU", "GPU_TEMP", "POWER_USAGE", "SM_CLOCK", "GPU_UTIL", "FB_USED",
              "ECC_DBE_VOL", "ROW_REMAP_PENDING", "CLOCK_THROTTLE_REASONS"]
    return table(header, rows)


# --- Kubernetes --------------------------------------------------------------------------------

_WAITING = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ContainerCreating",
            "CreateContainerConfigError", "PodInitializing", "InvalidImageName"}
_TERMINATED = {"OOMKilled", "Error", "Completed", "ContainerCannotRun", "DeadlineExceeded"}


def pod_phase(job: Job) -> str:
    s = job.state.lower()
    for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        if s == phase.lower():
            return phase
    if job.state == "CrashLoopBackOff":
        return "Running"  # the kubelet restarts the container inside a pod that stays Running
    if job.state in _WAITING or s in ("configuring", "requeued"):
        return "Pending"
    if s in ("completed", "complete"):
        return "Succeeded"
    return "Running" if is_active(job.state) else "Failed"


def pod_status(job: Job) -> str:
    """The STATUS column of `kubectl get pods`: a container's reason when it has one, else the phase."""
    for word in (job.reason, job.state):
        if word in _WAITING or word in _TERMINATED or word == "Evicted":
            return word
    return pod_phase(job)


def k8s_exit_code(job: Job) -> str | None:
    code = job.exit_code
    if code:
        exit_, _, signal = code.partition(":")
        if signal.isdigit() and int(signal):
            return str(128 + int(signal))  # a container killed by signal N exits 128+N
        return exit_
    if "OOMKilled" in (job.reason, job.state):
        return "137"
    return "0" if pod_phase(job) == "Succeeded" else None


def node_ready(node: Node) -> str:
    return {"not_ready": "False", "down": "Unknown"}.get(node.state, "True")


def node_status(node: Node) -> str:
    status = "Ready" if node_ready(node) == "True" else "NotReady"
    if node.state in ("cordoned", "drained", "draining"):
        status += ",SchedulingDisabled"
    return status


def node_roles(node: Node) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in node.labels if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def node_taints(node: Node) -> list[str]:
    return [taint_text(t.key, t.value, t.effect) for t in node.taints]


def kubectl_nodes_lines(nodes: Iterable[Node]) -> list[str]:
    """`kubectl get nodes -L <pool>` with GPU and taint columns; no creation time or kubelet
    version is recorded in a scenario, so those print as kubectl prints a missing value."""
    rows = [
        (n.name, node_status(n), node_roles(n), "<unknown>", "<unknown>", n.gpus,
         n.partition or "<none>", ",".join(node_taints(n)) or "<none>")
        for n in nodes
    ]
    return table(["NAME", "STATUS", "ROLES", "AGE", "VERSION", "GPU", "POOL", "TAINTS"], rows)


def event_parts(obj: str) -> tuple[str, str | None, str]:
    """"pod/train/llama-0" -> ("pod", "train", "llama-0"); "node/gpu-b07" -> ("node", None, ...)."""
    parts = obj.split("/")
    if len(parts) >= 3:
        return parts[0], parts[1], "/".join(parts[2:])
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return "", None, obj


def events_lines(events: Sequence[Event], now: datetime, namespace_of: Callable[[Event], str | None],
                 all_namespaces: bool, namespace: str | None = None) -> list[str]:
    """`kubectl get events` (with -A: a NAMESPACE column first)."""
    if not events:
        where = f" in {namespace} namespace" if namespace else ""
        return [f"No resources found{where}."]
    header = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    rows = []
    for ev in events:
        kind, _, name = event_parts(ev.object)
        row = [k8s_age(now - ev.time), ev.type, ev.reason, f"{kind}/{name}" if kind else name,
               ev.message]
        rows.append(([namespace_of(ev) or "default"] if all_namespaces else []) + row)
    return table((["NAMESPACE"] if all_namespaces else []) + header, rows)


_EVENT_SOURCE = {
    "FailedScheduling": "default-scheduler", "Scheduled": "default-scheduler",
    "Preempted": "default-scheduler", "NodeNotReady": "node-controller",
    "RegisteredNode": "node-controller", "TaintManagerEviction": "taint-eviction-controller",
}


def _describe_events(events: Sequence[Event], now: datetime) -> list[str]:
    if not events:
        return ["Events:  <none>"]
    rows = []
    for ev in events:
        age = k8s_age(now - ev.time) + (f" (x{ev.count})" if ev.count and ev.count > 1 else "")
        source = _EVENT_SOURCE.get(ev.reason, "kubelet" if ev.object.startswith("pod/") else "")
        rows.append((ev.type, ev.reason, age, source, ev.message))
    header = ("Type", "Reason", "Age", "From", "Message")
    return ["Events:"] + ["  " + line for line in table(header, [tuple("-" * len(h) for h in header)] + rows)]


def _field(label: str, value: Any, indent: int = 0, width: int = 18) -> str:
    return f"{' ' * indent}{(label + ':').ljust(width)}{value}"


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            flat.update(_flatten(v, f"{prefix}{k}."))
        else:
            flat[f"{prefix}{k}"] = v
    return flat


# Config keys that have a home in a pod spec; the rest are the program's own flags.
_POD_KEYS = {"image", "command", "args", "env", "labels", "node_selector", "nodeSelector",
             "tolerations", "container", "entrypoint", "exclude_nodes"}


def _toleration(t: Any) -> str:
    if not isinstance(t, dict):
        return str(t)
    key, effect = t.get("key", ""), t.get("effect", "")
    if t.get("operator") == "Exists" or "value" not in t:
        return f"{key}:{effect} op=Exists" if effect else f"{key} op=Exists"
    return f"{key}={t['value']}:{effect}" if effect else f"{key}={t['value']}"


def _container_state(job: Job, label: str, now: datetime, current: bool) -> list[str]:
    phase = pod_phase(job)
    waiting = next((w for w in (job.reason, job.state) if w in _WAITING), None)
    if current and phase == "Pending" and not job.nodes:
        return []  # never scheduled: no container status yet
    if current and waiting:
        return [_field(label, "Waiting", 4, 16), _field("Reason", waiting, 6, 14)]
    if current and phase == "Running":
        lines = [_field(label, "Running", 4, 16)]
        return lines + ([_field("Started", rfc1123z(job.start_time), 6, 14)] if job.start_time else [])
    reason = next((w for w in (job.reason, job.state) if w in _TERMINATED), None)
    reason = reason or ("Completed" if phase == "Succeeded" else "Error")
    lines = [_field(label, "Terminated", 4, 16), _field("Reason", reason, 6, 14)]
    if (code := k8s_exit_code(job)) is not None:
        lines.append(_field("Exit Code", code, 6, 14))
    if job.start_time:
        lines.append(_field("Started", rfc1123z(job.start_time), 6, 14))
    if job.end_time:
        lines.append(_field("Finished", rfc1123z(job.end_time), 6, 14))
    return lines


def describe_pod_lines(job: Job, events: Sequence[Event], now: datetime) -> list[str]:
    cfg = job.config
    phase = pod_phase(job)
    labels = cfg.get("labels") or {}
    lines = [
        _field("Name", job.id), _field("Namespace", job.partition or "default"),
        _field("Priority", 0), _field("Node", job.nodes[0] if job.nodes else "<none>"),
    ]
    if job.start_time:
        lines.append(_field("Start Time", rfc1123z(job.start_time)))
    label_lines = [f"{k}={v}" for k, v in labels.items()] or ["<none>"]
    lines.append(_field("Labels", label_lines[0]))
    lines += [" " * 18 + extra for extra in label_lines[1:]]
    lines += [_field("Annotations", "<none>"), _field("Status", phase)]
    if "Evicted" in (job.reason, job.state):
        lines.append(_field("Reason", "Evicted"))
    lines.append("Containers:")
    lines.append(f"  {cfg.get('container') or job.name or 'main'}:")
    lines.append(_field("Image", cfg.get("image", "<none>"), 4, 16))
    if command := cfg.get("command") or cfg.get("entrypoint"):
        lines += ["    Command:"] + [f"      {c}" for c in (command if isinstance(command, list) else [command])]
    args = [str(a) for a in cfg.get("args") or []]
    args += [f"--{k}={v}" for k, v in _flatten({k: v for k, v in cfg.items() if k not in _POD_KEYS}).items()]
    if args:
        lines += ["    Args:"] + [f"      {a}" for a in args]
    lines += _container_state(job, "State", now, current=True)
    if job.attempts:
        lines += _container_state(job.attempts[-1], "Last State", now, current=False)
    ready = phase == "Running" and not any(w in _WAITING for w in (job.reason, job.state))
    lines += [_field("Ready", str(ready), 4, 16), _field("Restart Count", len(job.attempts), 4, 16)]
    if job.gpus:
        per_pod = job.gpus // max(1, len(job.nodes))
        for section in ("Limits", "Requests"):
            lines += [f"    {section}:", _field("nvidia.com/gpu", per_pod, 6, 17)]
    env = cfg.get("env") or {}
    lines += ["    Environment:" + ("" if env else "  <none>")] + [f"      {k}:  {v}" for k, v in env.items()]
    lines.append("Conditions:")
    scheduled = bool(job.nodes) or phase != "Pending"
    conditions = [("PodScheduled", str(scheduled))]
    if scheduled:
        conditions = [("Initialized", "True"), ("Ready", str(ready)),
                      ("ContainersReady", str(ready))] + conditions
    lines += ["  " + line for line in table(["Type", "Status"], conditions)]
    selector = cfg.get("node_selector") or cfg.get("nodeSelector") or {}
    lines.append(_field("Node-Selectors", ",".join(f"{k}={v}" for k, v in selector.items()) or "<none>", 0, 29))
    tolerations = [_toleration(t) for t in cfg.get("tolerations") or []] or ["<none>"]
    lines.append(_field("Tolerations", tolerations[0], 0, 29))
    lines += [" " * 29 + t for t in tolerations[1:]]
    return lines + _describe_events(events, now)


def describe_node_lines(node: Node, pods: Sequence[Job], events: Sequence[Event], now: datetime) -> list[str]:
    label_lines = [f"{k}={v}" for k, v in node.labels.items()] or ["<none>"]
    taints = node_taints(node) or ["<none>"]
    lines = [_field("Name", node.name, 0, 20), _field("Roles", node_roles(node), 0, 20),
             _field("Labels", label_lines[0], 0, 20)]
    lines += [" " * 20 + extra for extra in label_lines[1:]]
    lines += [_field("Annotations", "<none>", 0, 20), _field("CreationTimestamp", "<unknown>", 0, 20),
              _field("Taints", taints[0], 0, 20)]
    lines += [" " * 20 + t for t in taints[1:]]
    unschedulable = node.state in ("cordoned", "drained", "draining")
    lines.append(_field("Unschedulable", str(unschedulable).lower(), 0, 20))
    ready = node_ready(node)
    reason, message = {
        "True": ("KubeletReady", "kubelet is posting ready status"),
        "False": ("KubeletNotReady", "container runtime network not ready"),
        "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status."),
    }[ready]
    lines.append("Conditions:")
    lines += ["  " + line for line in table(["Type", "Status", "Reason", "Message"],
                                             [("----", "------", "------", "-------"),
                                              ("Ready", ready, reason, node.reason or message)])]
    for section in ("Capacity", "Allocatable"):
        lines += [f"{section}:", _field("nvidia.com/gpu", node.gpus, 2, 17)]
    if node.gpu_model:
        lines += ["System Info:", _field("GPU Product", node.gpu_model, 2, 17)]
    lines.append(f"Non-terminated Pods:          ({len(pods)} in total)")
    if pods:
        rows = [("---------", "----", "--------------", "---")] + [
            (p.partition or "default", p.id, p.gpus // max(1, len(p.nodes)),
             k8s_age(now - (p.start_time or p.submit_time or now)))
            for p in pods
        ]
        lines += ["  " + line for line in table(["Namespace", "Name", "nvidia.com/gpu", "Age"], rows)]
    return lines + _describe_events(events, now)


_CRD = {
    "job": ("batch/v1", "Job"), "pytorchjob": ("kubeflow.org/v1", "PyTorchJob"),
    "rayjob": ("ray.io/v1", "RayJob"), "raycluster": ("ray.io/v1", "RayCluster"),
}


def _condition_type(state: str) -> str:
    s = state.upper()
    if s in ("SUCCEEDED", "COMPLETED", "COMPLETE"):
        return "Succeeded"
    if s in ("RUNNING",):
        return "Running"
    if s in ("PENDING", "CONFIGURING"):
        return "Created"
    return "Failed" if not is_active(state) else "Running"


def _yamlish(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out += [f"{pad}{k}:"] + _yamlish(v, indent + 2)
            else:
                out.append(f"{pad}{k}:  {v}")
        return out
    if isinstance(value, list):
        return [f"{pad}{item}" for item in value]
    return [f"{pad}{value}"]


def describe_resource_lines(kind: str, job: Job, events: Sequence[Event], now: datetime) -> list[str]:
    """kubectl describe of a Job or a custom resource (PyTorchJob, RayJob, RayCluster)."""
    api, kind_name = _CRD[kind]
    lines = [_field("Name", job.id, 0, 14), _field("Namespace", job.partition or "default", 0, 14),
             _field("Labels", "<none>", 0, 14), _field("Annotations", "<none>", 0, 14),
             _field("API Version", api, 0, 14), _field("Kind", kind_name, 0, 14), "Spec:"]
    spec = dict(job.config)
    if job.gpus:
        spec.setdefault("gpus", job.gpus)
    lines += _yamlish(spec, 2) or ["  <none>"]
    ctype = _condition_type(job.state)
    lines += ["Status:", "  Conditions:",
              _field("Last Transition Time", iso_z(job.end_time or job.start_time or job.submit_time), 4, 24),
              _field("Message", job.reason or "", 4, 24),
              _field("Reason", job.state, 4, 24),
              _field("Status", "True", 4, 24), _field("Type", ctype, 4, 24)]
    if kind == "rayjob":
        lines += [_field("Job Deployment Status", "Complete" if ctype == "Succeeded" else ctype, 2, 24),
                  _field("Job Status", ray_status(job), 2, 24)]
    if job.start_time:
        lines.append(_field("Start Time", iso_z(job.start_time), 2, 24))
    if job.end_time:
        lines.append(_field("Completion Time", iso_z(job.end_time), 2, 24))
    if job.attempts:
        lines.append(_field("Restart Count", len(job.attempts), 2, 24))
    if job.nodes:
        lines.append(_field("Nodes", ",".join(job.nodes), 2, 24))
    return lines + _describe_events(events, now)


def pods_lines(jobs: Iterable[Job], now: datetime) -> list[str]:
    """`kubectl get pods -A -o wide` (the columns that a scenario records)."""
    rows = []
    for j in jobs:
        ready = pod_phase(j) == "Running" and pod_status(j) == "Running"
        rows.append((j.partition or "default", j.id, "1/1" if ready else "0/1", pod_status(j),
                     len(j.attempts), k8s_age(now - (j.submit_time or j.start_time or now)),
                     ",".join(j.nodes) or "<none>"))
    return table(["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"], rows)


# --- Ray ------------------------------------------------------------------------------------------


def ray_status(job: Job) -> str:
    s = job.state.upper()
    if s in ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"):
        return s
    return {"COMPLETED": "SUCCEEDED", "CANCELLED": "STOPPED", "CONFIGURING": "PENDING"}.get(
        s, "RUNNING" if is_active(job.state) else "FAILED"
    )


def ray_message(job: Job) -> str | None:
    if job.reason:
        return job.reason
    code = (job.exit_code or "").partition(":")[0]
    if ray_status(job) == "FAILED" and code not in ("", "0"):
        return f"Job entrypoint command failed with exit code {code}"
    return None


def ray_job_status_lines(job: Job) -> list[str]:
    lines = [f"Status for job '{job.id}': {ray_status(job)}"]
    if (message := ray_message(job)) is not None:
        lines.append(f"Status message: {message}")
    return lines


def _ray_list(title_time: datetime, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    indexed = [(str(i), *row) for i, row in enumerate(rows)]
    return [f"======== List: {aware(title_time):%Y-%m-%d %H:%M:%S.%f} ========", "Stats:",
            "-" * 30, f"Total: {len(rows)}", "", "Table:", "-" * 30,
            *("  " + line for line in table(["", *header], indexed, gap=2))]


def ray_node_id(name: str) -> str:
    # Ray node ids are 56 hex characters; a hash of the name keeps them stable across calls.
    return hashlib.sha224(name.encode()).hexdigest()


def ray_nodes_lines(nodes: Sequence[Node], now: datetime) -> list[str]:
    rows = []
    for n in nodes:
        head = n.labels.get("ray.io/node-type") == "head" or "head" in n.name
        dead = n.state in ("down", "not_ready")
        rows.append((ray_node_id(n.name), n.labels.get("ray.io/node-ip", "-"), str(head),
                     "DEAD" if dead else "ALIVE", n.reason or "", n.name,
                     f"GPU: {float(n.gpus)}" if n.gpus else "{}"))
    return _ray_list(now, ["NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE", "STATE_MESSAGE",
                           "NODE_NAME", "RESOURCES_TOTAL"], rows)


def ray_jobs_lines(jobs: Sequence[Job], now: datetime) -> list[str]:
    rows = [(j.id, j.config.get("entrypoint") or j.name or "", "SUBMISSION", ray_status(j),
             ray_message(j) or "", slurm_time(j.start_time), slurm_time(j.end_time))
            for j in jobs]
    return _ray_list(now, ["SUBMISSION_ID", "ENTRYPOINT", "TYPE", "STATUS", "MESSAGE",
                           "START_TIME", "END_TIME"], rows)


# --- crashcart's own views --------------------------------------------------------------------------


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
