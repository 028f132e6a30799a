"""Reading what the Slurm CLI prints: sacct -P, squeue/sinfo (JSON or text), scontrol -o, nvidia-smi CSV.

Pure functions, text in, facts out. A line crashcart cannot read is a ToolError
that quotes the line, never a traceback: a truncated pipe or a version that
prints something unexpected must be reported, not guessed around.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crashcart.tools._spec import ToolError
from crashcart.tools.catalog import JobRow, NodeRow
from crashcart.tools.cluster import GpuSample, Job, Node
from crashcart.tools.render import expand_hostlist

UNAVAILABLE = ("down", "drained", "draining", "not_ready", "cordoned")
"""Node states (crashcart's words) that are out of service."""
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
"""Job states of a job still in the queue."""

# --- small values -------------------------------------------------------------------

_NO_VALUE = {"", "unknown", "none", "n/a", "(null)", "none assigned"}


def when(text: str | None) -> datetime | None:
    """A Slurm timestamp (printed in UTC: every command runs with TZ=UTC)."""
    if text is None or text.strip().lower() in _NO_VALUE:
        return None
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=UTC)
    except ValueError:
        return None


def epoch(value: Any) -> datetime | None:
    """A time from Slurm's JSON: seconds since the epoch (0 = unset), or {set, number} in newer versions."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if not value:
        return None
    try:
        return datetime.fromtimestamp(int(value), UTC)
    except (OverflowError, OSError):
        raise ValueError(f"{value!r} is not a time in seconds since the epoch") from None


def text_of(value: Any) -> str:
    """A string from Slurm's JSON, where newer versions turn some strings into lists."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def nodes_of(text: str | None) -> list[str]:
    if text is None or text.strip().lower() in _NO_VALUE:
        return []
    try:
        return expand_hostlist(text.strip())
    except ValueError as e:
        raise ToolError(f"Slurm printed a node list crashcart cannot read: {e}") from None


def gpus_in(tres: str | None) -> int:
    """GPUs in a TRES string: `cpu=1,gres/gpu=2`, `gres/gpu:a100=2`, or `gres:gpu:2` (per node)."""
    if not tres:
        return 0
    total = 0
    for m in re.finditer(r"gres/gpu(?::[\w.-]+)?=(\d+)", tres):
        total += int(m[1])
    if total:
        # `gres/gpu=4,gres/gpu:a100=4` counts the same GPUs twice: keep the untyped total.
        untyped = re.search(r"gres/gpu=(\d+)", tres)
        return int(untyped[1]) if untyped else total
    for m in re.finditer(r"(?:gres[:/])?gpu(?::[A-Za-z][\w.-]*)?:(\d+)", tres):
        total += int(m[1])
    return total


def reason_of(text: str | None) -> str | None:
    return None if text is None or text.strip().lower() in _NO_VALUE else text.strip()


# --- sacct -P -------------------------------------------------------------------------

SACCT_FIELDS = ("JobID", "JobName", "Partition", "User", "State", "ExitCode", "Start", "End",
                "Elapsed", "NodeList", "Reason", "Submit", "AllocTRES")
_JOB_ID = re.compile(r"^\d+(?:_(?:\d+|\[[\d,\-%]+\]))?(?:\+\d+)?(?:\.[\w-]+)?$")


