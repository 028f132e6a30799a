"""Write tools of the kubernetes backend: what they change on the API server, exactly."""

from __future__ import annotations

import threading
import time

import pytest

import kubeseed as k
from crashcart.tools._spec import REGISTRY, ToolCall, ToolError
from crashcart.tools.backends.base import acting_for


def run(backend, tool: str, **args):
    return backend.run(REGISTRY.get(tool), args)


def test_drain_cordons_evicts_and_names_the_incident(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("train-0", node_name="gpu-a01"))
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-dcgm-exporter", "uid": "d5"}}
    lab.add(k.pod("dcgm-exporter-x2x", namespace="gpu-operator", node_name="gpu-a01", owner=ds))
    with acting_for("inc-42"):
        out = run(lab.backend(), "node_drain", node="gpu-a01", reason="Xid 79: GPU fell off the bus")
    assert out.ok, out.message
    node = lab.get("v1", "Node", None, "gpu-a01")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["crashcart.io/incident"] == "inc-42"
    assert node["metadata"]["annotations"]["crashcart.io/cordon-reason"] == "Xid 79: GPU fell off the bus"
    assert [p["metadata"]["name"] for p in lab.all("v1", "Pod")] == ["dcgm-exporter-x2x"]  # DaemonSet pods stay
    assert [p for m, p in lab.writes() if m == "POST"] == ["/api/v1/namespaces/train/pods/train-0/eviction"]


def test_drain_blocked_by_a_pdb_waits_and_never_forces(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("serve-0", node_name="gpu-a01", labels={"app": "serve"}))
    lab.add(k.pdb("serve-pdb", "train", {"app": "serve"}, allowed=0))
    started = time.monotonic()
    out = run(lab.backend(), "node_drain", node="gpu-a01", reason="ECC")
    assert not out.ok and time.monotonic() - started >= 2.5  # waited out the 3 s budget
    assert "The disruption budget serve-pdb needs 1 healthy pods" in out.message and "will not force" in out.message
    assert [p["metadata"]["name"] for p in lab.all("v1", "Pod")] == ["serve-0"]
    evictions = [p for m, p in lab.writes() if p.endswith("/eviction")]
    assert len(evictions) >= 3 and not [p for m, p in lab.writes() if m == "DELETE"]
    assert lab.get("v1", "Node", None, "gpu-a01")["spec"]["unschedulable"] is True


