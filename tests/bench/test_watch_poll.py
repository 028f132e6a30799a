"""The cost of one watch poll on a big cluster: 100,000 jobs of history on 2,000 nodes.

Reported in CPU seconds (the issue's bar is under 1 s of CPU per poll), with the wall time
pytest-benchmark measures. A poll here finds the handful of jobs that failed since the last
one among 100,000, and groups them into incidents; running the agent on them is not counted.
"""

import random
import time
from datetime import datetime, timedelta, timezone

import pytest

from crashcart.agent.watch import WatchSettings, detect
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.cluster import Cluster, Job, Node, ProgressPoint

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
STATES = ["COMPLETED"] * 80 + ["FAILED"] * 6 + ["CANCELLED"] * 4 + ["TIMEOUT"] * 2 + ["RUNNING"] * 6 + ["PENDING"] * 2


def big_cluster(jobs: int = 100_000, nodes: int = 2_000, seed: int = 7) -> Cluster:
    rng = random.Random(seed)
    names = [f"gpu-{i:04d}" for i in range(nodes)]
    node_list = [Node.model_construct(name=n, state="allocated", partition="h100", gpus=8, gpu_model="NVIDIA H100",
                                      labels={}, taints=[], kernel_log=None, nvidia_smi=None, gpu_telemetry=[], reason=None)
                 for n in names]
    node_list[17] = node_list[17].model_copy(update={"state": "down", "reason": "Not responding"})
    job_list = []
    for i in range(jobs):
        state = rng.choice(STATES)
        start = NOW - timedelta(minutes=rng.randint(10, 60 * 24 * 30))
        end = None if state in ("RUNNING", "PENDING") else min(NOW, start + timedelta(minutes=rng.randint(5, 3000)))
        # Running jobs report a step every few minutes; one in a few hundred has stopped.
        last = NOW - timedelta(minutes=rng.randint(1, 15) if rng.random() > 0.003 else rng.randint(60, 600))
        progress = [ProgressPoint.model_construct(time=last - timedelta(minutes=m), step=10_000 - m, loss=None,
                                                  tokens_per_sec=None) for m in (10, 5, 0)] if state == "RUNNING" else []
        job_list.append(Job.model_construct(
            id=str(1_000_000 + i), name="train", user=f"u{i % 300}", state=state, reason=None, exit_code="0:0",
            partition="h100", nodes=rng.sample(names, rng.choice([1, 1, 2, 4, 8])), gpus=8, submit_time=start,
            start_time=start, end_time=end, time_limit=None, config={}, log=None, checkpoints=[], progress=progress,
            attempts=[], depends_on=[]))
    return Cluster.model_construct(now=NOW, nodes=node_list, jobs=job_list, events=[])


@pytest.fixture(scope="module")
def backend():
    return FixtureBackend(big_cluster(), "slurm")


@pytest.mark.benchmark(group="watch")
def test_one_watch_poll_on_100k_jobs_and_2000_nodes(benchmark, backend):
    since = NOW - timedelta(minutes=1)  # the last poll was a minute ago
    settings = WatchSettings()

    def poll():
        cpu = time.process_time()
        found = detect(backend.changes_since(since, stall_minutes=settings.stall_minutes), settings)
        return found, time.process_time() - cpu

    found, cpu = benchmark.pedantic(poll, rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info["cpu_seconds"] = round(cpu, 4)
    benchmark.extra_info["detections"] = len(found)
    assert len(backend.cluster.jobs) == 100_000 and len(backend.cluster.nodes) == 2_000
    assert found  # the minute's failures, the stalled jobs and the down node
