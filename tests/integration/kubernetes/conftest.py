"""The loopback Kubernetes API server (tests/harness/kube_apiserver.py), started once per
session; each test gets an empty cluster and a KubernetesBackend that reaches it the way a
user's would: the official client, a kubeconfig file and its context.

No kube-apiserver can be installed on the test machines, so nothing here skips: the
server is the project's own and needs only the standard library (the official client
comes with the `test` extra).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kube_apiserver import KubeApiServer, Store  # noqa: E402

pytestmark = pytest.mark.kubernetes


class Lab:
    """A test's cluster: add objects as kubectl would create them, read them back raw."""

    def __init__(self, server: KubeApiServer, kubeconfig: Path):
        self.server = server
        self.store: Store = server.store
        self.kubeconfig = kubeconfig

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        res = self.store.resource_of(obj["apiVersion"], obj["kind"])
        created = self.store.create(res, obj["metadata"].get("namespace"), obj)
        if created["kind"] == "Job" and created["apiVersion"] == "batch/v1":
            uid = created["metadata"]["uid"]
            text = json.dumps(created).replace("PLACEHOLDER", uid)
            created = self.store.replace(res, created["metadata"]["namespace"], created["metadata"]["name"], json.loads(text))
        return created

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self.store.get(self.store.resource_of(api_version, kind), namespace, name)

    def all(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.store.items(self.store.resource_of(api_version, kind), namespace)

    def update(self, obj: dict[str, Any], fn) -> dict[str, Any]:
        res = self.store.resource_of(obj["apiVersion"], obj["kind"])
        return self.store.patch(res, obj["metadata"].get("namespace"), obj["metadata"]["name"], fn)

    def snapshot(self) -> str:
        """Every object as stored: equal snapshots mean nothing changed."""
        return json.dumps(sorted(self.store.objects.items()), sort_keys=True, default=str)

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _, _ in self.store.requests if m != "GET"]

    def settings(self, **overrides):
        from crashcart.tools.backends.kubernetes import KubernetesSettings

        data = {"connection": {"kubeconfig": str(self.kubeconfig), "context": "loopback"},
                "drain": {"eviction_timeout_seconds": 3, "retry_seconds": 0.5}, **overrides}
        return KubernetesSettings.model_validate(data)

    def backend(self, **overrides):
        from crashcart.tools.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(self.settings(**overrides))


@pytest.fixture(scope="session")
def kube_server():
    server = KubeApiServer().start()
    yield server
    server.stop()


@pytest.fixture
def lab(kube_server, tmp_path) -> Lab:
    kube_server.store = Store()
    kubeconfig = tmp_path / "kubeconfig"
    # A kubeconfig like any other (plain HTTP on loopback, so no credentials). Its current
    # context leads nowhere: every test reaches the server only because the settings name
    # the `loopback` context.
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: loopback
  cluster:
    server: {kube_server.url}
- name: nowhere
  cluster:
    server: http://127.0.0.1:1
contexts:
- name: loopback
  context: {{cluster: loopback, user: crashcart, namespace: default}}
- name: elsewhere
  context: {{cluster: nowhere, user: crashcart}}
current-context: elsewhere
users:
- name: crashcart
  user: {{}}
""")
    return Lab(kube_server, kubeconfig)
