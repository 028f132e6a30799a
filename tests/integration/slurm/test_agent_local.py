"""Real failures on a real Slurm cluster, and the agent acting on them (crashcart on the login node).

Each test makes Slurm itself fail a job (a traceback and a non-zero exit, the
kernel's OOM killer in the job's cgroup, a node set DOWN under the job, a
preemption, a requeue, an impossible request), runs the agent with the
playbook policy in autonomous mode, and reads back what Slurm shows afterwards.
"""

from __future__ import annotations

import pytest

from crashcart.tools import REGISTRY, ToolCall
from slurmlab import SlurmLab, actions, explain, new_job, run_agent

CUDA_OOM = """#!/bin/bash
# Fine-tuning that runs out of GPU memory above batch 4.
bs=8
for a in "$@"; do case $a in --batch_size=*) bs=${a#*=};; esac; done
echo "$(date -u +%Y-%m-%dT%H:%M:%S) [INFO] world_size=1 micro_batch=$bs args: $*"
if [ "$bs" -gt 4 ]; then
  cat <<'EOF'
[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/dana/sft/train.py", line 204, in main
[rank0]:     loss.backward()
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.91 GiB is free. Including non-PyTorch memory, this process has 77.20 GiB memory in use.
EOF
  exit 1
fi
echo "$(date -u +%Y-%m-%dT%H:%M:%S) step 10 loss 2.31"
"""

HOST_OOM = """#!/bin/bash
# Loads 150 MB into host memory; the job asked Slurm for less.
python3 - <<'EOF'
import time
chunks = []
for i in range(30):
    chunks.append(bytearray(5 * 1024 * 1024))
    time.sleep(0.02)
print("loaded", len(chunks) * 5, "MB")
EOF
"""

SLEEPER = """#!/bin/bash
echo "$(date -u +%Y-%m-%dT%H:%M:%S) step 1 loss 3.10"
sleep 300
"""


def test_cuda_oom_is_resubmitted_with_a_smaller_batch(lab: SlurmLab, tmp_path):
    script = lab.script("sft.sh", CUDA_OOM)
    old = lab.sbatch(script, "-J", "mistral-sft", "--gres=gpu:1", "-w", "n2", "-o", "sft-%j.out",
                     args=("--batch_size=8", "--lr=0.0001"))
    assert lab.wait_state(old, "FAILED") == "FAILED"

    state = run_agent(lab.backend(), {"kind": "job_failed", "job": old}, tmp_path / "s.duckdb")

    assert state["diagnosis"]["label"] == "cuda_oom"
    new = new_job(state)
    shown = lab.job(new)
    # The fix is in the job Slurm runs: its own script, the batch halved, the lineage recorded;
    # no key the job never had (gradient checkpointing) is added, since the script would not read it.
    assert "--batch_size=4" in shown["Command"] and "gradient_checkpointing" not in shown["Command"]
    assert "--lr=0.0001" in shown["Command"]
    assert f"crashcart: resubmit of {old}" in shown["Comment"] and state["incident_id"] in shown["Comment"]
    assert shown["JobName"] == "mistral-sft" and "gres/gpu=1" in shown["TRES"]
    assert lab.wait_state(new, "COMPLETED") == "COMPLETED"  # and with the fix it trains
    assert "step 10 loss" in (lab.jobs / f"sft-{new}.out").read_text()


def test_out_of_memory_gets_twice_the_memory(lab: SlurmLab, tmp_path):
    if lab.memory_enforcement != "cgroup":
        pytest.skip("this machine's cgroups do not let slurmd enforce memory (no writable cgroup v1 "
                    "memory controller), so Slurm cannot end a job OUT_OF_MEMORY here")
    script = lab.script("loader.sh", HOST_OOM)
    old = lab.sbatch(script, "-J", "loader", "--mem=100M", "-w", "n2", "-o", "loader-%j.out")
    assert lab.wait_state(old, "OUT_OF_MEMORY") == "OUT_OF_MEMORY"

    state = run_agent(lab.backend(), {"kind": "job_failed", "job": old}, tmp_path / "s.duckdb")

    assert state["diagnosis"]["family"] == "memory", state["diagnosis"]
    assert state["diagnosis"]["changes"] == {"mem_gb": 0.195}, explain(state)  # --mem=100M (0.0977 GiB), doubled
    new = new_job(state)
    assert lab.job(new)["MinMemoryNode"] == "200M"
    assert lab.wait_state(new, "COMPLETED") == "COMPLETED"