def test_drain_goes_on_when_the_budget_allows_again(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("serve-0", node_name="gpu-a01", labels={"app": "serve"}))
    budget = lab.add(k.pdb("serve-pdb", "train", {"app": "serve"}, allowed=0))
    # The budget allows again once the drain has been refused at least once, however slow the machine.
    def allow_after_a_refusal():
        deadline = time.monotonic() + 60
        while not any(p.endswith("/eviction") for _, p in lab.writes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        lab.update(budget, lambda o: o["status"].update(disruptionsAllowed=1))
    allower = threading.Thread(target=allow_after_a_refusal)
    allower.start()
    out = run(lab.backend(drain={"eviction_timeout_seconds": 60, "retry_seconds": 0.3}), "node_drain", node="gpu-a01", reason="ECC")
    allower.join()
    assert out.ok and "node/gpu-a01 drained" in out.message
    assert lab.all("v1", "Pod") == []


def test_resume_uncordons(lab):
    lab.add(k.node("gpu-a01", unschedulable=True))
    out = run(lab.backend(), "node_resume", node="gpu-a01", reason="fixed")
    assert out.ok and "unschedulable" not in lab.get("v1", "Node", None, "gpu-a01")["spec"]


@pytest.fixture
def failed_job(lab):
    for n in ("gpu-a01", "gpu-a02"):
        lab.add(k.node(n))
    j = lab.add(k.job("llama-ft", c=k.container(memory="32Gi", args=["--batch_size=32", "--lr=3e-4"])))
    lab.add(k.pod("llama-ft-7xk2p", owner=j, phase="Failed", state=k.terminated("OOMKilled", 137, k.ago(minutes=9), k.ago(minutes=1))))
    return j


def test_resubmit_recreates_the_job_from_its_manifest_with_changes(lab, failed_job):
    with acting_for("inc-7"):
        out = run(lab.backend(), "resubmit", job="llama-ft-7xk2p", reason="OOMKilled at 32Gi",
                  changes={"memory_limit_gi": 64, "batch_size": 16, "env.NCCL_SOCKET_IFNAME": "eth0", "shm_size": "16Gi",
                           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
                  exclude_nodes=["gpu-a01"], request_id="req-1")
    assert out.ok and out.new_job == "llama-ft-r1"
    new = lab.get("batch/v1", "Job", "train", "llama-ft-r1")
    meta, spec = new["metadata"], new["spec"]["template"]["spec"]
    assert meta["annotations"]["crashcart.io/resubmit-of"] == "llama-ft"
    assert meta["annotations"]["crashcart.io/incident"] == "inc-7"
    assert "selector" not in new["spec"] and "controller-uid" not in new["spec"]["template"]["metadata"]["labels"]
    c = spec["containers"][0]
    assert c["resources"]["limits"]["memory"] == "64Gi"
    assert c["resources"]["requests"]["memory"] == "32Gi"  # the request may stay below the raised limit
    assert c["args"] == ["--batch_size=16", "--lr=3e-4"]
    assert {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"} in c["env"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec["volumes"]
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-a01"]}]}]
    # The original is untouched.
    assert lab.get("batch/v1", "Job", "train", "llama-ft")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "32Gi"


def test_a_retried_resubmit_finds_the_first(lab, failed_job):
    b = lab.backend()
    first = run(b, "resubmit", job="llama-ft-7xk2p", reason="x", request_id="req-9")
    again = run(b, "resubmit", job="llama-ft-7xk2p", reason="x", request_id="req-9")
    assert again.new_job == first.new_job and "Already submitted" in again.message
    assert sorted(j["metadata"]["name"] for j in lab.all("batch/v1", "Job")) == ["llama-ft", "llama-ft-r1"]
    other = run(b, "resubmit", job="llama-ft-r1", reason="x", request_id="req-10")
    assert other.new_job == "llama-ft-r2"  # counted against the original name
    assert [r.job for r in run(b, "job_history", job="llama-ft-r2").rows][:1] == ["llama-ft-7xk2p"]


def test_resubmit_of_a_bare_pod_and_of_a_pytorchjob(lab):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("solo", phase="Failed", state=k.terminated("Error", 1, k.ago(minutes=5), k.ago(minutes=1))))
    b = lab.backend()
    out = run(b, "resubmit", job="solo", reason="x", changes={"env.NCCL_IB_DISABLE": "1"})
    new = lab.get("v1", "Pod", "train", out.new_job)
    assert out.new_job == "solo-r1" and "nodeName" not in new["spec"] and new["status"]["phase"] == "Pending"
    lab.store.install_crd("pytorchjobs")
    pj = lab.add(k.pytorchjob("llama", workers=2))
    lab.add(k.pod("llama-worker-0", owner=pj, phase="Failed", state=k.terminated("Error", 1, k.ago(minutes=5), k.ago(minutes=1))))
    out = run(b, "resubmit", job="llama-worker-0", reason="x", changes={"batch_size": 8})
    specs = lab.get("kubeflow.org/v1", "PyTorchJob", "train", "llama-r1")["spec"]["pytorchReplicaSpecs"]
    assert [s["template"]["spec"]["containers"][0]["args"][0] for s in specs.values()] == ["--batch_size=8"] * 2


def test_resubmit_refuses_what_it_cannot_place(lab, failed_job):
    b = lab.backend()
    with pytest.raises(ToolError, match="crashcart does not change 'replicas'"):
        run(b, "resubmit", job="llama-ft-7xk2p", reason="x", changes={"replicas": 4})
    with pytest.raises(ToolError, match="memory_limit_gi must be a number"):
        run(b, "resubmit", job="llama-ft-7xk2p", reason="x", changes={"memory_limit_gi": "lots"})
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-5d8f", "uid": "r1"}}
    lab.add(k.pod("web-5d8f-abc12", owner=rs, phase="Failed", state=k.terminated("Error", 1, k.ago(minutes=2), k.ago(minutes=1))))
    with pytest.raises(ToolError, match="belongs to ReplicaSet web-5d8f"):
        run(b, "resubmit", job="web-5d8f-abc12", reason="x")
    assert sorted(j["metadata"]["name"] for j in lab.all("batch/v1", "Job")) == ["llama-ft"]


def test_cancel_deletes_the_workload_with_its_pods(lab):
    lab.add(k.node("gpu-a01"))
    j = lab.add(k.job("etl"))
    lab.add(k.pod("etl-abcde", owner=j))
    with acting_for("inc-3"):
        out = run(lab.backend(), "cancel_job", job="etl-abcde", reason="stuck")
    assert out.ok and "propagation Background" in out.message
    assert lab.all("batch/v1", "Job") == [] and lab.all("v1", "Pod") == []
    deletes = [body for m, p, _, body in lab.store.requests if m == "DELETE"]
    assert deletes == [{"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}]


def test_guard_facts(lab, failed_job):
    lab.add(k.node("gpu-a03", ready=False))
    b = lab.backend()
    t = b.target(ToolCall(tool="node_drain", args={"node": "gpu-a01", "reason": "x"}))
    assert (t.partition, t.partition_nodes, t.partition_unavailable, t.gpus, t.node_unavailable) == ("h100", 3, 1, 8, False)
    t = b.target(ToolCall(tool="resubmit", args={"job": "llama-ft-7xk2p", "reason": "x"}))
    assert (t.job, t.partition, t.user, t.gpus) == ("llama-ft-7xk2p", "train", "dana", 8)
