"""Real failures on a real Ray head, and the agent acting on them through Ray's APIs.

Each test makes Ray itself fail a job (an exception in the entrypoint's task, a task the
memory monitor kills, an actor whose process dies, a GPU request no node can hold),
runs the agent with the playbook policy, and reads back what the Jobs API shows afterwards.
"""

from __future__ import annotations

from raylab import RayLab, actions, new_job, run_agent

from crashcart.tools import REGISTRY

BAD_SHARD = """
import ray
ray.init()

@ray.remote
def load(path):
    with open(path) as f:
        return f.read()

print("step 1 loss 3.21", flush=True)
ray.get(load.remote("/nonexistent/data/shard-00017.parquet"))
"""

MEMORY_HOG = """
import argparse, os, sys, time
import ray
p = argparse.ArgumentParser()
p.add_argument("--resources_per_worker.memory_gb", dest="memory_gb", type=float, default=0.1)
p.add_argument("--decoded", required=True)
a = p.parse_args()
ray.init()

def used():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info[key] = int(value.split()[0])
    return 1 - info["MemAvailable"] / info["MemTotal"]

# Pinned to the node whose memory monitor is on (the head's is off): the only worker it can kill.
@ray.remote(max_retries=0, memory=int(a.memory_gb * 2**30), resources={"oom": 1})
def decode():
    # The raylet's own kill threshold (its workers inherit its environment), read now: the
    # machine is shared, so how much this task must hold to cross it is only known now. It
    # holds no more than that: the machine's other users need the rest.
    threshold = float(os.environ["RAY_memory_usage_threshold"])
    chunks = []
    while True:
        if used() < threshold:
            chunks.append(bytearray(20 * 2**20))
        time.sleep(0.01)

if os.path.exists(a.decoded):
    print("shards already decoded", flush=True)  # the rerun: the first run decoded them
    sys.exit(0)
open(a.decoded, "a").close()
print(ray.get(decode.remote()))
"""

DYING_ACTOR = """
import os
import ray
ray.init()

@ray.remote(max_restarts=0)
class Trainer:
    def step(self):
        os._exit(1)  # the worker process dies under the actor (a segfault would do the same)

t = Trainer.remote()
print("step 1 loss 2.90", flush=True)
ray.get(t.step.remote())
"""

GPU_REQUEST = """
import ray
ray.init()

@ray.remote(num_gpus=1)
def train():
    return 1

print("waiting for a GPU", flush=True)
ray.get(train.remote())
"""


def test_an_exception_in_the_entrypoint_is_diagnosed_from_the_real_traceback(ray_lab: RayLab, tmp_path):
    job = ray_lab.submit(ray_lab.script("bad_shard.py", BAD_SHARD))
    assert ray_lab.wait(job) == "FAILED"
    backend = ray_lab.backend()
    status = backend.run(REGISTRY.get("ray_job_status"), {"job": job})
    assert status.status == "FAILED" and status.row.exit_code == "1"
    assert "error_type=TASK_EXECUTION_EXCEPTION" in status.text
    before = ray_lab.snapshot(job)

    state = run_agent(backend, {"kind": "job_failed", "job": job}, tmp_path / "s.duckdb")

    # No playbook knows a missing input file: the agent says it could not tell and hands the
    # owner the real traceback lines (never "healthy", never a guess at a fix).
    diagnosis = state["diagnosis"]
    assert (diagnosis["family"], diagnosis["remedy"], diagnosis["root_cause"]) == ("user_code", "escalate_user", f"job:{job}")
    assert any("FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/data/shard-00017.parquet'" in e
               for e in diagnosis["evidence"]), diagnosis
    assert not any("\x1b[" in e for e in diagnosis["evidence"])  # Ray's terminal colours are stripped
    # A missing input file is the owner's to fix: nothing is resubmitted.
    assert [a for a in actions(state, "resubmit") if a["decision"] == "allow"] == []
    assert ray_lab.snapshot(job) == before


