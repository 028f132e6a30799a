"""cluster.yaml with `backend: kubernetes`: strict like the rest, and the backend it makes
loads no client until it is first used."""

from __future__ import annotations

import subprocess
import sys

import pytest

from crashcart.agent.config import ClusterConfigError, load_cluster_config


def write(tmp_path, text):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_kubernetes_config_makes_a_kubernetes_backend(tmp_path):
    config, policy = load_cluster_config(write(tmp_path, """\
name: gpu-k8s
backend: kubernetes
kubernetes:
  connection: {kubeconfig: ~/.kube/config, context: gpu-prod}
  namespaces: [training]
  node_access: {method: daemonset, namespace: gpu-operator, selector: app=nvidia-driver-daemonset}
"""))
    backend = config.make_backend()
    assert backend.kind == "kubernetes"
    assert backend.settings.namespaces == ["training"] and backend.settings.connection.context == "gpu-prod"
    assert policy.mode == "dry_run"


@pytest.mark.parametrize("text, where", [
    ("name: x\nbackend: kubernetes\nkubernetes: {namespace: [a]}\n", "kubernetes.namespace"),
    ("name: x\nbackend: kubernetes\nkubernetes: {connection: {method: in_cluster, context: prod}}\n", "in_cluster"),
    ("name: x\nbackend: kubernetes\nkubernetes: {connection: {token: abc}}\n", "kubernetes.connection.token"),
    ("name: x\nbackend: kubernetez\n", "backend"),
])
def test_bad_kubernetes_configs_name_the_field(tmp_path, text, where):
    path = write(tmp_path, text)
    with pytest.raises(ClusterConfigError) as e:
        load_cluster_config(path)
    assert str(path) in str(e.value) and where in str(e.value)


def test_the_client_loads_lazily(tmp_path):
    path = write(tmp_path, "name: x\nbackend: kubernetes\n")
    code = ("import sys; from crashcart.agent.config import load_cluster_config; "
            f"c, _ = load_cluster_config({str(path)!r}); c.make_backend(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
