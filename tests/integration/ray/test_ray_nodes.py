"""More than one Ray node: a worker joins this module's own head on 127.0.0.1
(tests/harness/ray_local.py `join`: its own raylet, object store and workers, in a session of
its own) and work is pinned to it by a custom resource. Then it dies under a job (every process
of its session SIGKILLed: a machine lost), or crashcart drains it while a job runs: the GCS
DrainNode call `ray drain-node` makes, seen as DRAINING by the autoscaler, the job left to
finish, the node gone once idle with crashcart's reason; node_resume says honestly that Ray
cannot undo a drain. The cluster also runs "under KubeRay": the project's loopback Kubernetes
API server holds the node and a Ray pod whose podIP is the Ray nodes' IP, so the drain also
cordons that Kubernetes node.

The head is the module's own (the shared head never sees a dead or drained node), with Ray's
GCS health checks shortened so that a dead node is marked DEAD in seconds, not half a minute.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from raylab import RayLab, kubernetes_settings, new_job, run_agent

from crashcart.tools import REGISTRY, ToolCall, ToolError
from crashcart.tools.backends.base import acting_for

ON_SPOT = """
import time, ray
ray.init()

@ray.remote(resources={"spot": 1}, max_retries=0)
def shard(i):
    for s in range(600):
        print(f"step {s} loss 2.5", flush=True)
        time.sleep(1)

