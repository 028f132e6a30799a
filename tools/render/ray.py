"""Ray as its CLI prints it: job status, `ray list nodes` and `ray list jobs`."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from crashcart.tools.cluster import Job, Node
from crashcart.tools.render._formats import aware, is_active, slurm_time, table


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


def ray_list_lines(title_time: datetime, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
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
    return ray_list_lines(now, ["NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE", "STATE_MESSAGE",
                           "NODE_NAME", "RESOURCES_TOTAL"], rows)


def ray_jobs_lines(jobs: Sequence[Job], now: datetime) -> list[str]:
    rows = [(j.id, j.config.get("entrypoint") or j.name or "", "SUBMISSION", ray_status(j),
             ray_message(j) or "", slurm_time(j.start_time), slurm_time(j.end_time))
            for j in jobs]
    return ray_list_lines(now, ["SUBMISSION_ID", "ENTRYPOINT", "TYPE", "STATUS", "MESSAGE",
                           "START_TIME", "END_TIME"], rows)
