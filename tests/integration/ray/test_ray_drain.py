"""node_drain on a real Ray head: the GCS DrainNode call `ray drain-node` makes, seen as
DRAINING by the autoscaler; node_resume says honestly that Ray cannot undo it. The head runs
"under KubeRay": the project's loopback Kubernetes API server (tests/harness/kube_apiserver.py)
holds the node and the head pod (its podIP is the Ray node's IP), so the drain also cordons
that Kubernetes node and the kubectl_* tools answer from it.

A drained node takes no new work, so this test drains a head of its own, not the shared one.
(A second node cannot join a loopback-only head: with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
Ray refuses multi-node clusters, and with 1 it binds the machine's external address.)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from raylab import RayLab, kubernetes_settings

from crashcart.tools import REGISTRY, ToolCall, ToolError
from crashcart.tools.backends.base import acting_for


@pytest.fixture(scope="module")
def own_head(ray_lab: RayLab) -> RayLab:
    import ray_local

    root = Path(tempfile.mkdtemp(prefix="crashcart-ray-drain-"))
    try:
        head = ray_local.up(root)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield RayLab(head=head, scripts=root / "scripts")
    finally:
        ray_local.down(root)
        shutil.rmtree(root, ignore_errors=True)
        ray_lab.__post_init__()  # the shared head's client settings again


def test_drain_a_node_through_the_gcs_and_cordon_its_kubernetes_node(own_head: RayLab, kuberay):
    from crashcart.tools.backends.ray import RayBackend

    server, kubernetes = kuberay
    backend = RayBackend(own_head.settings().model_copy(update={"kubernetes": kubernetes_settings(kubernetes)}))
    assert [r.node for r in backend.run(REGISTRY.get("kubectl_get_nodes"), {}).rows] == ["gpu-a01"]
    listed = backend.run(REGISTRY.get("ray_list_nodes"), {})
    assert [r.state for r in listed.rows] == ["idle"] and "ALIVE" in listed.text
    node = listed.rows[0].node
    target = backend.target(ToolCall(tool="node_drain", args={"node": node}))
    assert target.partition == "head" and target.partition_nodes == 1 and not target.node_unavailable

    with acting_for("inc-test-drain"):
        out = backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "xid 79 on GPU 3"})
    assert "accepted" in out.message and "crashcart inc-test-drain: xid 79 on GPU 3" in out.message
    assert "node/gpu-a01 cordoned (it runs pod ray/raycluster-train-head-7xk2p" in out.message
    k8s_node = server.store.get(server.store.resource_of("v1", "Node"), None, "gpu-a01")
    assert k8s_node["spec"]["unschedulable"] is True
    assert k8s_node["metadata"]["annotations"]["crashcart.io/incident"] == "inc-test-drain"
    # Cordoned, not drained: the Ray pod is left to Ray's own drain, never evicted.
    assert server.store.get(server.store.resource_of("v1", "Pod"), "ray", "raycluster-train-head-7xk2p")
    backend.forget()
    # An idle node drains at once: its raylet exits and Ray records why.
    after = own_head.wait_for("the node to leave service", lambda: backend.forget() or (
        backend.node(node) if backend.node(node).ray_state in ("DRAINING", "DEAD") else None))
    assert after.state in ("draining", "down"), after
    if after.state == "down":
        assert "crashcart inc-test-drain: xid 79 on GPU 3" in (after.message or ""), after.message
        with pytest.raises(ToolError, match="there is nothing to drain"):
            backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "again"})
    else:
        again = backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "again"})
        assert "already DRAINING" in again.message
    with pytest.raises(ToolError, match="no call that undoes a drain"):
        backend.run(REGISTRY.get("node_resume"), {"node": node, "reason": "fixed"})
    with pytest.raises(ToolError, match="is not in this Ray cluster"):
        backend.run(REGISTRY.get("node_drain"), {"node": "gpu-b07", "reason": "typo"})
