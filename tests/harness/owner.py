"""Which test session owns a harness's state directory, and finding the ones whose session died.

A pytest run killed with SIGKILL runs no teardown: the Slurm cluster, the sshd and the Ray heads
it started keep running, holding their ports and, for Slurm, reading and writing the machine's
shared cgroups and kernel log. Each session therefore writes its own pid into the directory it
starts them from (`claim`), and the next session stops whatever a dead owner left (`orphans`),
by the pids the harness recorded there, never by a process name: other people's daemons and
other live sessions on the machine are not ours to touch.

A pid alone is not an identity (the kernel reuses them), so the owner's start time goes with it.
A directory with no owner file is never reaped: it may be a cluster someone started by hand, or
one a session is creating this very moment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OWNER_FILE = "owner.json"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count from its end.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has exited; only its parent has not reaped it yet
        return None
    return int(fields[19])


def claim(directory: str | Path, pid: int | None = None) -> None:
    """Mark `directory` as this session's (or `pid`'s): written before anything is started in it."""
    pid = os.getpid() if pid is None else pid
    started = start_time(pid)
    if started is None:
        raise ValueError(f"process {pid} is not running: it cannot own {directory}")
    (Path(directory) / OWNER_FILE).write_text(json.dumps({"pid": pid, "start": started}))


def owner_alive(directory: str | Path) -> bool | None:
    """True while the session that claimed `directory` runs, False once it died, None when the
    directory was never claimed (or its claim cannot be read): then nobody can tell."""
    try:
        owner = json.loads((Path(directory) / OWNER_FILE).read_text())
        pid, started = int(owner["pid"]), owner["start"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return start_time(pid) == started


def orphans(pattern: str, root: str | Path = "/tmp") -> list[Path]:
    """The directories matching `pattern` under `root` whose owning session is dead."""
    return sorted(p for p in Path(root).glob(pattern) if p.is_dir() and owner_alive(p) is False)
