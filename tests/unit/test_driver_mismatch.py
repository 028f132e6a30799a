"""The NVIDIA driver mismatch labels, and the look at idle GPU nodes before calling a cluster full.

The clusters here are made up for the tests (no bundled scenario's names): the labels must
recognise the driver's general wording, and the pending-pod investigation must reach the GPU
nodes that advertise no GPUs only when the scheduler's numbers say some GPUs are unaccounted for.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies.conditions import gpus_unaccounted, idle_gpu_nodes
from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc, call_key
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.playbooks import load_playbooks
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.cluster import Cluster

DRY_RUN = policy_from_dict({"mode": "dry_run", "permissions": [{"tool": "*"}]}, "test")
KB = load_playbooks()

# The module's complaint in its two wordings: before ~R575, and with the client's name after.
OLD_FORM = """\
[    7.512204] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024
[52011.402117] NVRM: API mismatch: the client has the version 550.144.03, but
               NVRM: this kernel module has the version 550.90.07.  Please
               NVRM: make sure that this kernel module and all NVIDIA driver
               NVRM: components have the same version.
"""
NEW_FORM = """\
[ 9001.118344] NVRM: API mismatch: the client 'python3' (pid 77120)
               NVRM: has the version 580.82.07, but this kernel module has
               NVRM: the version 580.65.06.  Please make sure that this
               NVRM: kernel module and all NVIDIA driver components
               NVRM: have the same version.