def test_a_task_killed_by_the_memory_monitor_is_resubmitted_with_more_memory(ray_lab: RayLab, oom_node, tmp_path):
    script = ray_lab.script("decode.py", MEMORY_HOG)
    job = ray_lab.submit(script, f"--decoded={tmp_path / 'decoded'}", "--resources_per_worker.memory_gb=0.5",
                         env={"DECODE_THREADS": "4"})
    # The task holds memory until the monitor kills it: its driver and runtime env start slowly under load.
    assert ray_lab.wait(job, timeout=240) == "FAILED"
    backend = ray_lab.backend()
    status = backend.run(REGISTRY.get("ray_job_status"), {"job": job}).text
    assert "error_type=OUT_OF_MEMORY" in status and "exit_type=NODE_OUT_OF_MEMORY" in status
    assert "OOM kill reason: Memory usage" in status  # raylet.out, the memory monitor's own words
    # Killed where it was pinned, by that node's monitor; the job's supervisor on the head has none.
    assert f"ID: {oom_node.node_id}" in status
    new = None
    try:
        state = run_agent(backend, {"kind": "job_failed", "job": job}, tmp_path / "s.duckdb")

        assert state["diagnosis"]["label"] in {"ray_worker_oom", "ray_task_oom"}, state["diagnosis"]
        new = new_job(state)
        info = ray_lab.jobs.get_job_info(new)
        # The fix is in the job Ray runs: the same script, the memory reservation doubled, the
        # environment kept, the lineage and the incident in its metadata, the key in its id.
        assert info.entrypoint == f"python {script} --decoded={tmp_path / 'decoded'} --resources_per_worker.memory_gb=1.0"
        assert info.runtime_env["env_vars"] == {"DECODE_THREADS": "4"}
        assert info.metadata["crashcart_resubmit_of"] == job
        assert info.metadata["crashcart_incident"] == state["incident_id"]
        assert new == f"{job}-cc-{info.metadata['crashcart_request']}"
        # A retry of the same request finds the job instead of submitting a second one.
        again = backend.run(REGISTRY.get("resubmit"), {"job": job, "reason": "retry",
                                                       "request_id": info.metadata["crashcart_request"],
                                                       "changes": {"resources_per_worker.memory_gb": 1.0}})
        assert again.new_job == new and again.message.startswith("Already submitted")
        assert sum(j.submission_id == new for j in ray_lab.jobs.list_jobs()) == 1
    finally:
        ray_lab.stop(new)


def test_an_actor_that_dies_is_resubmitted_once(ray_lab: RayLab, tmp_path):
    script = ray_lab.script("actor.py", DYING_ACTOR)
    job = ray_lab.submit(script, "--lr=0.0003")
    assert ray_lab.wait(job) == "FAILED"
    backend = ray_lab.backend()
    status = backend.run(REGISTRY.get("ray_job_status"), {"job": job}).text
    assert "error_type=ACTOR_DIED" in status and "Trainer" in status and "death_cause:" in status
    new = None
    try:
        state = run_agent(backend, {"kind": "job_failed", "job": job}, tmp_path / "s.duckdb")

        assert state["diagnosis"]["label"] == "ray_actor_died", state["diagnosis"]
        new = new_job(state)
        info = ray_lab.jobs.get_job_info(new)
        assert info.entrypoint == f"python {script} --lr=0.0003"  # the same job, unchanged
        history = backend.run(REGISTRY.get("job_history"), {"job": new}).rows
        assert [(r.job, r.attempt) for r in history] == [(job, 1), (new, None)]
    finally:
        ray_lab.stop(new)


def test_a_gpu_request_no_node_can_hold_is_escalated_and_the_job_left_alone(ray_lab: RayLab, tmp_path):
    job = ray_lab.submit(ray_lab.script("gpu.py", GPU_REQUEST))
    try:
        ray_lab.wait(job, "RUNNING")
        backend = ray_lab.backend()
        ray_lab.wait_for("the autoscaler's verdict in the driver log",
                         lambda: "No available node types can fulfill" in ray_lab.jobs.get_job_logs(job))
        pending = ray_lab.wait_for("the watch to see the infeasible demand", lambda: [
            r for r in backend.changes_since(backend.now(), 45).pending if r.job == job])
        assert pending[0].reason == "Infeasible"
        status = backend.run(REGISTRY.get("ray_job_status"), {"job": job}).text
        assert "state=PENDING_NODE_ASSIGNMENT" in status and "Pending Demands:" in status  # `ray status`, as Ray prints it
        never = [l for l in status.splitlines() if "no node of this cluster has the resources of" in l]
        assert len(never) == 1 and "'GPU': 1.0" in never[0], status
        scaler = backend.run(REGISTRY.get("ray_autoscaler_status"), {})
        assert "Pending Demands:" in scaler.text
        assert [(d.resources.get("GPU"), d.count) for d in scaler.autoscaler.demands] == [(1.0, 1)]

        state = run_agent(backend, {"kind": "job_pending", "job": job}, tmp_path / "s.duckdb")

        assert state["diagnosis"]["label"] == "ray_resource_request_infeasible", state["diagnosis"]
        assert [a["tool"] for a in actions(state) if a["decision"] == "allow"] == ["escalate"]
        assert backend.escalations[0]["team"] == "user"
        assert str(ray_lab.jobs.get_job_status(job).value) == "RUNNING"  # not cancelled, not resubmitted
    finally:
        ray_lab.stop(job)


def test_observe_and_dry_run_change_nothing(ray_lab: RayLab, tmp_path):
    job = ray_lab.submit(ray_lab.script("actor2.py", DYING_ACTOR))
    assert ray_lab.wait(job) == "FAILED"
    backend = ray_lab.backend()
    before = ray_lab.snapshot(job)

    watched = run_agent(backend, {"kind": "job_failed", "job": job}, tmp_path / "o.duckdb", mode="observe")
    assert watched["diagnosis"]["label"] == "ray_actor_died"
    assert {a["decision"] for a in actions(watched)} == {"deny"}
    proposed = run_agent(backend, {"kind": "job_failed", "job": job}, tmp_path / "d.duckdb", mode="dry_run")
    assert "resubmit" in {a["tool"] for a in actions(proposed)}
    assert {a["decision"] for a in actions(proposed)} == {"dry_run"}
    assert ray_lab.snapshot(job) == before
