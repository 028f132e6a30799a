"""`crashcart watch --cluster` as the process an operator runs, on the real cluster.

A restart test that raises inside the process proves less than it seems (finally blocks
run, buffers flush); here the watch process is killed by SIGKILL at the worst moments
(agent/crashpoints.py), then started again, and Slurm itself is asked how many times the
fix was submitted. Stall detection is tested the same way: a job whose log stops growing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from crashcart.agent.store import IncidentStore
from slurmlab import SlurmLab
from test_agent_local import CUDA_OOM

# Resubmits, cancels and escalations only: a drain from this test must never take a node
# away from the tests that follow, whatever else failed in the lookback window.
GUARD = {"mode": "autonomous", "approval": [],
         "permissions": [{"tool": t} for t in ("resubmit", "cancel_job", "escalate", "notify")],
         "restart_budget": {"max_restarts": 3}}

HUNG = """#!/bin/bash
# A training run that hangs in a collective: it logged steps, then nothing; the process
# keeps running. The step lines carry stamps from 40-50 minutes ago so that the job reads
# as hung for 40 minutes without the test waiting 40 minutes.
for i in 1 2 3 4 5; do
  echo "$(date -u -d "-$((50 - i * 2)) min" +%Y-%m-%dT%H:%M:%S) step $((i * 100)) loss 2.$((60 - i)) 5123.4 tokens/s"
