"""Starting and stopping the session's cluster and sshd (tests/harness/*.sh), and reaping
the ones a dead session left.

Everything a session starts lives under one directory, /tmp/crashcart-slurm-*, that names
the session owning it (tests/harness/owner.py). A session killed before its teardown (SIGKILL)
leaves its daemons running there; the next session stops them, by the pids the harness scripts
recorded, before it starts its own.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from slurmlab import HARNESS

sys.path.insert(0, str(HARNESS))
import owner  # noqa: E402

NODES = 5
SSHD_PORT = 150
"""The loopback sshd's port, as an offset from the cluster's port base: checked free with the rest."""


def free_base(avoid: set[int] = frozenset(), nodes: int = NODES) -> int:
    """A port base whose ports (base+17..base+33, base+101..base+105 and the sshd's) are free. The
    search starts at a random base: sessions started together on one machine would otherwise all
    find the same one free before any of them binds it. The bases lie between Ray's worker ports
    (10002-19999 by default, bound and released all the time by any Ray head on the machine) and
    the kernel's ephemeral ports (from 32768), so neither can take one between check and bind."""
    bases = list(range(20000, 32000, 200))
    start = random.randrange(len(bases))
    for base in bases[start:] + bases[:start]:
        if base in avoid:
            continue
        ports = [base + p for p in (17, 18, 19, 33, SSHD_PORT)] + [base + 100 + i for i in range(1, nodes + 1)]
        if all(_free(p) for p in ports):
            return base
    raise RuntimeError("no free port range for the test cluster")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def harness(script: str, *args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(HARNESS / script), *args], env=env, capture_output=True, text=True, timeout=timeout)


def stop_lab(root: Path) -> str | None:
    """Stop the sshd and the cluster under `root` (by the pids they recorded) and delete it.
    None when done; else why not (the directory is then kept, with its logs)."""
    harness("sshd_local.sh", "down", str(root / "sshd"), env=dict(os.environ), timeout=60)
    down = harness("slurm_local.sh", "down", env={**os.environ, "CRASHCART_SLURM_DIR": str(root / "cluster")},
                   timeout=180)
    if down.returncode != 0:
        return f"slurm_local.sh down failed; kept {root}: {down.stderr[-2000:]}"
    shutil.rmtree(root, ignore_errors=True)
    return None


def reap_dead_sessions(tmp: str | Path | None = None) -> list[Path]:
    """Stop what earlier sessions, killed before their teardown, left running: their cluster
    holds ports, cgroups named after its nodes and a share of the kernel log. Returns the
    directories reaped."""
    reaped = []
    for root in owner.orphans("crashcart-slurm-*", tmp or tempfile.gettempdir()):
        failed = stop_lab(root)
        if failed:
            print(f"reaping a dead session's cluster: {failed}")
        reaped.append(root)
    return reaped
