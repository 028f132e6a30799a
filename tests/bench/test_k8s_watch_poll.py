"""The cost of one `crashcart watch` poll on a big Kubernetes cluster: 10,000 pods on 2,000
nodes, served by the loopback API server (tests/harness/kube_apiserver.py) to the official client.

Two polls are measured: the first (a full list of pods and nodes) and a later one (a watch
from the list's resourceVersion that brings the few pods that changed). The server runs in
this process, so the CPU seconds reported include its JSON encoding as well as the client's
decoding; the wall time of a later poll is mostly the watch window (watch_seconds) itself.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "kubernetes"))

import kubeseed as k  # noqa: E402
from kube_apiserver import KubeApiServer, Store  # noqa: E402

PODS, NODES = 10_000, 2_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    store = Store()
    nodes, pods = store.resource_of("v1", "Node"), store.resource_of("v1", "Pod")
    for i in range(NODES):
        store.create(nodes, None, k.node(f"gpu-{i:04d}", ready=i != 17))
    template = k.pod("x", state=None)
    for i in range(PODS):
        p = {**template, "metadata": {**template["metadata"], "name": f"train-{i:05d}", "namespace": f"team-{i % 40}"},
             "spec": {**template["spec"], "nodeName": f"gpu-{i % NODES:04d}"}}
        store.create(pods, p["metadata"]["namespace"], p)
    server = KubeApiServer(store).start()
    kubeconfig = tmp_path_factory.mktemp("kube") / "kubeconfig"
    kubeconfig.write_text(f"apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{server.url}'}}}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n")
    yield server, kubeconfig
    server.stop()


def _backend(kubeconfig):
    from crashcart.tools.backends.kubernetes import KubernetesBackend, KubernetesSettings

    return KubernetesBackend(KubernetesSettings.model_validate({"connection": {"kubeconfig": str(kubeconfig)}}))


@pytest.mark.benchmark(group="watch")
def test_one_kubernetes_watch_poll_on_10k_pods_and_2000_nodes(benchmark, cluster):
    server, kubeconfig = cluster
    b = _backend(kubeconfig)

    def first_poll():
        b.informer.pods.rv = b.informer.nodes.rv = None  # a fresh watcher lists
        cpu, wall = time.process_time(), time.perf_counter()
        changes = b.changes_since(b.now() - timedelta(minutes=1), 45)
        return changes, time.process_time() - cpu, time.perf_counter() - wall

    changes, cpu, wall = benchmark.pedantic(first_poll, rounds=3, iterations=1, warmup_rounds=1)
    assert len(b.informer.pods.objects) == PODS and len(b.informer.nodes.objects) == NODES
    assert [n.node for n in changes.nodes_down] == ["gpu-0017"]

    pods = server.store.resource_of("v1", "Pod")
    for i in range(5):
        server.store.patch(pods, f"team-{i % 40}", f"train-{i:05d}", lambda o: o["status"].update(
            phase="Failed", containerStatuses=[{**o["status"]["containerStatuses"][0], "state": k.terminated(
                "OOMKilled", 137, k.ago(minutes=5), k.ago(seconds=3))}]))
    cpu2, wall2 = time.process_time(), time.perf_counter()
    later = b.changes_since(b.now() - timedelta(minutes=1), 45)
    cpu2, wall2 = time.process_time() - cpu2, time.perf_counter() - wall2
    assert sorted(r.job for r in later.failed) == [f"train-{i:05d}" for i in range(5)]
    benchmark.extra_info.update(first_poll_cpu_seconds=round(cpu, 3), first_poll_wall_seconds=round(wall, 3),
                                later_poll_cpu_seconds=round(cpu2, 3), later_poll_wall_seconds=round(wall2, 3))
    print(f"\nkubernetes watch poll, {PODS} pods / {NODES} nodes: first (list) {wall:.2f} s wall, {cpu:.2f} s CPU; "
          f"later (watch) {wall2:.2f} s wall, {cpu2:.2f} s CPU")
