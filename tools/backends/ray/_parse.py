"""Reading what Ray's APIs return: Jobs API details, state API rows, the autoscaler's status.

Pure functions, plain dicts in (the client turns SDK objects into dicts), crashcart's
shapes out (JobRow, NodeRow) plus the lines a person would see from `ray job status`,
`ray list ...` and `ray status`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crashcart.tools import render
from crashcart.tools.catalog import JobRow, NodeRow
from crashcart.tools.cluster import Job

ACTIVE = {"PENDING", "RUNNING"}
"""Job statuses of a job that has not ended."""
FAILED = {"FAILED"}
"""Statuses a watch opens an incident for: STOPPED is someone's decision, not a failure."""
MESSAGE_LINE = 300


def when(ms: Any) -> datetime | None:
    """A Ray timestamp: milliseconds since the epoch (0 or None = unset)."""
    return datetime.fromtimestamp(int(ms) / 1000, UTC) if ms else None


def first_line(text: str | None, limit: int = MESSAGE_LINE) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit] or None


@dataclass
class NodeInfo:
    """One Ray node as the state API and the autoscaler see it."""

    node_id: str
    name: str
    """The node's name in crashcart: Ray's node_name (its IP) unless two nodes share it."""
    ip: str
    is_head: bool
    state: str
    """crashcart's word: idle | allocated | draining | down."""
    ray_state: str
    """Ray's: ALIVE | DEAD, or the autoscaler's DRAINING / IDLE / RUNNING."""
    message: str | None
    gpus: int
    group: str | None
    labels: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)

    def row(self) -> NodeRow:
        return NodeRow(node=self.name, partition=self.group, state=self.state, gpus=self.gpus,
                       reason=self.message, labels=self.labels)


def nodes(state_rows: list[dict[str, Any]], activity: dict[str, tuple[str, bool]]) -> list[NodeInfo]:
    """Nodes from `list_nodes`, with the autoscaler's per-node status (DRAINING, busy or idle)."""
    counts: dict[str, int] = {}
    for r in state_rows:
        counts[r.get("node_name") or r["node_id"]] = counts.get(r.get("node_name") or r["node_id"], 0) + 1
    out = []
    for r in state_rows:
        node_id = r["node_id"]
        base = r.get("node_name") or node_id
        status, busy = activity.get(node_id, ("", False))
        dead = r.get("state") == "DEAD"
        if dead:
            state, shown = "down", "DEAD"
        elif status == "DRAINING":
            state, shown = "draining", "DRAINING"
        else:
            state, shown = ("allocated" if busy else "idle"), r.get("state") or "ALIVE"
        labels = {str(k): str(v) for k, v in (r.get("labels") or {}).items()}
        resources = r.get("resources_total") or {}
        out.append(NodeInfo(
            node_id=node_id, name=base if counts[base] == 1 else node_id, ip=r.get("node_ip") or "",
            is_head=bool(r.get("is_head_node")), state=state, ray_state=shown, message=r.get("state_message"),
            gpus=int(resources.get("GPU", 0)), labels=labels, resources=resources,
            group=labels.get("ray.io/node-group") or ("head" if r.get("is_head_node") else "worker")))
    return out


def node_activity(status: Any) -> dict[str, tuple[str, bool]]:
    """node_id -> (the autoscaler's node_status, whether anything uses the node's resources)."""
    out = {}
    for n in [*getattr(status, "active_nodes", []), *getattr(status, "idle_nodes", [])]:
        usage = getattr(getattr(n, "resource_usage", None), "usage", []) or []
        busy = any(u.used > 0 for u in usage if not u.resource_name.startswith("node:")
                   and u.resource_name not in ("memory", "object_store_memory"))
        out[n.node_id] = (n.node_status, busy)
    return out


def nodes_lines(infos: list[NodeInfo], now: datetime) -> list[str]:
    """`ray list nodes --detail`'s columns."""
    rows = [(n.node_id, n.ip, str(n.is_head), n.ray_state, n.message or "", n.name,
             _resources(n.resources)) for n in infos]
    return render.ray_list_lines(now, ["NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE", "STATE_MESSAGE",
                                       "NODE_NAME", "RESOURCES_TOTAL"], rows)


def _resources(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if not k.startswith("node:")}
    return ", ".join(f"{k}: {v:g}" for k, v in sorted(shown.items())) or "{}"


# --- jobs ---------------------------------------------------------------------------------


def job_id(details: dict[str, Any]) -> str | None:
    """A Jobs API job's id in crashcart: its submission id (driver-only jobs have none)."""
    return details.get("submission_id")


