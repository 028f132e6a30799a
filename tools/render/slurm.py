"""Slurm as its commands print it: host lists, sacct, squeue, sinfo."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from crashcart.tools.cluster import Job, Node, Partition
from crashcart.tools.render._formats import elapsed_seconds, is_active, slurm_time, table

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


MAX_HOSTLIST = 100_000
"""More names than any cluster has: a hostlist that expands past it is not one."""
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand_hostlist(text: str) -> list[str]:
    """The inverse of compress_hostlist: gpu-b[05-06],gpu-a1 -> gpu-b05, gpu-b06, gpu-a1.

    A bracket that is not a list of numbers and ascending ranges is a ValueError naming it."""
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
            r = _RANGE.fullmatch(part.strip())
            if not r or (r[2] and int(r[2]) < int(r[1])):
                raise ValueError(f"hostlist {text[:200]!r}: {part!r} is not a number or an ascending range")
            lo, hi = r[1], r[2] or r[1]
            if len(names) + int(hi) - int(lo) >= MAX_HOSTLIST:
                raise ValueError(f"hostlist {text[:200]!r} names more than {MAX_HOSTLIST} nodes")
            for i in range(int(lo), int(hi) + 1):
                names.append(f"{prefix}{i:0{len(lo)}d}{suffix}")
    return names


# --- Slurm --------------------------------------------------------------------------------

SACCT_HEADER = "JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NodeList|Reason"


def _dhms(seconds: float) -> tuple[int, int, int, int]:
    d, rest = divmod(int(max(0, seconds)), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return d, h, m, s


def slurm_elapsed(seconds: float) -> str:
    d, h, m, s = _dhms(seconds)
    return f"{d}-{h:02}:{m:02}:{s:02}" if d else f"{h:02}:{m:02}:{s:02}"


def squeue_time(seconds: float) -> str:
    d, h, m, s = _dhms(seconds)
    if d:
        return f"{d}-{h:02}:{m:02}:{s:02}"
    return f"{h}:{m:02}:{s:02}" if h else f"{m}:{s:02}"


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


def scontrol_partition_line(part: Partition | None, name: str, nodes: Iterable[Node]) -> str:
    """`scontrol show partition -o NAME`: one line of Key=Value pairs. Limits the scenario does not
    record are left out rather than invented."""
    members = [n for n in nodes if n.partition == name]
    fields = [f"PartitionName={name}", "AllowGroups=ALL", "AllowAccounts=ALL", "AllowQos=ALL"]
    if part and part.default_time:
        fields.append(f"DefaultTime={part.default_time}")
    if part and part.max_nodes:
        fields.append(f"MaxNodes={part.max_nodes}")
    if part and part.max_time:
        fields.append(f"MaxTime={part.max_time}")
    fields.append(f"Nodes={compress_hostlist(n.name for n in members) or '(null)'}")
    fields.append(f"State={part.state if part else 'UP'}")
    fields.append(f"TotalNodes={len(members)}")
    gpus = sum(n.gpus for n in members)
    if gpus:
        fields.append(f"TRES=node={len(members)},gres/gpu={gpus}")
    return " ".join(fields)