def test_node_down_under_a_job(lab: SlurmLab, tmp_path):
    # A node no other job ran on: one job lost with its node is node_failure.
    node = lab.reserved_node("n3")
    script = lab.script("pretrain.sh", SLEEPER)
    old = lab.sbatch(script, "-J", "pretrain", "--no-requeue", "-w", node, "-o", "pretrain-%j.out")
    lab.wait_state(old, "RUNNING")
    new = None
    try:
        lab.cli("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test: node lost power")
        assert lab.wait_state(old, "NODE_FAIL") == "NODE_FAIL"
        before = lab.snapshot(old)

        # Observe and dry-run: the same incident, and nothing on the cluster changes.
        watched = run_agent(lab.backend(), {"kind": "job_failed", "job": old}, tmp_path / "o.duckdb", mode="observe")
        assert watched["diagnosis"]["label"] == "node_failure", explain(watched)
        assert {a["decision"] for a in actions(watched)} == {"deny"}
        proposed = run_agent(lab.backend(), {"kind": "job_failed", "job": old}, tmp_path / "d.duckdb", mode="dry_run")
        assert {a["tool"] for a in actions(proposed)} >= {"node_drain", "resubmit"}
        assert {a["decision"] for a in actions(proposed)} == {"dry_run"}
        assert lab.snapshot(old) == before
        assert lab.node(node) == ("down", "test: node lost power")

        # Autonomous: a real drain naming crashcart and the incident, a real resubmit elsewhere.
        state = run_agent(lab.backend(), {"kind": "job_failed", "job": old}, tmp_path / "a.duckdb")
        assert state["diagnosis"]["root_cause"] == f"node:{node}"
        node_state, reason = lab.node(node)
        assert "drain" in node_state
        assert reason.startswith(f"crashcart {state['incident_id']}: node_failure")
        new = new_job(state)
        shown = lab.job(new)
        assert shown["ExcNodeList"] == node and shown["ReqNodeList"] == "(null)"
        assert f"crashcart: resubmit of {old}" in shown["Comment"]
        lab.wait_state(new, "RUNNING")
        assert lab.job(new)["NodeList"] != node
        assert [a["decision"] for a in actions(state, "escalate")] == ["allow"]
    finally:
        lab.cancel(new)
        lab.resume(node)


def test_preempted_job_is_resubmitted(lab: SlurmLab, tmp_path):
    script = lab.script("elastic.sh", SLEEPER)
    low = lab.sbatch(script, "-J", "elastic-sweep", "-p", "debug", "--exclusive", "-w", "n5", "-o", "el-%j.out")
    lab.wait_state(low, "RUNNING")
    urgent = new = None
    try:
        quick = lab.script("urgent.sh", "#!/bin/bash\nsleep 15\n")
        urgent = lab.sbatch(quick, "-J", "urgent-eval", "-p", "urgent", "--exclusive", "-w", "n5")
        assert lab.wait_state(low, "PREEMPTED") == "PREEMPTED"

        state = run_agent(lab.backend(), {"kind": "job_failed", "job": low}, tmp_path / "s.duckdb")

        assert state["diagnosis"]["label"] == "job_preempted"
        new = new_job(state)
        shown = lab.job(new)
        assert shown["Partition"] == "debug" and shown["ReqNodeList"] == "n5"
        assert f"crashcart: resubmit of {low}" in shown["Comment"]
        assert shown["JobState"] in {"PENDING", "RUNNING"}
    finally:
        lab.cancel(urgent, new, low)


def test_requeued_job_is_left_alone_and_its_attempts_are_counted(lab: SlurmLab, tmp_path):
    script = lab.script("requeue.sh", SLEEPER)
    job = lab.sbatch(script, "-J", "requeued", "-w", "n2", "-o", "rq-%j.out")
    lab.wait_state(job, "RUNNING")
    try:
        lab.cli("scontrol", "requeue", job)
        lab.wait_state(job, "PENDING")
        backend = lab.backend()
        history = lab.wait_for("accounting to record the requeue", lambda: [
            r for r in backend.run(REGISTRY.get("job_history"), {"job": job}).rows if r.state == "REQUEUED"])
        history = backend.run(REGISTRY.get("job_history"), {"job": job}).rows
        assert [(r.job, r.state, r.attempt) for r in history][0] == (job, "REQUEUED", 1)
        assert backend.target(ToolCall(tool="resubmit", args={"job": job})).restarts_without_progress == 1

        state = run_agent(backend, {"kind": "job_stalled", "job": job}, tmp_path / "s.duckdb")

        # Requeued and waiting to start again is Slurm doing its job: nothing to fix.
        assert [a for a in actions(state) if a["decision"] == "allow" and a["tool"] != "notify"] == []
        assert lab.job(job)["JobState"] == "PENDING" and lab.job(job)["Restarts"] == "1"
    finally:
        lab.cancel(job)


def test_pending_beyond_the_partition_limit_is_escalated_not_touched(lab: SlurmLab, tmp_path):
    script = lab.script("long.sh", SLEEPER)
    job = lab.sbatch(script, "-J", "too-long", "--time=120", "-w", "n2")
    try:
        lab.wait_for("the scheduler's verdict", lambda: lab.job(job)["Reason"] == "PartitionTimeLimit")
        backend = lab.backend()
        before = lab.snapshot(job)

        state = run_agent(backend, {"kind": "job_pending", "job": job}, tmp_path / "s.duckdb")

        assert state["diagnosis"]["family"] == "scheduling"
        assert [a["tool"] for a in actions(state)] == ["escalate"]
        assert backend.escalations and backend.escalations[0]["team"] == "user"
        assert backend.escalations[0]["incident"] == state["incident_id"]
        assert lab.snapshot(job) == before
        assert lab.job(job)["JobState"] == "PENDING"
    finally:
        lab.cancel(job)