def job_row(d: dict[str, Any], node_names: dict[str, str]) -> JobRow:
    meta = d.get("metadata") or {}
    status = str(d.get("status") or "UNKNOWN").upper()
    code = d.get("driver_exit_code")
    gpus = d.get("entrypoint_num_gpus") or (d.get("entrypoint_resources") or {}).get("GPU") or 0
    driver = d.get("driver_node_id")
    return JobRow(
        job=job_id(d) or str(d.get("job_id")), name=meta.get("job_name") or meta.get("name") or entry_name(d),
        user=meta.get("user") or meta.get("owner"), partition=meta.get("queue"), state=status,
        reason=first_line(d.get("message")) if status not in ACTIVE or status == "PENDING" else None,
        exit_code=None if code is None else str(code),
        nodes=[node_names.get(driver, driver)] if driver else [], gpus=int(float(gpus)),
        submit_time=when(d.get("start_time")), start_time=when(d.get("start_time")), end_time=when(d.get("end_time")))


def entry_name(d: dict[str, Any]) -> str | None:
    """A short name from the entrypoint: `python train.py --x` -> train.py."""
    words = _words(d.get("entrypoint") or "")
    scripts = [w for w in words if w.endswith(".py") or w.endswith(".sh")]
    return (scripts[0].rsplit("/", 1)[-1] if scripts else (words[0] if words else None))


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def entrypoint_args(entrypoint: str) -> tuple[list[str], list[str]]:
    """The entrypoint split where its `--key` arguments begin: (command, arguments)."""
    words = _words(entrypoint)
    first = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    return words[:first], words[first:]


def status_lines(d: dict[str, Any]) -> list[str]:
    """`ray job status ID`, as the CLI prints it."""
    job = Job(id=job_id(d) or str(d.get("job_id")), state=str(d.get("status") or "UNKNOWN").upper(),
              reason=d.get("message"), exit_code=None if d.get("driver_exit_code") is None else str(d["driver_exit_code"]))
    return render.ray_job_status_lines(job)


def jobs_lines(details: list[dict[str, Any]], now: datetime) -> list[str]:
    """`ray list jobs`'s columns."""
    rows = [(job_id(d) or "", d.get("entrypoint") or "", d.get("type") or "SUBMISSION",
             str(d.get("status") or ""), first_line(d.get("message"), 80) or "",
             render.slurm_time(when(d.get("start_time"))) if d.get("start_time") else "",
             render.slurm_time(when(d.get("end_time"))) if d.get("end_time") else "") for d in details]
    return render.ray_list_lines(now, ["SUBMISSION_ID", "ENTRYPOINT", "TYPE", "STATUS", "MESSAGE",
                                       "START_TIME", "END_TIME"], rows)


# --- what the state API says about one job -----------------------------------------------------

def task_lines(tasks: list[dict[str, Any]]) -> list[str]:
    """Failed or stuck tasks of a job, as `ray list tasks --detail` reports them (error type
    and the first lines of the error, which carry the memory monitor's numbers)."""
    lines = []
    for t in tasks:
        head = f"  {t.get('name')} ({t.get('task_id')}): {t.get('state')}"
        if t.get("error_type"):
            head += f" error_type={t['error_type']}"
        if t.get("state") == "PENDING_NODE_ASSIGNMENT":
            head += f" required_resources={t.get('required_resources')}"
        lines.append(head)
        message = (t.get("error_message") or "").strip().splitlines()
        lines += [f"    {m}" for m in message[:6]]
    return lines


def actor_lines(actors: list[dict[str, Any]]) -> list[str]:
    lines = []
    for a in actors:
        cause = a.get("death_cause") or {}
        context = cause.get("actor_died_error_context") or cause.get("creation_task_failure_context") or {}
        message = context.get("error_message") or context.get("formatted_exception_string") or str(cause)[:400]
        lines.append(f"  {a.get('class_name')} ({a.get('actor_id')}): {a.get('state')} pid={a.get('pid')}")
        lines += [f"    death_cause: {m}" for m in message.strip().splitlines()[:4]]
    return lines


def worker_lines(workers: list[dict[str, Any]]) -> list[str]:
    return [f"  worker pid={w.get('pid')} exit_type={w.get('exit_type')}: "
            f"{' '.join((w.get('exit_detail') or '').split())[:500]}" for w in workers]


def demand_bundles(status: Any) -> list[dict[str, float]]:
    """Resource bundles tasks and actors wait for (`ray status`'s Pending Demands)."""
    return [bundle for bundle, _, kind in demands(status) if kind == "tasks/actors"]


def demands(status: Any) -> list[tuple[dict[str, float], int, str]]:
    """Every line of `ray status`'s Pending Demands: (bundle, count, tasks/actors | placement groups)."""
    summary = getattr(status, "resource_demands", None)
    out = []
    for attr, kind in (("ray_task_actor_demand", "tasks/actors"), ("placement_group_demand", "placement groups")):
        for d in getattr(summary, attr, None) or []:
            out += [(dict(b.bundle), int(b.count), kind) for b in (getattr(d, "bundles_by_count", None) or [])]
    return out


def fits_somewhere(bundle: dict[str, float], infos: list[NodeInfo]) -> bool:
    return any(all(n.resources.get(k, 0.0) >= v for k, v in bundle.items())
               for n in infos if n.state != "down")
