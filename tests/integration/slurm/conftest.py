"""A real Slurm cluster and a real sshd on loopback, started once per test session.

tests/harness/slurm_local.sh installs Slurm, munge, MariaDB and openssh-server if
needed (Debian packages, as root) and starts munged, mariadbd, slurmdbd, slurmctld
and five slurmd virtual nodes with fake GPUs under a private directory;
tests/harness/sshd_local.sh runs sshd on a high loopback port. Both stop at the
end of the session, by the PIDs they recorded; what a killed session left running
is stopped first (slurmprocs.py).

When this machine cannot run them (not root, no apt-get, the install fails) the
tests skip with the reason, except when the CI environment variable is set: then
they fail, so a CI run without real Slurm can never pass.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from slurmlab import SlurmLab, Sshd
from slurmprocs import NODES, SSHD_PORT, free_base, harness, owner, reap_dead_sessions, stop_lab

pytestmark = pytest.mark.slurm
RESERVED = ("n3", "n4")
"""Nodes kept for the tests that take a node down (SlurmLab.reserved_node): the agent reads a
lost node's recent history, so theirs must hold only the test's own job."""
TIME_LIMIT_JOB = """#!/bin/bash
# Trains until Slurm kills it at its one-minute limit; checkpoints on the way.
for i in $(seq 1 200); do
  echo "$(date -u +%Y-%m-%dT%H:%M:%S) step $((i * 10)) loss 2.$((90 - i % 50))"
  if [ $((i % 3)) = 0 ]; then echo "$(date -u +%Y-%m-%dT%H:%M:%S) saved checkpoint step $((i * 10)) to $PWD/ckpt/step$((i * 10)).pt"; fi
  sleep 2
done
"""


def unavailable(reason: str) -> None:
    """Skip here, fail in CI: CI must never pass without running these."""
    if os.environ.get("CI", "").lower() not in {"", "0", "false", "no"}:
        pytest.fail(f"real-Slurm integration tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_lab(tmp_path_factory) -> SlurmLab:
    if os.geteuid() != 0:
        unavailable("the test cluster's daemons run as root (slurmd, slurmctld); run the tests as root")
    # Not under pytest's 0700 tmp dirs: munged needs every directory above its socket to be
    # world-executable, and mariadbd (user mysql) must reach its datadir.
    missing = [c for c in ("sbatch", "slurmctld", "slurmdbd", "munged", "mariadbd", "sshd")
               if not shutil.which(c, path=os.environ.get("PATH", "") + ":/usr/sbin")]
    if missing and not shutil.which("apt-get"):
        unavailable(f"Slurm is not installed ({', '.join(missing)} missing) and there is no apt-get to install it")
    done = harness("slurm_local.sh", "install", env=dict(os.environ), timeout=900)
    if done.returncode != 0:
        unavailable(f"installing Slurm failed: {(done.stderr or done.stdout).strip()[-800:]}")
    reap_dead_sessions()
    root, env, failures, tried = None, {}, [], set()
    # Another session on this machine may take the ports between our check and our daemons'
    # bind: a cluster that does not start is tried again on other ports, in a new directory.
    for _ in range(3):
        tried.add(base := free_base(avoid=tried))
        root = Path(tempfile.mkdtemp(prefix="crashcart-slurm-"))
        root.chmod(0o755)
        owner.claim(root)
        env = {**os.environ, "CRASHCART_SLURM_DIR": str(root / "cluster"), "CRASHCART_SLURM_NODES": str(NODES),
               "CRASHCART_SLURM_PORT_BASE": str(base), "CRASHCART_SLURM_RESERVED": ",".join(RESERVED)}
        done = harness("slurm_local.sh", "up", env=env, timeout=300)
        if done.returncode == 0:
            break
        failures.append(f"ports from {base}:\n{done.stderr[-2000:]}")
        stop_lab(root)
    else:
        # Installed but not starting is a bug in the harness or the machine: never a skip.
        pytest.fail("the test cluster did not start:\n" + "\n".join(failures), pytrace=False)
    jobs = root / "jobs"
    jobs.mkdir()
    cluster = Path(env["CRASHCART_SLURM_DIR"])
    lab = SlurmLab(dir=cluster, jobs=jobs, reserved=RESERVED, port_base=base,
                   memory_enforcement=(cluster / "etc" / "memory-enforcement").read_text().strip())
    # The time-limit job takes 60-100 s to be killed: start it first, share it.
    script = lab.script("time_limit.sh", TIME_LIMIT_JOB)
    lab.background["time_limit"] = lab.sbatch(script, "--time=1", "-J", "pretrain-tl", "-w", "n1", "-o", "tl-%j.out")
    try:
        yield lab
    finally:
        failed = stop_lab(root)
        if failed:
            print(failed)


@pytest.fixture(scope="session")
def sshd(slurm_lab: SlurmLab) -> Sshd:
    """sshd on 127.0.0.1 (openssh-server, installed with the cluster), key login as root. It
    lives in the cluster's directory, so whoever stops the cluster stops it too."""
    directory = slurm_lab.dir.parent / "sshd"
    port = slurm_lab.port_base + SSHD_PORT
    done = harness("sshd_local.sh", "up", str(directory), str(port), env=dict(os.environ), timeout=60)
    if done.returncode != 0:
        pytest.fail(f"the loopback sshd did not start:\n{done.stderr[-2000:]}", pytrace=False)
    slurm_lab.sshd = Sshd(dir=directory, port=port)
    try:
        yield slurm_lab.sshd
    finally:
        harness("sshd_local.sh", "down", str(directory), env=dict(os.environ), timeout=60)


@pytest.fixture
def lab(slurm_lab: SlurmLab, sshd: Sshd) -> SlurmLab:
    """The cluster with the sshd running: node commands in the agent tests go over SSH, so a
    run in observe or dry-run mode leaves no probe job in accounting. Each test starts from
    the same settled cluster (SlurmLab.settle), whatever ran before it."""
    slurm_lab.settle()
    return slurm_lab
