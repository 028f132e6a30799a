"""The cost of one Ray watch poll against 10,000 jobs the head remembers.

The Jobs API returns every job in one list_jobs call, so a poll's cost is reading that list
(and, when some demand fits no node, one state-API call for the waiting tasks) plus one driver
log per job running longer than the stall time (600 of them here). The source
here is shaped like Ray's clients (JobDetails dicts as `_client._plain` returns them, the
autoscaler's ClusterStatus, state API rows); reported, not asserted beyond correctness.
"""

import random
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from crashcart.agent.watch import WatchSettings, detect
from crashcart.tools.backends.ray import RayBackend, RaySettings

NOW = datetime.now(UTC)
STATUSES = ["SUCCEEDED"] * 80 + ["FAILED"] * 8 + ["STOPPED"] * 4 + ["RUNNING"] * 6 + ["PENDING"] * 2
HEAD = "f" * 56


class FakeRay:
    """JobSubmissionClient + state API + autoscaler status, in memory."""

    def __init__(self, jobs: int, seed: int = 7):
        rng = random.Random(seed)
        self.details = []
        for i in range(jobs):
            status = rng.choice(STATUSES)
            start = NOW - timedelta(minutes=rng.randint(2, 60 * 24 * 7))
            end = None if status in ("RUNNING", "PENDING") else min(NOW, start + timedelta(minutes=rng.randint(1, 600)))
            self.details.append({
                "type": "SUBMISSION", "job_id": f"{i + 2:08x}", "submission_id": f"raysubmit_{i:010d}",
                "status": status, "entrypoint": "python train.py --batch_size=8",
                "message": "Job entrypoint command failed with exit code 1" if status == "FAILED" else None,
                "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR" if status == "FAILED" else None,
                "start_time": int(start.timestamp() * 1000), "end_time": int(end.timestamp() * 1000) if end else None,
                "metadata": {"user": f"u{i % 300}"}, "runtime_env": {}, "driver_exit_code": 1 if status == "FAILED" else None,
                "driver_node_id": HEAD})
        gpu_job = next(d for d in self.details if d["status"] == "RUNNING")
        self.waiting = [{"job_id": gpu_job["job_id"], "state": "PENDING_NODE_ASSIGNMENT",
                         "required_resources": {"CPU": 1.0, "GPU": 1.0}}]
        self.calls = 0

    def logs(self, submission_id):
        self.calls += 1
        stamp = (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
        return "".join(f"{stamp} step {i} loss 2.31\n" for i in range(200))

    def list_jobs(self):
        self.calls += 1
        return self.details

    def state(self, kind, filters=None, limit=1000):
        self.calls += 1
        if kind == "nodes":
            return [{"node_id": HEAD, "node_name": "10.0.0.1", "node_ip": "10.0.0.1", "is_head_node": True,
                     "state": "ALIVE", "resources_total": {"CPU": 64.0, "memory": 5e11}, "labels": {}}]
        return self.waiting if kind == "tasks" else []

    def cluster_status(self):
        self.calls += 1
        bundle = SimpleNamespace(bundle={"CPU": 1.0, "GPU": 1.0}, count=1)
        return SimpleNamespace(active_nodes=[], idle_nodes=[], resource_demands=SimpleNamespace(
            ray_task_actor_demand=[SimpleNamespace(bundles_by_count=[bundle])]))


@pytest.mark.benchmark(group="watch")
def test_one_ray_watch_poll_on_10k_jobs(benchmark):
    fake = FakeRay(10_000)
    backend = RayBackend(RaySettings(), client=fake)
    since = NOW - timedelta(minutes=1)
    settings = WatchSettings()

    def poll():
        backend.forget()
        cpu = time.process_time()
        found = detect(backend.changes_since(since, stall_minutes=settings.stall_minutes), settings)
        return found, time.process_time() - cpu

    found, cpu = benchmark.pedantic(poll, rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info["cpu_seconds"] = round(cpu, 4)
    benchmark.extra_info["detections"] = len(found)
    expected_failed = {d["submission_id"] for d in fake.details if d["status"] == "FAILED"
                       and d["end_time"] > since.timestamp() * 1000}
    assert expected_failed  # the minute's failures exist, so the comparison below means something
    kinds = {d.trigger["kind"] for d in found}
    assert {d.trigger["job"] for d in found if d.trigger["kind"] == "job_failed"} == expected_failed
    assert "job_pending" in kinds  # the GPU request no node can hold
    fake.calls = 0
    poll()
    # list_jobs, list_nodes, the autoscaler's status, the waiting tasks whatever the job count,
    # and one driver log per job running longer than the stall time (the stall check).
    running = sum(d["status"] == "RUNNING" for d in fake.details)
    benchmark.extra_info["log_reads"] = fake.calls - 4
    assert 4 < fake.calls <= 4 + running
