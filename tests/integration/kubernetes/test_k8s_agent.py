"""The agent on call on the loopback cluster: injected failures diagnosed and acted on through
the real client; observe and dry-run change nothing."""

from __future__ import annotations

from typing import Any

import pytest

import kubeseed as k
from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore

ALLOW_ALL = {
    "mode": "autonomous", "permissions": [{"tool": "*"}], "approval": [],
    "breaker": {"max_drains": 5, "window_minutes": 60, "max_partition_fraction": 0.5},
    "restart_budget": {"max_restarts": 3},
}
OOM_LOG = """2026-11-24 09:41:40 | INFO | build_index | loading passages from /data/msmarco-v2/passages.parquet (138,364,198 rows)
2026-11-24 10:01:55 | INFO | build_index | materialising passage table in memory (41.2 GB)
"""


def run_agent(backend, trigger: dict[str, Any], store_path, mode: str | None = None) -> dict[str, Any]:
    policy = policy_from_dict(ALLOW_ALL)
    if mode:
        policy = policy.model_copy(update={"mode": mode})
    deps = make_deps(backend, make_policy("playbook"), policy, IncidentStore(str(store_path)), cluster="loopback")
    run = start_incident(deps, trigger, cluster="loopback", source="test:kubernetes")
    assert not run.interrupted
    return run.state


def actions(state, tool=None):
    return [a for a in state.get("actions") or [] if tool is None or a["tool"] == tool]


def oom_job(lab):
    lab.add(k.node("gpu-a01"))
    c = k.container(memory="32Gi", args=["--batch_size=256"])
    j = lab.add(k.job("biencoder-idx", c=c))
    lab.add(k.pod("biencoder-idx-k2l9v", owner=j, phase="Failed", c=c,
                  state=k.terminated("OOMKilled", 137, k.ago(minutes=30), k.ago(minutes=2))))
    lab.store.set_log("train", "biencoder-idx-k2l9v", OOM_LOG)
    lab.add(k.event(j, "BackoffLimitExceeded", "Job has reached the specified backoff limit", component="job-controller"))


def test_oomkilled_job_is_resubmitted_with_more_memory(lab, tmp_path):
    oom_job(lab)
    state = run_agent(lab.backend(), {"kind": "job_failed", "job": "biencoder-idx-k2l9v"}, tmp_path / "s.duckdb")
    assert (state["diagnosis"]["family"], state["diagnosis"]["label"]) == ("memory", "host_oom"), state["diagnosis"]
    done = [a for a in actions(state, "resubmit") if a["decision"] == "allow"]
    assert len(done) == 1 and done[0]["result"], actions(state)
    new = lab.get("batch/v1", "Job", "train", done[0]["result"]["new_job"])
    assert new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "64Gi"
    assert new["metadata"]["annotations"]["crashcart.io/incident"].startswith("inc-")


def test_observe_and_dry_run_change_nothing(lab, tmp_path):
    oom_job(lab)
    before = lab.snapshot()
    for mode in ("observe", "dry_run"):
        state = run_agent(lab.backend(), {"kind": "job_failed", "job": "biencoder-idx-k2l9v"}, tmp_path / f"{mode}.duckdb", mode=mode)
        assert state["diagnosis"]["family"] == "memory"
        assert all(a["decision"] != "allow" for a in actions(state))
    assert lab.snapshot() == before
    assert lab.writes() == []


def test_crashloop_import_error_goes_to_the_owner(lab, tmp_path):
    lab.add(k.node("gpu-a01"))
    lab.add(k.pod("sft-0", restart="Always", restarts=6,
                  state=k.waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container=trainer pod=sft-0_train(9d1e)"),
                  last_state=k.terminated("Error", 1, k.ago(minutes=3), k.ago(minutes=3))))
    lab.store.set_log("train", "sft-0", "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 4, in <module>\n"
                      "    from flash_attn import flash_attn_func\nModuleNotFoundError: No module named 'flash_attn'", previous=True)
    state = run_agent(lab.backend(), {"kind": "job_failed", "job": "sft-0"}, tmp_path / "s.duckdb")
    assert state["diagnosis"]["label"] == "import_error", state["diagnosis"]
    assert not actions(state, "resubmit") and not actions(state, "node_drain")