"""
HOST_SMI = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144\n"
CLEAN = "[    7.512204] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
# The old module cannot find its GSP firmware once the upgrade removed it (ublue-os/bazzite#2668).
FIRMWARE_GONE = OLD_FORM + """\
[52013.991667] NVRM: RmFetchGspRmImages: No firmware image found
[52013.991672] NVRM: GPU 0000:07:00.0: RmInitAdapter failed! (0x61:0x56:1770)
"""


def _signal(label: str, where: str):
    entry = KB[label]
    return next(p for s, p in zip(entry.label.signals, entry.patterns) if s.where == where)


# --- the signals -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [OLD_FORM, NEW_FORM, HOST_SMI])
def test_node_signal_reads_both_driver_wordings_and_host_nvidia_smi(text):
    assert _signal("gpu_driver_mismatch", "kernel_log").search(text)


@pytest.mark.parametrize("text", [
    CLEAN,
    "NVRM: Xid (PCI:0000:4e:00): 79, pid=41288, name=python3, GPU has fallen off the bus.",
    "nvidia-fabricmanager: fabric manager version does not match the driver",
])
def test_node_signal_ignores_other_driver_lines(text):
    assert not _signal("gpu_driver_mismatch", "kernel_log").search(text)


@pytest.mark.parametrize("text", [
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver "
    "/ cuda driver combination",
    "E0101 00:00:01.000001       1 factory.go:68] Failed to initialize NVML: Driver/library version mismatch.",
    "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown",
    "jax.errors.JaxRuntimeError: INTERNAL: cudaErrorSystemDriverMismatch",
])
def test_log_signal_reads_what_cuda_programs_and_the_runtime_print(text):
    assert _signal("gpu_driver_mismatch", "log").search(text)


def test_a_driver_too_old_for_the_image_is_not_a_mismatch():
    # The image's CUDA needs a newer driver: the owner's image choice, not a half-upgraded node.
    text = "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
    assert not _signal("gpu_driver_mismatch", "log").search(text)


def test_priorities_put_the_cause_above_what_it_explains():
    p = {name: KB[name].label.priority for name in
         ("gpu_driver_mismatch_many_nodes", "gpu_driver_mismatch", "gpu_missing", "capacity_pending",
          "elastic_child_failed", "gpu_fault_in_job_log")}
    assert p["gpu_driver_mismatch_many_nodes"] > p["gpu_driver_mismatch"] > p["gpu_missing"]
    assert p["gpu_driver_mismatch"] > max(p["capacity_pending"], p["elastic_child_failed"], p["gpu_fault_in_job_log"])


# --- the condition and the idle GPU nodes --------------------------------------------------------


def _pending_evidence(short: int, running_on: list[str], listed: bool = True, state: str = "Pending") -> Evidence:
    ev = Evidence(now=datetime(2026, 1, 1, tzinfo=timezone.utc), trigger={"kind": "job_pending", "job": "pod-a"})
    ev.jobs["pod-a"] = JobFacts(job="pod-a", state=state, gpus=4)
    for i, node in enumerate(running_on):
        ev.jobs[f"run-{i}"] = JobFacts(job=f"run-{i}", state="Running", gpus=8, nodes=[node])
    ev.docs.append(TextDoc("events", "job:pod-a", [
        f"Warning FailedScheduling: 0/{short + 3} nodes are available: {short} Insufficient nvidia.com/gpu, "
        "3 node(s) didn't match Pod's node affinity/selector."], "kubectl_events:pod-a"))
    if listed:
        ev.calls.add(call_key("list_jobs", {}))
    return ev


def test_gpus_unaccounted_when_fewer_nodes_hold_gpus_than_the_scheduler_counts_short():
    assert gpus_unaccounted(_pending_evidence(short=2, running_on=["n1"]))


def test_a_full_cluster_is_just_full():
    assert not gpus_unaccounted(_pending_evidence(short=2, running_on=["n1", "n2"]))


def test_nothing_is_unaccounted_before_the_jobs_are_listed():
    assert not gpus_unaccounted(_pending_evidence(short=2, running_on=[], listed=False))


def test_old_scheduling_events_of_a_job_that_started_since_do_not_count():
    ev = _pending_evidence(short=2, running_on=[], state="CrashLoopBackOff")
    ev.trigger = {"kind": "job_failed", "job": "pod-a"}
    assert not gpus_unaccounted(ev)


def test_idle_gpu_nodes_skips_busy_cpu_and_out_of_service_nodes():
    ev = _pending_evidence(short=3, running_on=["busy"])
    ev.nodes = {
        "busy": {"node": "busy", "state": "allocated", "gpus": 8},
        "empty": {"node": "empty", "state": "idle", "gpus": 8},
        "cpu": {"node": "cpu", "state": "idle", "gpus": 0},
        "cordoned": {"node": "cordoned", "state": "cordoned", "gpus": 8},
        "gone": {"node": "gone", "state": "not_ready", "gpus": 8},
    }
    assert idle_gpu_nodes(ev) == ["empty"]


# --- whole investigations on a fixture cluster ------------------------------------------------------


def _node(name: str, state: str, kernel_log: str = CLEAN, gpus: int = 8, smi: str | None = None) -> dict[str, Any]:
    return {"name": name, "state": state, "partition": "gpu-pool" if gpus else "cpu", "gpus": gpus,
            "gpu_model": "NVIDIA A100-SXM4-80GB" if gpus else None, "kernel_log": kernel_log, "nvidia_smi": smi}


def _pending_pod_cluster(broken_idle: bool) -> Cluster:
    """A 4-GPU pod pends on "2 Insufficient nvidia.com/gpu"; one GPU node runs a job and the other is
    either empty with a driver mismatch (its plugin advertises nothing) or busy too (really full)."""
    second = _node("tq-gpu-2", "idle", OLD_FORM, smi=HOST_SMI) if broken_idle else _node("tq-gpu-2", "allocated")
    jobs = [
        {"id": "tq-pending-pod", "name": "tq-pending-pod", "user": "ana", "state": "Pending", "reason": "Unschedulable",
         "partition": "research", "gpus": 4, "submit_time": "2026-01-01T09:00:00Z"},
        {"id": "tq-running-a", "name": "tq-running-a", "user": "ben", "state": "Running", "partition": "research",
         "nodes": ["tq-gpu-1"], "gpus": 8, "start_time": "2026-01-01T07:00:00Z"},
    ]
    if not broken_idle:
        jobs.append({"id": "tq-running-b", "name": "tq-running-b", "user": "cy", "state": "Running",
                     "partition": "research", "nodes": ["tq-gpu-2"], "gpus": 8, "start_time": "2026-01-01T08:00:00Z"})
    return Cluster.model_validate({
        "now": "2026-01-01T10:00:00Z",
        "nodes": [_node("tq-gpu-1", "allocated"), second, _node("tq-cpu-1", "mixed", gpus=0)],
        "jobs": jobs,
        "events": [{"time": "2026-01-01T09:59:00Z", "type": "Warning", "reason": "FailedScheduling",
                    "object": "pod/research/tq-pending-pod", "message": "0/3 nodes are available: 2 Insufficient "
                    "nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."}],
    })


def _run(cluster: Cluster, trigger: dict[str, Any], kind: str) -> dict[str, Any]:
    deps = make_deps(FixtureBackend(cluster, kind), PlaybookPolicy(), DRY_RUN, IncidentStore(), cluster="test")
    return start_incident(deps, trigger, cluster="test", source="test").state


def _calls(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(o["tool"], o["args"]) for o in state["observations"]]


def _planned(state: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    return [a["args"] for a in state["actions"] if a["tool"] == tool]


def test_a_pending_pod_with_an_idle_broken_gpu_node_is_the_driver_not_capacity():
    state = _run(_pending_pod_cluster(broken_idle=True), {"kind": "job_pending", "job": "tq-pending-pod"}, "kubernetes")
    calls = _calls(state)
    # Only the GPU node nobody uses is looked at, after the jobs and the nodes were listed.
    assert ("kernel_log", {"node": "tq-gpu-2"}) in calls
    assert ("kernel_log", {"node": "tq-gpu-1"}) not in calls and ("kernel_log", {"node": "tq-cpu-1"}) not in calls
    assert calls.index(("list_jobs", {})) < calls.index(("kernel_log", {"node": "tq-gpu-2"}))
    d = state["diagnosis"]
    assert (d["label"], d["root_cause"], d["remedy"]) == ("gpu_driver_mismatch", "node:tq-gpu-2", "exclude_node")
    assert [a["node"] for a in _planned(state, "node_drain")] == ["tq-gpu-2"]
    assert [a["team"] for a in _planned(state, "escalate")] == ["infra"]
    assert not _planned(state, "resubmit"), "the pending pod never ran: nothing to rerun"


def test_a_really_full_cluster_costs_no_extra_calls():
    state = _run(_pending_pod_cluster(broken_idle=False), {"kind": "job_pending", "job": "tq-pending-pod"}, "kubernetes")
    tools = [t for t, _ in _calls(state)]
    assert "kernel_log" not in tools and "kubectl_get_nodes" not in tools
    assert state["diagnosis"]["label"] == "capacity_pending"


def _slurm_job_cluster(kernel_logs: dict[str, str]) -> Cluster:
    names = list(kernel_logs)
    return Cluster.model_validate({
        "now": "2026-01-01T10:00:00Z",
        "nodes": [_node(n, "idle", kernel_logs[n]) for n in names],
        "jobs": [{"id": "880011", "name": "tq-sft", "user": "dee", "state": "FAILED", "exit_code": "1:0",
                  "partition": "gpu-pool", "nodes": names, "gpus": 8 * len(names),
                  "submit_time": "2026-01-01T09:00:00Z", "start_time": "2026-01-01T09:01:00Z",
                  "end_time": "2026-01-01T09:01:09Z", "config": {"batch_size": 8},
                  "log": "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 803: system has "
                         "unsupported display driver / cuda driver combination\n"
                         "srun: error: task 1: Exited with exit code 1\n"}],
    })


def test_one_mismatched_node_of_a_job_is_drained_and_the_job_rerun_without_it():
    state = _run(_slurm_job_cluster({"tq-n1": CLEAN, "tq-n2": NEW_FORM}), {"kind": "job_failed", "job": "880011"}, "slurm")
    assert state["diagnosis"]["root_cause"] == "node:tq-n2"
    assert [a["node"] for a in _planned(state, "node_drain")] == ["tq-n2"]
    assert [a.get("exclude_nodes") for a in _planned(state, "resubmit")] == [["tq-n2"]]


def test_every_node_of_a_job_mismatched_is_a_rollout_for_infra_not_a_drain():
    state = _run(_slurm_job_cluster({"tq-n1": OLD_FORM, "tq-n2": NEW_FORM}), {"kind": "job_failed", "job": "880011"}, "slurm")
    d = state["diagnosis"]
    assert (d["label"], d["root_cause"], d["remedy"]) == ("gpu_driver_mismatch_many_nodes", "cluster", "escalate_infra")
    assert not _planned(state, "node_drain") and not _planned(state, "resubmit")
    assert [a["team"] for a in _planned(state, "escalate")] == ["infra"]


def test_gpus_that_fail_to_come_up_after_the_upgrade_are_the_mismatch_not_hardware():
    cluster = Cluster.model_validate({"now": "2026-01-01T10:00:00Z", "nodes": [_node("tq-n3", "idle", FIRMWARE_GONE)]})
    state = _run(cluster, {"kind": "node_alert", "node": "tq-n3"}, "slurm")
    assert state["diagnosis"]["label"] == "gpu_driver_mismatch"
    assert "gpu_missing" in state["diagnosis"]["candidates"]
    assert [a["team"] for a in _planned(state, "escalate")] == ["infra"]