done
sleep 600
"""


def watch(lab: SlurmLab, cluster: Path, state: Path, since: datetime, *extra: str,
          crash_at: str | None = None) -> subprocess.CompletedProcess:
    """One poll of `crashcart watch` in its own process. A new store's first poll starts at
    `since` (SlurmLab.window_start before the test's own job), so failures of earlier tests are
    not in it."""
    if not (state / "incidents.duckdb").exists():
        state.mkdir(parents=True, exist_ok=True)
        store = IncidentStore(str(state / "incidents.duckdb"))
        store.set_watch_cursor("crashcart-local", since)
        store.close()
    env = dict(lab.env)
    env.pop("CRASHCART_CRASH_AT", None)
    if crash_at:
        env["CRASHCART_CRASH_AT"] = crash_at
    argv = [sys.executable, "-m", "crashcart.agent.interfaces.cli", "watch", "--cluster", str(cluster),
            "--polls", "1", "--interval", "0", "--state-dir", str(state), *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=lab.jobs, timeout=300)


def resubmits_of(lab: SlurmLab, job: str) -> list[str]:
    """Every job Slurm has whose comment says it replaces `job`: what Slurm shows, not what crashcart says."""
    found = set()
    for line in lab.cli("squeue", "-h", "-t", "all", "-o", "%i|%k").splitlines():
        jid, _, comment = line.partition("|")
        if f"resubmit of {job} " in comment:
            found.add(jid.strip())
    for line in lab.cli("sacct", "-n", "-X", "-P", "-a", "-S", "now-1hours", "-o", "JobID,Comment").splitlines():
        jid, _, comment = line.partition("|")
        if f"resubmit of {job} " in comment:
            found.add(jid.strip())
    return sorted(found)


def incidents_for(store_path: Path, job: str):
    store = IncidentStore(str(store_path))
    try:
        mine = [i for i in store.list_incidents("crashcart-local", limit=1000) if i.trigger.get("job") == job]
        return [store.get_incident(i.id) for i in mine]
    finally:
        store.close()


@pytest.mark.parametrize("crash_at", ["before_act", "after_action"])
def test_watch_killed_between_detection_and_action_acts_exactly_once(lab: SlurmLab, tmp_path, crash_at):
    # The session's time-limit job must not end inside this test's window (its incident could
    # take the crash point instead of ours).
    lab.background_ended()
    script = lab.script(f"killed-{crash_at}.sh", CUDA_OOM)
    t0 = lab.window_start()
    old = lab.sbatch(script, "-J", f"sft-{crash_at}", "--gres=gpu:1", "-o", "killed-%j.out",
                     args=("--batch_size=8",))
    assert lab.wait_state(old, "FAILED", timeout=120) == "FAILED"
    cluster = lab.cluster_file(tmp_path / "cluster.yaml", GUARD)
    state = tmp_path / "state"

    first = watch(lab, cluster, state, t0, crash_at=crash_at)
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stderr[-2000:])
    # Killed before the action was journaled: Slurm has either nothing yet or the one job.
    before = resubmits_of(lab, old)
    assert len(before) == (1 if crash_at == "after_action" else 0), before

    second = watch(lab, cluster, state, t0)
    assert second.returncode == 0, second.stderr[-2000:]
    # Both watch processes have exited: every sbatch they ran has returned, and slurmctld lists
    # a job from its submission on (squeue -t all), so a second resubmit would be here now.
    jobs = resubmits_of(lab, old)
    assert len(jobs) == 1, jobs
    assert "--batch_size=4" in lab.job(jobs[0])["Command"]

    (detail,) = incidents_for(state / "incidents.duckdb", old)
    assert detail.incident.status == "remediated", detail.incident.status
    executed = [a for a in detail.actions if a.tool == "resubmit"]
    assert len(executed) == 1 and executed[0].result["new_job"] == jobs[0]
    if crash_at == "after_action":
        # The restarted process found the job its killed predecessor submitted, by the request id.
        assert executed[0].result["message"].startswith(f"Already submitted as {jobs[0]}")
    lab.cancel(*jobs)


def test_watch_detects_a_job_whose_log_stopped_and_restarts_it(lab: SlurmLab, tmp_path):
    lab.background_ended()  # its end inside this test's window would be resubmitted by this watch
    script = lab.script("hung.sh", HUNG)
    t0 = lab.window_start()
    hung = lab.sbatch(script, "-J", "pretrain-hung", "--gres=gpu:1", "-o", "hung-%j.out")
    try:
        lab.wait_state(hung, "RUNNING", timeout=120)
        log = lab.jobs / f"hung-{hung}.out"
        lab.wait_for("the hung job's log", lambda: log.exists() and log.read_text().count("step") == 5)
        cluster = lab.cluster_file(tmp_path / "cluster.yaml", GUARD)
        state = tmp_path / "state"
        # Too soon: the job has not been silent for the stall time yet. Ten minutes, not seconds:
        # on a loaded machine the watch process alone may take tens of seconds to start.
        early = watch(lab, cluster, state, t0, "--stall-minutes", "10")
        assert early.returncode == 0, early.stderr[-2000:]
        assert not incidents_for(state / "incidents.duckdb", hung)

        time.sleep(max(0.0, 0.2 * 60 - (time.time() - log.stat().st_mtime)) + 1)
        done = watch(lab, cluster, state, t0, "--stall-minutes", "0.2")
        assert done.returncode == 0, done.stderr[-2000:]
        (detail,) = incidents_for(state / "incidents.duckdb", hung)
        assert detail.incident.trigger["kind"] == "job_stalled"
        assert detail.incident.diagnosis["label"] == "training_hang", detail.incident.diagnosis
        assert lab.wait_state(hung, "CANCELLED") == "CANCELLED"
        jobs = lab.wait_for("the restarted job", lambda: resubmits_of(lab, hung))
        assert len(jobs) == 1
        # Claimed once: the next poll does not open a second incident for the same stall.
        again = watch(lab, cluster, state, t0, "--stall-minutes", "0.2")
        assert again.returncode == 0 and len(incidents_for(state / "incidents.duckdb", hung)) == 1
        lab.cancel(*jobs)
    finally:
        lab.cancel(hung)


def test_investigate_a_live_job_from_the_command_line_in_observe_mode(lab: SlurmLab, tmp_path):
    script = lab.script("observed.sh", CUDA_OOM)
    old = lab.sbatch(script, "-J", "sft-observed", "--gres=gpu:1", "-o", "observed-%j.out",
                     args=("--batch_size=8",))
    assert lab.wait_state(old, "FAILED", timeout=120) == "FAILED"
    cluster = lab.cluster_file(tmp_path / "cluster.yaml", GUARD)
    before = lab.snapshot(old)  # wait_state waited for accounting's whole record of the job
    done = subprocess.run(
        [sys.executable, "-m", "crashcart.agent.interfaces.cli", "investigate", "--cluster", str(cluster),
         "--job", old, "--mode", "observe", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, env={**lab.env, "COLUMNS": "200"}, cwd=lab.jobs, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "diagnosis cuda_oom" in done.stdout
    assert "CUDA out of memory" in done.stdout
    assert lab.snapshot(old) == before  # observe: nothing on the cluster changed
    assert resubmits_of(lab, old) == []
