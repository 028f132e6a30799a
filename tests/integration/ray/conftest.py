"""A real local Ray head on loopback, started once per test session.

tests/harness/ray_local.py starts `ray start --head --block` in a session of its own
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, 2 CPUs, a 100 MB object store, no memory monitor) and stops it by that session's pids,
never with `ray stop`. Every head's directory names the test session owning it: the first
head of a session first stops what killed sessions left (ray_local.reap). The tests skip when Ray is not installed, except when the CI
environment variable is set: then they fail, so a CI run without a real head cannot pass.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"
sys.path.insert(0, str(HARNESS))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kubernetes"))  # kubeseed, for KubeRay

from raylab import RayLab  # noqa: E402

pytestmark = pytest.mark.ray


def unavailable(reason: str) -> None:
    """Skip here, fail in CI: CI must never pass without running these."""
    if os.environ.get("CI", "").lower() not in {"", "0", "false", "no"}:
        pytest.fail(f"real-Ray integration tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def ray_lab() -> RayLab:
    if importlib.util.find_spec("ray") is None or not Path(sys.executable).with_name("ray").exists():
        unavailable("Ray is not installed in this environment (pip install -e '.[test]' installs ray[default])")
    import owner
    import ray_local

    # Heads of earlier sessions killed before their teardown: their processes and ports.
    ray_local.reap()
    root = Path(tempfile.mkdtemp(prefix="crashcart-ray-"))
    owner.claim(root)
    try:
        # No memory monitor on the shared head (ray_local's default): its threshold is the whole
        # machine's, and others' use crossing it killed these tests' workers. The OOM test joins
        # a node of its own with one (oom_node).
        head = ray_local.up(root)
    except RuntimeError as e:
        ray_local.down(root)
        shutil.rmtree(root, ignore_errors=True)
        # Installed but not starting is a bug in the harness or the machine: never a skip.
        pytest.fail(str(e), pytrace=False)
    lab = RayLab(head=head, scripts=root / "scripts")
    try:
        yield lab
    finally:
        ray_local.down(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def oom_node(ray_lab: RayLab):
    """A worker node joined to the shared head with Ray's memory monitor on (its threshold just
    above what the machine uses now) and a resource `oom` only it offers: a task pinned there is
    the only worker its monitor can kill; the job's supervisor and driver stay on the head."""
    import owner
    import ray_local

    root = Path(tempfile.mkdtemp(prefix="crashcart-ray-oom-"))
    owner.claim(root)
    try:
        node = ray_local.join(ray_lab.head, root / "node", "oom-node", num_cpus=1, resources={"oom": 1},
                              memory_monitor=True)
    except RuntimeError as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(str(e), pytrace=False)
    try:
        yield node
    finally:
        # Drained before it stops: the shared head then records a planned departure, not a lost
        # node for a later test's watch to report. Idle, it leaves at once; then nothing of its
        # session needs a graceful stop.
        try:
            ray_lab.backend().client.drain(node.node_id, "crashcart test teardown: drained, then stopped", 0)
            ray_lab.wait_for("the drained node to leave", lambda: not ray_local.alive(ray_lab.head, node.node_id), timeout=20)
        finally:
            ray_local.kill(root / "node")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def kuberay(tmp_path):
    """A loopback API server with one GPU node running a KubeRay head pod at 127.0.0.1."""
    from kube_apiserver import KubeApiServer
    from kubeseed import node, pod

    server = KubeApiServer().start()
    store = server.store
    store.create(store.resource_of("v1", "Node"), None, node("gpu-a01"))
    head = pod("raycluster-train-head-7xk2p", namespace="ray", node_name="gpu-a01",
               labels={"ray.io/is-ray-node": "yes", "ray.io/node-type": "head", "ray.io/cluster": "raycluster-train"})
    head["status"].update(podIP="127.0.0.1", podIPs=[{"ip": "127.0.0.1"}])
    store.create(store.resource_of("v1", "Pod"), "ray", head)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: loopback, cluster: {{server: "{server.url}"}}}}]
contexts: [{{name: loopback, context: {{cluster: loopback, user: crashcart}}}}]
current-context: loopback
users: [{{name: crashcart, user: {{}}}}]
""")
    try:
        yield server, {"connection": {"kubeconfig": str(kubeconfig), "context": "loopback"}}
    finally:
        server.stop()
