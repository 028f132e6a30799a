"""The playbook policy investigates for real (tool calls on a fixture cluster) and prefers the cause.

Each incident runs through the real graph under a dry-run guard that permits every write,
so the plan shows up as actions and the cluster never changes.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.policies.remedy import ESCALATION_TEAM
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import REMEDIES, discover, load_scenario
from crashcart.playbooks import load_playbooks
from crashcart.tools import REGISTRY, ToolCall
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.cluster import Cluster

DRY_RUN = policy_from_dict({"mode": "dry_run", "permissions": [{"tool": "*"}]}, "test")

# --- clusters -------------------------------------------------------------------------------

WATCHDOG_LOG = """\
[2026-03-02 09:36:02] step 12850 | loss 1.842 | lr 2.0e-05 | 41210 tok/s
[2026-03-02 09:38:05] step 12900 | loss 1.839 | lr 2.0e-05 | 41198 tok/s
[rank5]:[E302 09:48:07.331207118 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=51022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600019 milliseconds before timing out.
[rank0]:[E302 09:48:07.331544201 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=51022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600022 milliseconds before timing out.
[rank0]:[E302 09:48:07.412771302 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] Timeout at NCCL work: 51022, last enqueued NCCL work: 51022, last completed NCCL work: 51021.
[rank0]:[E302 09:48:08.001212004 ProcessGroupNCCL.cpp:630] [Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) local_rank: 0 (pid: 41235) of binary: /usr/bin/python3
srun: error: nc-a100-02: task 1: Exited with exit code 1
srun: error: nc-a100-01: task 0: Exited with exit code 1
"""

CLEAN_KERNEL = """\
[Mon Mar  2 01:02:11 2026] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05
[Mon Mar  2 01:02:12 2026] nvidia-uvm: Loaded the UVM driver, major device number 507.
[Mon Mar  2 01:02:40 2026] mlx5_core 0000:18:00.0 ibp24s0: Link up
"""

XID79_KERNEL = CLEAN_KERNEL + """\
[Mon Mar  2 09:37:51 2026] NVRM: GPU at PCI:0000:4e:00: GPU-1d2a7c44-90b1-4c3e-a3d2-6a0f2e9b7c11
[Mon Mar  2 09:37:51 2026] NVRM: Xid (PCI:0000:4e:00): 79, pid=41288, name=python3, GPU has fallen off the bus.
[Mon Mar  2 09:37:51 2026] NVRM: GPU 0000:4e:00.0: GPU has fallen off the bus.
"""


def _gpus(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"index": i, "temperature_c": 36, "power_w": 62.0, "sm_clock_mhz": 210, "util_pct": 0,
             "memory_used_mib": 0, "memory_total_mib": 40960, "ecc_uncorrected": 0, **extra}
            for i in range(n)]


def nccl_cluster(xid_on: str | None) -> Cluster:
    """An 8-rank job (2 nodes x 4 GPUs) that died in an NCCL watchdog timeout; spare nodes idle."""
    names = ["nc-a100-01", "nc-a100-02", "nc-a100-03", "nc-a100-04"]
    nodes = [{"name": n, "state": "idle", "partition": "a100-4x", "gpus": 4,
              "gpu_model": "NVIDIA A100-SXM4-40GB", "gpu_telemetry": _gpus(4),
              "kernel_log": XID79_KERNEL if n == xid_on else CLEAN_KERNEL} for n in names]
    # A node outside the job with its own Xid 79: not this incident's business.
    nodes[3]["kernel_log"] = XID79_KERNEL
    return Cluster.model_validate({
        "now": "2026-03-02T10:00:00Z",
        "nodes": nodes,
        "jobs": [{
            "id": "51807", "name": "llama-8b-sft", "user": "rkumar", "state": "FAILED", "exit_code": "1:0",
            "partition": "a100-4x", "nodes": names[:2], "gpus": 8,
            "submit_time": "2026-03-02T06:00:00Z", "start_time": "2026-03-02T06:01:10Z",
            "end_time": "2026-03-02T09:48:09Z", "config": {"batch_size": 8, "gradient_checkpointing": True},
            "log": WATCHDOG_LOG,
            "checkpoints": [{"step": 12500, "time": "2026-03-02T09:20:00Z", "path": "/ckpt/llama-8b-sft/step_12500"}],
        }],
    })


def _attempt(job_id: str, nodes: list[str], start: str, end: str, log: str) -> dict[str, Any]:
    return {"id": job_id, "name": "vit-h-pretrain", "user": "oadeyemi", "state": "FAILED", "exit_code": "1:0",
            "partition": "h100", "nodes": nodes, "gpus": 16, "submit_time": start, "start_time": start,
            "end_time": end, "config": {"batch_size": 64}, "log": log}


def thermal_cluster() -> Cluster:
    """Three attempts die near step 8,300 with three different errors; gpu-t03 is in every allocation
    and its GPU 5 runs at 94 C with thermal slowdown while the job runs (cool now that it is idle)."""
    names = [f"gpu-t0{i}" for i in range(1, 6)]
    hot = [
        {"index": 5, "time": "2026-03-02T02:10:00Z", "temperature_c": 81, "power_w": 655.0, "sm_clock_mhz": 1980,
         "util_pct": 99, "memory_used_mib": 70112, "memory_total_mib": 81559, "ecc_uncorrected": 0},
        {"index": 5, "time": "2026-03-02T02:35:00Z", "temperature_c": 94, "power_w": 402.0, "sm_clock_mhz": 1095,
         "util_pct": 100, "memory_used_mib": 70112, "memory_total_mib": 81559, "ecc_uncorrected": 0,
         "throttle_reasons": ["HW Slowdown", "HW Thermal Slowdown", "SW Thermal Slowdown"]},
        {"index": 5, "time": "2026-03-02T07:40:00Z", "temperature_c": 94, "power_w": 398.0, "sm_clock_mhz": 1065,
         "util_pct": 100, "memory_used_mib": 70112, "memory_total_mib": 81559, "ecc_uncorrected": 0,
         "throttle_reasons": ["HW Thermal Slowdown", "SW Thermal Slowdown"]},
        {"index": 5, "temperature_c": 47, "power_w": 88.0, "sm_clock_mhz": 345, "util_pct": 0,
         "memory_used_mib": 0, "memory_total_mib": 81559, "ecc_uncorrected": 0},
    ]
    nodes = []
    for n in names:
        telemetry = _gpus(8, memory_total_mib=81559)
        if n == "gpu-t03":
            telemetry = [g for g in telemetry if g["index"] != 5] + hot
        nodes.append({"name": n, "state": "idle", "partition": "h100", "gpus": 8,
                      "gpu_model": "NVIDIA H100 80GB HBM3", "kernel_log": CLEAN_KERNEL, "gpu_telemetry": telemetry})
    steps = "".join(f"[2026-03-02 {{h}}:{m:02d}:00] step {s} | loss 2.41{m % 7} | 3.9 s/step\n"
                    for m, s in ((10, 8150), (20, 8225), (30, 8290)))
    attempts = [
        _attempt("77301", ["gpu-t01", "gpu-t03"], "2026-03-02T02:00:00Z", "2026-03-02T02:42:10Z",
                 steps.replace("{h}", "02") +
                 "[rank9]:[E302 02:41:58.120091 ProcessGroupNCCL.cpp:616] [Rank 9] Watchdog caught collective "
                 "operation timeout: WorkNCCL(SeqNum=33121, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                 "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"),
        _attempt("77388", ["gpu-t02", "gpu-t03"], "2026-03-02T05:00:00Z", "2026-03-02T05:41:30Z",
                 steps.replace("{h}", "05") +
                 "[rank13]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
                 "[rank13]: CUDA kernel errors might be asynchronously reported at some other API call.\n"),
    ]
    current = _attempt("77452", ["gpu-t03", "gpu-t04"], "2026-03-02T07:00:00Z", "2026-03-02T07:43:05Z",
                       steps.replace("{h}", "07") +
                       "[rank5]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                       "remote process exited or there was a network error, NCCL version 2.21.5\n")
    current["attempts"] = attempts
    return Cluster.model_validate({"now": "2026-03-02T08:30:00Z", "nodes": nodes, "jobs": [current]})


OOM_LOG = """\
[2026-03-02 09:12:40] Loading checkpoint shards: 100%|##########| 3/3
[2026-03-02 09:13:02] ***** Running training *****  Instantaneous batch size per device = 32
Traceback (most recent call last):
  File "/workspace/sft/train.py", line 211, in <module>
    trainer.train()
  File "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py", line 262, in forward
    outputs = run_function(*args)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 3 has a total capacity of 79.25 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use.
srun: error: gpu-m01: task 3: Exited with exit code 1
"""

ASSERT_LOG = """\
[2026-03-02 09:30:11] epoch 0 step 140 | loss 3.1120
/opt/conda/conda-bld/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1290: indexSelectLargeIndex: block: [212,0,0], thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed.
Traceback (most recent call last):
  File "/workspace/train.py", line 88, in <module>
    logits = model(input_ids).logits
RuntimeError: CUDA error: device-side assert triggered
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"""


def single_node_cluster(job_id: str, log: str, config: dict[str, Any]) -> Cluster:
    return Cluster.model_validate({
        "now": "2026-03-02T10:00:00Z",
        "nodes": [{"name": "gpu-m01", "state": "idle", "partition": "a100", "gpus": 8,
                   "gpu_model": "NVIDIA A100-SXM4-80GB", "kernel_log": CLEAN_KERNEL,
                   "gpu_telemetry": _gpus(8, memory_total_mib=81920)},
                  {"name": "gpu-m02", "state": "idle", "partition": "a100", "gpus": 8}],
        "jobs": [{"id": job_id, "name": "mistral-7b-sft", "user": "tnakamura", "state": "FAILED",
                  "exit_code": "1:0", "partition": "a100", "nodes": ["gpu-m01"], "gpus": 8,
                  "submit_time": "2026-03-02T09:10:00Z", "start_time": "2026-03-02T09:11:00Z",
                  "end_time": "2026-03-02T09:31:00Z", "config": config, "log": log}],
    })


# --- running ----------------------------------------------------------------------------------


def investigate(cluster: Cluster, job: str, kind: str = "slurm", policy=None):
    backend = FixtureBackend(cluster, kind)
    before = backend.cluster.model_dump()
    store = IncidentStore()
    deps = make_deps(backend, policy or PlaybookPolicy(), DRY_RUN, store, cluster="test")
    run = start_incident(deps, {"kind": "job_failed", "job": job}, cluster="test", source="test")
    assert backend.cluster.model_dump() == before, "a dry run changed the cluster"
    return run.state


def transcript(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(o["tool"], o["args"]) for o in state["observations"]]


def first_index(calls: list[tuple[str, dict[str, Any]]], tool: str, **args: Any) -> int:
    for i, (t, a) in enumerate(calls):
        if t == tool and all(a.get(k) == v for k, v in args.items()):
            return i
    raise AssertionError(f"no {tool}({args}) in the transcript: {calls}")


def planned(state: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    return [a["args"] for a in state["actions"] if a["tool"] == tool]


# --- (a) and (b): the cause beats the symptom -------------------------------------------------


def test_nccl_timeout_with_xid79_on_one_node_is_that_node():
    state = investigate(nccl_cluster(xid_on="nc-a100-02"), "51807")
    calls = transcript(state)
    assert all(o["ok"] for o in state["observations"]), [o for o in state["observations"] if not o["ok"]]
    logs = first_index(calls, "get_logs", job="51807")
    for node in ("nc-a100-01", "nc-a100-02"):
        assert first_index(calls, "kernel_log", node=node) > logs, "kernel logs are read after the job log"
    # Only the job's nodes are looked at: the idle node with its own Xid is not this incident.
    assert not [a for t, a in calls if a.get("node") in {"nc-a100-03", "nc-a100-04"}]
    d = state["diagnosis"]
    assert d["label"] == "gpu_fallen_off_bus" and d["label"] != "nccl_timeout"
    assert d["family"] == "hardware"
    assert d["root_cause"] == "node:nc-a100-02"
    assert d["remedy"] == "exclude_node"
    assert "nccl_timeout" in d["candidates"], "the symptom was considered and outranked"
    assert any("Xid" in e and "79" in e for e in d["evidence"])
    assert "kernel_log:nc-a100-02" in d["evidence_path"]
    assert planned(state, "node_drain") == [{"node": "nc-a100-02", "reason": planned(state, "node_drain")[0]["reason"]}]
    [resubmit] = planned(state, "resubmit")
    assert resubmit["job"] == "51807" and resubmit["exclude_nodes"] == ["nc-a100-02"]
    assert [a["team"] for a in planned(state, "escalate")] == ["hardware"]
    assert {a["decision"] for a in state["actions"]} == {"dry_run"}


def test_nccl_timeout_on_clean_nodes_is_a_transient_retry():
    state = investigate(nccl_cluster(xid_on=None), "51807")
    calls = transcript(state)
    # It looked where a hardware cause would show before settling on the symptom.
    for node in ("nc-a100-01", "nc-a100-02"):
        first_index(calls, "kernel_log", node=node)
    first_index(calls, "job_history", job="51807")
    d = state["diagnosis"]
    assert d["label"] == "nccl_timeout"
    assert d["family"] == "distributed"
    assert d["remedy"] == "resubmit"
    assert planned(state, "node_drain") == []
    [resubmit] = planned(state, "resubmit")
    assert resubmit["job"] == "51807"
    assert not resubmit.get("exclude_nodes") and not resubmit.get("changes")


# --- (c): shifting symptoms, one hot GPU ------------------------------------------------------


def test_three_attempts_with_different_errors_and_one_hot_gpu_is_thermal():
    state = investigate(thermal_cluster(), "77452")
    calls = transcript(state)
    first_index(calls, "sacct", job="77452")
    # The history was read in the job's time window, not just "now" (when the GPU is cool).
    metrics = [a for t, a in calls if t == "gpu_metrics" and a["node"] == "gpu-t03"]
    assert metrics and metrics[0]["since"].startswith("2026-03-02T02:00")
    d = state["diagnosis"]
    assert d["label"] == "gpu_thermal"
    assert d["family"] == "hardware"
    assert d["root_cause"] == "node:gpu-t03"
    assert d["remedy"] == "exclude_node"
    assert any("temperature_c=94" in e for e in d["evidence"])
    assert [a["node"] for a in planned(state, "node_drain")] == ["gpu-t03"]
    [resubmit] = planned(state, "resubmit")
    assert resubmit["exclude_nodes"] == ["gpu-t03"]


def test_thermal_needs_the_history_not_the_current_reading():
    """Without the samples taken during the runs, nothing says the GPU ran hot."""
    cluster = thermal_cluster()
    node = cluster.node("gpu-t03")
    node.gpu_telemetry = [s for s in node.gpu_telemetry if s.time is None]
    state = investigate(cluster, "77452")
    assert state["diagnosis"]["label"] != "gpu_thermal"
    assert planned(state, "node_drain") == []


# --- (d) and (e): config fixes and owner bugs ---------------------------------------------------


def test_cuda_oom_halves_the_batch_and_keeps_the_global_batch():
    config = {"batch_size": 32, "gradient_accumulation_steps": 2, "gradient_checkpointing": False,
              "seq_len": 2048, "lr": 2.0e-5}
    state = investigate(single_node_cluster("63012", OOM_LOG, config), "63012")
    first_index(transcript(state), "job_config", job="63012")
    d = state["diagnosis"]
    assert d["label"] == "cuda_oom" and d["remedy"] == "resubmit_with_changes"
    expected = {"batch_size": 16, "gradient_checkpointing": True, "gradient_accumulation_steps": 4}
    assert d["changes"] == expected
    [resubmit] = planned(state, "resubmit")
    assert resubmit["job"] == "63012" and resubmit["changes"] == expected
    assert planned(state, "node_drain") == [] and planned(state, "cancel_job") == []


def test_device_side_assert_goes_to_the_owner_and_is_not_retried():
    state = investigate(single_node_cluster("63090", ASSERT_LOG, {"batch_size": 8}), "63090")
    d = state["diagnosis"]
    assert d["label"] == "device_side_assert"
    assert d["family"] == "user_code" and d["remedy"] == "escalate_user" and d["retriable"] is False
    assert planned(state, "resubmit") == [] and planned(state, "node_drain") == []
    assert [a["team"] for a in planned(state, "escalate")] == ["user"]


def test_device_side_assert_is_not_resubmitted_even_with_restarts_left():
    """The guard would allow a resubmit (no attempts, budget 3): not resubmitting is the policy's call."""
    cluster = single_node_cluster("63090", ASSERT_LOG, {"batch_size": 8})
    backend = FixtureBackend(cluster, "slurm")
    target = backend.target(ToolCall(tool="resubmit", args={"job": "63090", "reason": "r"}))
    assert target.restarts_without_progress == 0 < DRY_RUN.restart_budget.max_restarts
    state = investigate(cluster, "63090")
    assert [a["tool"] for a in state["actions"]] == ["escalate"]


# --- (f): the knowledge base and the read-only investigation --------------------------------------

KNOWN_REMEDY_KINDS = {"resubmit", "resubmit_with_changes", "exclude_node", "wait", "preempt", "none",
                      *ESCALATION_TEAM}


def test_every_signal_compiles_and_every_remedy_is_known():
    kb = load_playbooks()
    entries = list(kb)
    assert len(entries) >= 40
    for entry in entries:
        label = entry.label
        assert len(entry.patterns) == len(label.signals)
        for sig, compiled in zip(label.signals, entry.patterns):
            if sig.pattern is None:
                assert compiled is None
                continue
            assert compiled is not None and compiled.pattern == sig.pattern
            re.compile(sig.pattern, re.I | re.M)
        assert label.remedy.kind in KNOWN_REMEDY_KINDS, f"{entry.name}: remedy {label.remedy.kind!r}"
        assert label.remedy.kind in REMEDIES, f"{entry.name}: remedy {label.remedy.kind!r} unknown to scenarios"
        for step in label.investigate:
            assert step.tool in REGISTRY.specs, f"{entry.name}: investigates with unknown tool {step.tool!r}"
            assert REGISTRY.get(step.tool).effect == "read", f"{entry.name}: investigates with a write tool"


class SpyPolicy:
    """The playbook policy, with every call it asks for during investigation recorded."""

    name = "playbook"

    def __init__(self) -> None:
        self.inner = PlaybookPolicy()
        self.asked: list[ToolCall] = []

    def next_calls(self, state, now, backend):
        calls = self.inner.next_calls(state, now, backend)
        self.asked += calls
        return calls

    def diagnose(self, state, now):
        return self.inner.diagnose(state, now)


def _all_incidents():
    for path in discover():
        sc = load_scenario(path)
        yield sc.id, sc.cluster, sc.backend, sc.trigger.model_dump()
    for name, cluster, job in (("nccl-xid", nccl_cluster("nc-a100-02"), "51807"),
                               ("thermal", thermal_cluster(), "77452"),
                               ("oom", single_node_cluster("63012", OOM_LOG, {"batch_size": 32}), "63012")):
        yield name, cluster, "slurm", {"kind": "job_failed", "job": job}


def test_the_policy_never_asks_for_a_write_while_investigating():
    seen = 0
    for name, cluster, kind, trigger in _all_incidents():
        spy = SpyPolicy()
        backend = FixtureBackend(cluster, kind)
        deps = make_deps(backend, spy, DRY_RUN, IncidentStore(), cluster=name)
        run = start_incident(deps, trigger, cluster=name, source="test")
        writes = [c for c in spy.asked if REGISTRY.get(c.tool).effect != "read"]
        assert not writes, f"{name}: asked for {writes} while investigating"
        assert not [o for o in run.state["observations"] if "write tool" in (o.get("error") or "")]
        assert spy.asked, f"{name}: did not investigate at all"
        seen += 1
    assert seen >= 60
