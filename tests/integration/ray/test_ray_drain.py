"""node_drain on a real Ray head: the GCS DrainNode call `ray drain-node` makes, seen as
DRAINING by the autoscaler; node_resume says honestly that Ray cannot undo it.

A drained node takes no new work, so this test drains a head of its own, not the shared one.
(A second node cannot join a loopback-only head: with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
Ray refuses multi-node clusters, and with 1 it binds the machine's external address.)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from raylab import RayLab

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


def test_drain_a_node_through_the_gcs(own_head: RayLab):
    backend = own_head.backend()
    listed = backend.run(REGISTRY.get("ray_list_nodes"), {})
    assert [r.state for r in listed.rows] == ["idle"] and "ALIVE" in listed.text
    node = listed.rows[0].node
    target = backend.target(ToolCall(tool="node_drain", args={"node": node}))
    assert target.partition == "head" and target.partition_nodes == 1 and not target.node_unavailable

    with acting_for("inc-test-drain"):
        out = backend.run(REGISTRY.get("node_drain"), {"node": node, "reason": "xid 79 on GPU 3"})
    assert "accepted" in out.message and "crashcart inc-test-drain: xid 79 on GPU 3" in out.message
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