def sacct_records(text: str, fields: tuple[str, ...] = SACCT_FIELDS) -> list[dict[str, str]]:
    """Rows of `sacct -P -o <fields>` (with its header line) as dicts."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    if header != list(fields):
        raise ToolError(f"sacct printed an unexpected header (expected {'|'.join(fields)}): {lines[0][:300]!r}")
    records = []
    for line in lines[1:]:
        cells = line.split("|")
        if len(cells) != len(fields) or not _JOB_ID.match(cells[0]) or not cells[fields.index("State")]:
            raise ToolError(
                f"sacct printed a line crashcart cannot read (expected {len(fields)} '|'-separated fields "
                f"starting with a job id, got {len(cells)}): {line[:300]!r}")
        records.append(dict(zip(fields, cells)))
    return records


def sacct_jobs(records: list[dict[str, str]]) -> list[JobRow]:
    """One JobRow per allocation (steps dropped). With `sacct -D` a requeued job appears once per
    run under one id: the earlier runs become attempts 1..n, the latest is the job itself."""
    allocs = [r for r in records if "." not in r["JobID"]]
    seen: dict[str, int] = {}
    for r in allocs:
        seen[r["JobID"]] = seen.get(r["JobID"], 0) + 1
    count: dict[str, int] = {}
    rows = []
    for r in allocs:
        count[r["JobID"]] = count.get(r["JobID"], 0) + 1
        earlier = count[r["JobID"]] < seen[r["JobID"]]
        rows.append(JobRow(
            job=r["JobID"], name=r.get("JobName") or None, user=r.get("User") or None,
            partition=r.get("Partition") or None, state=r["State"], reason=reason_of(r.get("Reason")),
            exit_code=r.get("ExitCode") or None, nodes=nodes_of(r.get("NodeList")),
            gpus=gpus_in(r.get("AllocTRES")), submit_time=when(r.get("Submit")),
            start_time=when(r.get("Start")), end_time=when(r.get("End")),
            attempt=count[r["JobID"]] if earlier else None,
        ))
    return rows


# --- scontrol show job -o ---------------------------------------------------------------

_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z_]*(?:[:/][A-Za-z_]+)*)=")


def scontrol_record(line: str) -> dict[str, str]:
    """`scontrol show job -o` / `show node -o`: Key=value pairs, where values may hold spaces
    (JobName=my job, Comment=..., Command=/path/run.sh --lr 0.1)."""
    line = line.strip()
    marks = list(_KEY.finditer(line))
    if not marks or marks[0].start(1) != 0:
        raise ToolError(f"scontrol printed a line crashcart cannot read: {line[:300]!r}")
    out: dict[str, str] = {}
    for m, nxt in zip(marks, marks[1:] + [None]):
        value = line[m.end(): nxt.start() if nxt else len(line)]
        out.setdefault(m[1], value.strip())
    return out


def scontrol_job(rec: dict[str, str]) -> JobRow:
    running = rec.get("JobState", "").upper() in {"RUNNING", "PENDING", "CONFIGURING", "SUSPENDED", "REQUEUED"}
    deps = rec.get("Dependency", "")
    return JobRow(
        job=rec["JobId"], name=rec.get("JobName") or None, user=(rec.get("UserId") or "").split("(")[0] or None,
        partition=rec.get("Partition") or None, state=rec.get("JobState", "UNKNOWN"),
        reason=reason_of(rec.get("Reason")), exit_code=rec.get("ExitCode") or None,
        nodes=nodes_of(rec.get("NodeList")), gpus=gpus_in(rec.get("TRES") or rec.get("TresPerJob")),
        submit_time=when(rec.get("SubmitTime")), start_time=when(rec.get("StartTime")),
        # For a live job EndTime is when its time limit would end it, not an end.
        end_time=None if running else when(rec.get("EndTime")),
        depends_on=re.findall(r":(\d+)", deps) if reason_of(deps) else [],
    )


# --- squeue ---------------------------------------------------------------------------------

SQUEUE_FORMAT = "%i|%P|%j|%u|%T|%r|%N|%V|%S|%E|%b|%D"
_SQUEUE_FIELDS = 12


def squeue_text(text: str) -> list[JobRow]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        c = line.split("|")
        if len(c) != _SQUEUE_FIELDS or not _JOB_ID.match(c[0]):
            raise ToolError(f"squeue printed a line crashcart cannot read: {line[:300]!r}")
        per_node = gpus_in(c[10])
        rows.append(JobRow(
            job=c[0], partition=c[1] or None, name=c[2] or None, user=c[3] or None, state=c[4],
            reason=reason_of(c[5]), nodes=nodes_of(c[6]), submit_time=when(c[7]),
            start_time=when(c[8]) if c[4] != "PENDING" else None,
            depends_on=re.findall(r":(\d+)", c[9]) if reason_of(c[9]) else [],
            gpus=per_node * max(1, int(c[11]) if c[11].isascii() and c[11].isdigit() else 1),
        ))
    return rows


def squeue_json(data: dict[str, Any]) -> list[JobRow]:
    rows = []
    for j in data.get("jobs") or []:
        state = text_of(j.get("job_state"))
        live = state.upper() in {"RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "SUSPENDED"}
        deps = text_of(j.get("dependency"))
        rows.append(JobRow(
            job=str(j["job_id"]), name=j.get("name") or None, user=j.get("user_name") or None,
            partition=j.get("partition") or None, state=state,
            reason=reason_of(text_of(j.get("state_reason"))), nodes=nodes_of(j.get("nodes")),
            gpus=gpus_in(j.get("tres_alloc_str") or j.get("tres_req_str")),
            submit_time=epoch(j.get("submit_time")),
            start_time=epoch(j.get("start_time")) if state.upper() != "PENDING" else None,
            end_time=None if live else epoch(j.get("end_time")),
            depends_on=re.findall(r":(\d+)", deps),
        ))
    return rows


# --- sinfo -------------------------------------------------------------------------------

SINFO_FORMAT = "%N|%P|%T|%G|%E|%o|%n"


@dataclass
class NodeInfo:
    name: str
    state: str
    """crashcart's word: idle, allocated, mixed, down, drained, draining, not_ready."""
    slurm_state: str
    """Slurm's own, e.g. `idle+drain`, `down*`."""
    partitions: list[str] = field(default_factory=list)
    gpus: int = 0
    gpu_model: str | None = None
    reason: str | None = None
    address: str | None = None
    hostname: str | None = None