def test_image_pull_backoff_is_diagnosed_from_events(lab, tmp_path):
    lab.add(k.node("gpu-a01"))
    p = lab.add(k.pod("eval-0", phase="Pending", c=k.container(image="nvcr.io/nvidia/pytorch:24.13-py3"),
                      state=k.waiting("ImagePullBackOff", 'Back-off pulling image "nvcr.io/nvidia/pytorch:24.13-py3"')))
    lab.add(k.event(p, "Failed", 'Failed to pull image "nvcr.io/nvidia/pytorch:24.13-py3": rpc error: code = NotFound desc = '
                    'failed to pull and unpack image "nvcr.io/nvidia/pytorch:24.13-py3": failed to resolve reference '
                    '"nvcr.io/nvidia/pytorch:24.13-py3": nvcr.io/nvidia/pytorch:24.13-py3: not found', count=4))
    lab.add(k.event(p, "Failed", "Error: ErrImagePull", count=4))
    lab.add(k.event(p, "BackOff", 'Back-off pulling image "nvcr.io/nvidia/pytorch:24.13-py3"', type_="Normal", count=9))
    state = run_agent(lab.backend(), {"kind": "job_pending", "job": "eval-0"}, tmp_path / "s.duckdb")
    assert state["diagnosis"]["label"] == "image_pull_bad_tag", state["diagnosis"]
    assert not actions(state, "resubmit")


def test_failed_scheduling_on_gpus_waits(lab, tmp_path):
    lab.add(k.node("gpu-a01"))
    p = lab.add(k.pod("big-0", node_name=None, phase="Pending", c=k.container(gpus=16),
                      unschedulable_message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu."))
    lab.add(k.event(p, "FailedScheduling", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
                    "available: 1 No preemption victims found for incoming pod.", component="default-scheduler", count=12))
    state = run_agent(lab.backend(), {"kind": "job_pending", "job": "big-0"}, tmp_path / "s.duckdb")
    assert state["diagnosis"]["family"] == "scheduling", state["diagnosis"]
    assert not [a for a in actions(state) if a["tool"] in ("resubmit", "node_drain", "cancel_job")]


def test_not_ready_node_is_cordoned_and_a_pdb_blocked_eviction_is_not_forced(lab, tmp_path):
    for n in ("gpu-a01", "gpu-a02", "gpu-a04", "gpu-a05"):
        lab.add(k.node(n))
    bad = lab.add(k.node("gpu-a03", ready=False))
    lab.add(k.event(bad, "NodeNotReady", "Node gpu-a03 status is now: NodeNotReady", component="node-controller", type_="Normal"))
    lab.add(k.pod("serve-0", node_name="gpu-a03", labels={"app": "serve", "user": "svc"}))
    lab.add(k.pdb("serve-pdb", "train", {"app": "serve"}, allowed=0))
    # Watching one namespace: the node's events (recorded in `default`) are still found.
    state = run_agent(lab.backend(namespaces=["train"]), {"kind": "node_alert", "node": "gpu-a03"}, tmp_path / "s.duckdb")
    assert state["diagnosis"]["label"] == "node_failure", state["diagnosis"]
    drain = actions(state, "node_drain")
    assert [(a["args"]["node"], a["decision"], a["result"]["ok"]) for a in drain] == [("gpu-a03", "allow", False)]
    assert "PodDisruptionBudget" in drain[0]["result"]["message"]
    assert lab.get("v1", "Node", None, "gpu-a03")["spec"]["unschedulable"] is True
    assert [p["metadata"]["name"] for p in lab.all("v1", "Pod")] == ["serve-0"]
    assert [a["args"]["team"] for a in actions(state, "escalate")] == ["hardware"]
