"""A session killed before its teardown (SIGKILL: no finally runs) leaves its cluster and sshd
running; the next session stops them, and only them, before it starts its own.

Real daemons: a one-node cluster and an sshd started by the harness scripts under a directory
whose owner has died, next to an sshd whose owner (this session) lives.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from slurmlab import SlurmLab
from slurmprocs import free_base, harness, owner, reap_dead_sessions, stop_lab


def _pids(root: Path) -> dict[str, int]:
    found = {p.stem: int(p.read_text()) for p in (root / "cluster" / "run" / "pids").glob("*.pid")}
    sshd = root / "sshd" / "sshd.pid"
    if sshd.exists():
        found["sshd"] = int(sshd.read_text())
    return found


def _running(pid: int) -> bool:
    return owner.start_time(pid) is not None


def test_a_dead_sessions_cluster_and_sshd_are_stopped_and_a_live_sessions_kept(slurm_lab: SlurmLab):
    # A directory of our own to scan: reaping /tmp here would also stop other dead sessions' clusters.
    parent = Path(tempfile.mkdtemp(prefix="crashcart-reap-"))
    parent.chmod(0o755)  # munged: every directory above its socket must be world-executable
    dead, live = parent / "crashcart-slurm-dead", parent / "crashcart-slurm-live"
    for d in (dead, live):
        d.mkdir(mode=0o755)
    try:
        gone = subprocess.Popen(["sleep", "60"])
        owner.claim(dead, gone.pid)
        gone.kill()
        gone.wait()
        owner.claim(live)
        assert owner.orphans("crashcart-slurm-*", parent) == [dead]

        base = free_base(avoid={slurm_lab.port_base}, nodes=1)
        # No cgroups: this cluster's node n1 would share slurm_n1's with the session's cluster.
        env = {**os.environ, "CRASHCART_SLURM_DIR": str(dead / "cluster"), "CRASHCART_SLURM_NODES": "1",
               "CRASHCART_SLURM_PORT_BASE": str(base), "CRASHCART_SLURM_CGROUP": "off"}
        up = harness("slurm_local.sh", "up", env=env, timeout=300)
        assert up.returncode == 0, up.stderr[-2000:]
        for d, port in ((dead, base + 150), (live, base + 151)):
            started = harness("sshd_local.sh", "up", str(d / "sshd"), str(port), env=dict(os.environ), timeout=60)
            assert started.returncode == 0, started.stderr[-2000:]
        left = _pids(dead)
        assert set(left) == {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd-n1", "sshd"}, left
        assert all(_running(p) for p in left.values()), left
        kept = _pids(live)["sshd"]

        assert reap_dead_sessions(parent) == [dead]

        assert [name for name, pid in left.items() if _running(pid)] == []
        assert not dead.exists()
        assert _running(kept), "the live session's sshd was stopped"
        assert reap_dead_sessions(parent) == []
    finally:
        stop_lab(dead)
        stop_lab(live)
        subprocess.run(["rm", "-rf", str(parent)], check=False)