def crashcart_state(base: str, flags: set[str]) -> str:
    """Slurm's node state (base + flags) in the vocabulary scenarios and the guard use."""
    base = base.lower()
    silent = base.endswith("*") or "NOT_RESPONDING" in flags
    base = base.rstrip("*~#!%$@^-")
    drain = bool(flags & {"DRAIN", "FAIL"}) or base in {"drained", "draining", "drain", "drng", "fail", "failing"}
    if base == "down":
        return "drained" if drain else "down"
    if drain:
        busy = base in {"allocated", "alloc", "mixed", "mix", "completing", "draining", "drng", "failing"}
        return "draining" if busy or "COMPLETING" in flags else "drained"
    if silent or base in {"unknown", "future", "error", "boot_fail", "inval"}:
        return "not_ready"
    return {"allocated": "allocated", "alloc": "allocated", "completing": "allocated",
            "mixed": "mixed", "mix": "mixed"}.get(base, "idle")


def _gres_gpus(gres: str) -> tuple[int, str | None]:
    count, model = 0, None
    for m in re.finditer(r"gpu(?::([A-Za-z][\w.-]*))?:(\d+)", gres or ""):
        count += int(m[2])
        model = model or m[1]
    return count, model


def sinfo_json(data: dict[str, Any]) -> list[NodeInfo]:
    nodes = []
    for n in data.get("nodes") or []:
        raw = n.get("state")
        flags = {str(f).upper() for f in (n.get("state_flags") or [])}
        if isinstance(raw, list):  # 23.11+: ["IDLE", "DRAIN"]
            base, flags = str(raw[0]) if raw else "unknown", flags | {str(s).upper() for s in raw[1:]}
        else:
            base = str(raw or "unknown")
        gpus, model = _gres_gpus(text_of(n.get("gres")))
        slurm_state = "+".join([base.lower(), *sorted(f.lower() for f in flags)])
        nodes.append(NodeInfo(
            name=n["name"], state=crashcart_state(base, flags), slurm_state=slurm_state,
            partitions=list(n.get("partitions") or []), gpus=gpus, gpu_model=model,
            reason=reason_of(text_of(n.get("reason"))), address=n.get("address") or None,
            hostname=n.get("hostname") or None,
        ))
    return nodes