print("training on the spot node", flush=True)
ray.get(shard.remote(0))
"""
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
                      "RAY_health_check_initial_delay_ms": "1000",
                      # No memory monitor: its threshold is the whole machine's, and on a shared
                      # machine others' use crossing it made it kill these tests' job supervisors.
                      "RAY_memory_monitor_refresh_ms": "0"}


@pytest.fixture(scope="module")
def cluster(ray_lab: RayLab):
    import owner
    import ray_local

    root = Path(tempfile.mkdtemp(prefix="crashcart-ray-nodes-"))
    owner.claim(root)
    nodes: list[Path] = []
    try:
        head = ray_local.up(root / "head", extra_env=FAST_HEALTH_CHECKS)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    lab = RayLab(head=head, scripts=root / "scripts")

    def join(name: str):
        nodes.append(root / name)
        try:
            return ray_local.join(head, root / name, name, num_cpus=1, resources={"spot": 1})
        except RuntimeError as e:
            pytest.fail(str(e), pytrace=False)

    try:
        yield lab, join
    finally:
        for node in nodes:
            ray_local.kill(node)
        ray_local.down(root / "head")
        shutil.rmtree(root, ignore_errors=True)
        ray_lab.__post_init__()  # the shared head's client settings again


def _on_the_node(lab: RayLab, job: str) -> None:
    # A job's runtime env and driver start slowly on a loaded 2-core machine.
    lab.wait_for("the task to run on the spot node", lambda: "step 2 loss" in lab.jobs.get_job_logs(job), timeout=150)


def test_a_node_that_dies_under_a_job_is_seen_and_the_job_rerun_on_a_replacement(cluster, tmp_path):
    import ray_local

    lab, join = cluster
    spot = join("spot-a")
    backend = lab.backend()
    listed = {r.node: r for r in backend.run(REGISTRY.get("ray_list_nodes"), {}).rows}
    # The live ones: the GCS keeps listing a node an earlier test drained, as down.
    assert {n for n, r in listed.items() if r.state != "down"} == {"127.0.0.1", "spot-a"}
    assert listed["spot-a"].partition == "worker"
    job = lab.submit(lab.script("on_spot.py", ON_SPOT))
    _on_the_node(lab, job)
    backend.forget()
    assert backend.node("spot-a").state == "allocated"
    before = backend.now()

    ray_local.kill(spot.dir)  # the machine is gone: no process of the node shuts down cleanly

    assert lab.wait(job) == "FAILED"
    dead = lab.wait_for("the GCS to mark the node dead", lambda: backend.forget() or (
        backend.node(spot.node_id) if backend.node(spot.node_id).state == "down" else None))
    # Ray's words for a node it lost (here its health check's: "... missing too many heartbeats").
    assert (dead.message or "").startswith("Unexpected termination: "), dead.message
    changes = backend.changes_since(before - timedelta(seconds=1), stall_minutes=45)
    assert [r.job for r in changes.failed] == [job]
    assert [(n.node, n.state) for n in changes.nodes_down] == [("spot-a", "down")]
    status = backend.run(REGISTRY.get("ray_job_status"), {"job": job})
    # The driver's NodeDiedError, whose words end with where to look for the node's death.
    assert "To see node death information, use `ray list nodes --filter node_id=" in status.text, status.text

    join("spot-b")  # the replacement node the autoscaler would bring
    new = None
    try:
        state = run_agent(backend, {"kind": "job_failed", "job": job}, tmp_path / "s.duckdb")
        assert state["diagnosis"]["label"] == "ray_node_died", state["diagnosis"]
        new = new_job(state)
        _on_the_node(lab, new)  # the same job runs again, on the node that replaced the dead one
        assert lab.jobs.get_job_info(new).entrypoint == lab.jobs.get_job_info(job).entrypoint
    finally:
        lab.stop(new)


def test_drain_a_worker_under_a_job_through_the_gcs_and_cordon_its_kubernetes_node(cluster, kuberay):
    from crashcart.tools.backends.ray import RayBackend

    lab, join = cluster
    server, kubernetes = kuberay
    backend = RayBackend(lab.settings().model_copy(update={"kubernetes": kubernetes_settings(kubernetes)}))
    assert [r.node for r in backend.run(REGISTRY.get("kubectl_get_nodes"), {}).rows] == ["gpu-a01"]
    # The spot node the test before left running, else a new one.
    spot = next((n for n in backend.nodes() if n.state != "down" and n.resources.get("spot")), None) or join("spot-c")
    node = spot.node_id
    target = backend.target(ToolCall(tool="node_drain", args={"node": node}))
    assert target.partition == "worker" and not target.node_unavailable
    job = lab.submit(lab.script("on_spot_drained.py", ON_SPOT))
    try:
        _on_the_node(lab, job)
        before = backend.now()
        with acting_for("inc-test-drain"):
            out = backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "xid 79 on GPU 3"})
        assert "accepted" in out.message and "crashcart inc-test-drain: xid 79 on GPU 3" in out.message
        assert "node/gpu-a01 cordoned (it runs pod ray/raycluster-train-head-7xk2p" in out.message
        k8s_node = server.store.get(server.store.resource_of("v1", "Node"), None, "gpu-a01")
        assert k8s_node["spec"]["unschedulable"] is True
        assert k8s_node["metadata"]["annotations"]["crashcart.io/incident"] == "inc-test-drain"
        # Cordoned, not drained: the Ray pod is left to Ray's own drain, never evicted.
        assert server.store.get(server.store.resource_of("v1", "Pod"), "ray", "raycluster-train-head-7xk2p")
        lab.wait_for("the autoscaler to report the node DRAINING", lambda: backend.forget() or (
            backend.node(node).state == "draining"))
        assert "already DRAINING" in backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "again"}).message
        # A drain lets running work finish: the job still runs and still logs.
        assert str(lab.jobs.get_job_status(job).value) == "RUNNING"
        logged = lab.jobs.get_job_logs(job).count("loss 2.5")
        lab.wait_for("the job to keep logging", lambda: lab.jobs.get_job_logs(job).count("loss 2.5") > logged)
    finally:
        lab.stop(job)
    gone = lab.wait_for("the drained node to leave once idle", lambda: backend.forget() or (
        backend.node(node) if backend.node(node).state == "down" else None))
    assert "crashcart inc-test-drain: xid 79 on GPU 3" in (gone.message or ""), gone.message
    assert node not in {n.node for n in backend.changes_since(before, stall_minutes=45).nodes_down}  # planned
    with pytest.raises(ToolError, match="there is nothing to drain"):
        backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "again"})
    with pytest.raises(ToolError, match="no call that undoes a drain"):
        backend.run(REGISTRY.get("node_resume"), {"node": node, "reason": "fixed"})
    with pytest.raises(ToolError, match="is not in this Ray cluster"):
        backend.run(REGISTRY.get("node_drain"), {"node": "gpu-b07", "reason": "typo"})
