"""deploy/kubernetes: the read-only base cannot change anything, the `act` overlay grants the
write verbs the backend really uses for the tools its guard permits, and the configs load."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import kubeseed as k
from crashcart.agent.config import load_cluster_config
from crashcart.agent.guard import load_policy
from crashcart.tools._spec import REGISTRY
from crashcart.tools.backends.base import acting_for

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"
WRITE_TOOLS = {"node_drain", "node_resume", "resubmit", "cancel_job"}
_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<plural>[^/]+)(?:/[^/]+(?:/(?P<sub>[^/]+))?)?$")
_VERB = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}


def rules(path: Path) -> list[dict]:
    return [r for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] == "ClusterRole" for r in doc["rules"]]


def allowed(rule_list: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rule_list)


def test_base_is_read_only_and_its_configs_load():
    verbs = {v for r in rules(DEPLOY / "base" / "rbac-read.yaml") for v in r["verbs"]}
    assert verbs == {"get", "list", "watch"}
    config, policy = load_cluster_config(DEPLOY / "base" / "cluster.yaml")
    assert config.backend == "kubernetes" and config.kubernetes.connection.method == "in_cluster"
    assert policy.mode == "dry_run"
    assert not {p.tool for p in policy.permissions} & WRITE_TOOLS
    assert {p.tool for p in load_policy(DEPLOY / "act" / "guard.yaml").permissions} >= WRITE_TOOLS


def test_act_grants_every_write_request_the_backend_makes(lab):
    lab.store.install_crd("pytorchjobs")
    for n in ("gpu-a01", "gpu-a02"):
        lab.add(k.node(n))
    j = lab.add(k.job("ft"))
    lab.add(k.pod("ft-abcde", owner=j, phase="Failed", state=k.terminated("Error", 1, k.ago(minutes=3), k.ago(minutes=1))))
    pj = lab.add(k.pytorchjob("llama"))
    lab.add(k.pod("llama-worker-0", owner=pj, node_name="gpu-a02"))
    lab.add(k.pod("solo", node_name="gpu-a01"))
    b = lab.backend()
    calls = [("resubmit", {"job": "ft-abcde", "changes": {"batch_size": 8}}), ("cancel_job", {"job": "llama-worker-0"}),
             ("resubmit", {"job": "solo"}), ("node_drain", {"node": "gpu-a01"}), ("node_resume", {"node": "gpu-a01"})]
    with acting_for("inc-1"):
        for tool, args in calls:
            assert b.run(REGISTRY.get(tool), {**args, "reason": "test"}).ok
    granted = [*rules(DEPLOY / "base" / "rbac-read.yaml"), *rules(DEPLOY / "act" / "rbac-write.yaml")]
    writes = lab.writes()
    assert {m for m, _ in writes} == {"POST", "PATCH", "DELETE"}
    for method, path in writes:
        m = _PATH.match(path)
        resource = m["plural"] + (f"/{m['sub']}" if m["sub"] else "")
        assert allowed(granted, m["group"] or "", resource, _VERB[method]), f"{method} {path} is not granted"