def sinfo_text(text: str) -> list[NodeInfo]:
    """`sinfo -N -h -o SINFO_FORMAT`: one line per node and partition, merged per node."""
    by_name: dict[str, NodeInfo] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        c = line.split("|")
        if len(c) != 7 or not c[0]:
            raise ToolError(f"sinfo printed a line crashcart cannot read: {line[:300]!r}")
        name, partition = c[0], c[1].rstrip("*")
        if name in by_name:
            by_name[name].partitions.append(partition)
            continue
        gpus, model = _gres_gpus(c[3])
        parts = c[2].split("+")
        flags = {p.upper() for p in parts[1:]}
        by_name[name] = NodeInfo(
            name=name, state=crashcart_state(parts[0], flags), slurm_state=c[2], partitions=[partition],
            gpus=gpus, gpu_model=model, reason=reason_of(c[4]), address=c[5] or None, hostname=c[6] or None,
        )
    return list(by_name.values())


# --- nvidia-smi --query-gpu ... --format=csv --------------------------------------------------

_SMI_FIELDS = {
    "index": "index", "temperature.gpu": "temperature_c", "power.draw": "power_w",
    "clocks.sm": "sm_clock_mhz", "utilization.gpu": "util_pct", "memory.used": "memory_used_mib",
    "memory.total": "memory_total_mib", "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected",
    "remapped_rows.pending": "remapped_rows_pending",
}


def nvidia_smi_samples(text: str, at: datetime) -> tuple[list[GpuSample], str | None]:
    """GPU samples from the CSV, and the GPU model; a line that does not fit is a ToolError."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return [], None
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in lines[0].split(",")]
    samples, model = [], None
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(header):
            raise ToolError(f"nvidia-smi printed a line crashcart cannot read: {line[:300]!r}")
        values: dict[str, Any] = {"time": at, "throttle_reasons": []}
        for name, cell in zip(header, cells):
            if name == "name":
                model = model or cell
            elif name in _SMI_FIELDS:
                values[_SMI_FIELDS[name]] = _smi_number(cell)
            elif name.startswith(("clocks_throttle_reasons.", "clocks_event_reasons.")) and cell == "Active":
                reason = name.split(".", 1)[1]
                if reason != "active":
                    values["throttle_reasons"].append(reason)
        if values.get("index") is None:
            raise ToolError(f"nvidia-smi printed a GPU without an index: {line[:300]!r}")
        values["index"] = int(values["index"])
        for key in ("ecc_uncorrected", "remapped_rows_pending"):
            if values.get(key) is not None:
                values[key] = int(values[key])
        samples.append(GpuSample.model_validate(values))
    return samples, model


def _smi_number(cell: str) -> float | None:
    if cell in {"Yes", "No"}:
        return 1.0 if cell == "Yes" else 0.0
    m = re.match(r"^[-+]?\d+(?:\.\d+)?", cell)
    return float(m[0]) if m else None


# --- rows back to the cluster model (the renderers take those) ------------------------------


def as_job(r: JobRow) -> Job:
    """A row as the cluster model the renderers take."""
    return Job(id=r.job, name=r.name, user=r.user, state=r.state, reason=r.reason, exit_code=r.exit_code,
               partition=r.partition, nodes=r.nodes, gpus=r.gpus, submit_time=r.submit_time,
               start_time=r.start_time, end_time=r.end_time, depends_on=r.depends_on)


def as_node(r: NodeRow) -> Node:
    return Node(name=r.node, state=r.state, partition=r.partition, gpus=r.gpus, gpu_model=r.gpu_model,
                reason=r.reason)
