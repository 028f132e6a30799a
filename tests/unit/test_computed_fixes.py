"""Fixes computed from the evidence, and memory read from the numbers.

A value the evidence does not hold is never guessed: the incident escalates with what was seen,
and a resubmit whose changes come out empty is never sent.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from crashcart.agent.policies.computed import (
    above_peak, gpus_per_node, half_precision, newest_complete_checkpoint, selector_as_idle_nodes_carry,
)
from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import match_label, steady_rise
from crashcart.agent.policies.remedy import captured_values, compute_changes, plan_actions
from crashcart.playbooks import load_playbooks

T0 = datetime(2026, 5, 1, tzinfo=timezone.utc)
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. GPU 0 has a total capacity of "
       "79.10 GiB of which {free} is free. Including non-PyTorch memory, this process has 77.00 GiB memory in "
       "use. Of the allocated memory 66.00 GiB is allocated by PyTorch, and {unalloc} is reserved by PyTorch "
       "but unallocated. If reserved but unallocated memory is large try setting "
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def _ev(log: str = "", config: dict | None = None, **facts) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")] if log else []
    ev.configs = {"j1": config or {}}
    ev.jobs = {"j1": JobFacts(job="j1", **{"state": "FAILED", **facts})}
    return ev


# --- memory from the numbers ---------------------------------------------------------------

@pytest.mark.parametrize("req, free, unalloc, fragmented", [
    ("5.00 GiB", "1.20 GiB", "7.50 GiB", True),     # 8.7 GiB on hand covers 5: the pieces are the problem
    ("14.00 GiB", "1.31 GiB", "8.91 GiB", False),   # 10.2 GiB on hand is short of 14: the GPU is full
    ("512.00 MiB", "100.00 MiB", "6.20 GiB", True),
])
def test_fragmentation_only_when_free_plus_unallocated_covers_the_request(req, free, unalloc, fragmented):
    kb = load_playbooks()
    ev = _ev(OOM.format(req=req, free=free, unalloc=unalloc))
    assert (match_label(kb["cuda_fragmentation"], ev) is not None) is fragmented
    assert match_label(kb["cuda_oom"], ev) is not None


def test_a_noisy_climb_is_a_leak_and_a_sawtooth_is_not():
    assert steady_rise([10, 12, 11.5, 14, 15, 14.6, 17, 18.2, 18, 21])
    assert not steady_rise([10, 18, 10.5, 18.2, 10.1, 18.4, 10.3, 18.1])
    assert not steady_rise([10, 9, 11])


def _attempt(hours: float, start: datetime) -> dict:
    return {"attempt": 1, "state": "FAILED", "start_time": start.isoformat(),
            "end_time": (start + timedelta(hours=hours)).isoformat()}


def test_ooms_hours_into_every_attempt_are_a_leak_and_early_ones_are_not():
    kb = load_playbooks()
    log = OOM.format(req="1.50 GiB", free="600.00 MiB", unalloc="800.00 MiB")
    late = _ev(log, start_time=T0 - timedelta(hours=9), end_time=T0 - timedelta(minutes=5),
               attempts=[_attempt(4.1, T0 - timedelta(hours=15))])
    assert match_label(kb["memory_leak"], late) is not None
    early = _ev(log, start_time=T0 - timedelta(minutes=20), end_time=T0 - timedelta(minutes=5),
                attempts=[_attempt(0.2, T0 - timedelta(hours=2))])
    assert match_label(kb["memory_leak"], early) is None


# --- values computed from what the tools returned --------------------------------------------

def test_processes_per_node_are_the_gpus_the_scheduler_gave_each_node():
    assert gpus_per_node(_ev(nodes=["a", "b"], gpus=8), "j1", {}, None) == 4
    assert gpus_per_node(_ev(nodes=["a", "b"], gpus=7), "j1", {}, None) is None  # uneven: cannot tell
    assert gpus_per_node(_ev(nodes=[], gpus=8), "j1", {}, None) is None


def test_the_peak_is_the_largest_reported_and_headroom_goes_above_it():
    kb = load_playbooks()
    log = "rss=20.1GiB peak_rss=25.0GiB\nrss=19.0GiB peak_rss=31.7GiB\nrss=22.2GiB peak_rss=31.7GiB\n"
    ev = _ev(log, {"resources": {"limits": {"memory": "32Gi"}}}, state="OOMKilled")
    match = match_label(kb["host_oom"], ev)
    assert captured_values(match)["peak"] == "31.7GiB"
    changes, _ = compute_changes(kb["host_oom"].label.remedy, ev, "j1", captured_values(match))
    assert changes == {"resources.limits.memory": "40Gi"}  # 31.7 x 1.25 = 39.6, rounded up
    assert above_peak(ev, "j1", {}, 1.25) is None


def test_without_a_peak_the_limit_that_was_hit_doubles_and_a_lower_peak_never_lowers_it():
    kb = load_playbooks()
    remedy = kb["host_oom"].label.remedy
    ev = _ev("", {"memory_limit_gi": 64})
    assert compute_changes(remedy, ev, "j1", {})[0] == {"memory_limit_gi": 128}
    assert compute_changes(remedy, ev, "j1", {"peak": "20 GiB"})[0] == {"memory_limit_gi": 128}


@pytest.mark.parametrize("model, dtype", [
    ("NVIDIA H100 80GB HBM3", "bf16"), ("NVIDIA A10G", "bf16"), ("Tesla V100-SXM2-32GB", "fp16"), (None, "fp16"),
])
def test_half_precision_is_bf16_only_where_every_gpu_computes_in_it(model, dtype):
    ev = _ev(nodes=["n1"], gpus=8)
    ev.nodes = {"n1": {"node": "n1", "gpu_model": model}}
    assert half_precision(ev, "j1", {}, None) == dtype


def test_the_newest_checkpoint_a_log_says_was_saved_whole_skips_the_broken_one():
    log = "\n".join([
        "[INFO] Saved checkpoint to /ckpt/run/step_1000",
        "[INFO] Saved checkpoint to /ckpt/run/step_2000",
        "[INFO] Saving checkpoint to /ckpt/run/step_3000",  # began, never finished
        "_pickle.UnpicklingError: invalid load key, '\\x00' while loading /ckpt/run/step_2000/model.pt",
    ])
    assert newest_complete_checkpoint(_ev(log), "j1", {}, None) == "/ckpt/run/step_1000"
    assert newest_complete_checkpoint(_ev("nothing saved"), "j1", {}, None) is None


# --- an empty resubmit is never sent -----------------------------------------------------------

def test_a_fix_with_no_key_to_change_escalates_instead_of_resubmitting_unchanged():
    kb = load_playbooks()
    log = OOM.format(req="20.00 GiB", free="1.00 GiB", unalloc="500.00 MiB")
    ev = _ev(log, {"model": "x"}, nodes=["n1"], gpus=8)  # the config has no batch key to lower
    match = match_label(kb["cuda_oom"], ev)
    calls = plan_actions(match, "resubmit_with_changes", ev, None, "s", ["e"])
    assert [c.tool for c in calls] == ["escalate"]
    assert calls[0].args["team"] == "user"


# --- a node selector corrected to what idle nodes carry ----------------------------------------

def _selector_ev(selector: dict) -> Evidence:
    ev = _ev(config={"nodeSelector": selector})
    ev.nodes = {
        "g1": {"node": "g1", "state": "idle", "gpus": 8, "labels": {"pool": "gpu-h100-on-demand"}},
        "g2": {"node": "g2", "state": "mixed", "gpus": 4, "labels": {"pool": "gpu-a10g-spot"}},
        "g3": {"node": "g3", "state": "drained", "gpus": 8, "labels": {"pool": "gpu-h100-ondemand-old"}},
    }
    return ev


def test_a_misspelt_selector_value_becomes_the_one_idle_gpu_nodes_carry():
    ev = _selector_ev({"pool": "gpu-h100-ondemand", "zone": "a"})
    assert selector_as_idle_nodes_carry(ev, "j1", {}, None) is None  # "zone" is carried by no node
    ev = _selector_ev({"pool": "gpu-h100-ondemand"})
    assert selector_as_idle_nodes_carry(ev, "j1", {}, None) == {"pool": "gpu-h100-on-demand"}


def test_another_pool_or_product_is_the_owners_choice_not_a_typo():
    assert selector_as_idle_nodes_carry(_selector_ev({"pool": "gpu-b200-reserved"}), "j1", {}, None) is None


@pytest.mark.parametrize("asked", ["gpu-a100-on-demand", "gpu-h200-on-demand", "gpu-h100-on-demand-2", "gpu-h100-ondemand-3"])
def test_a_value_as_alike_as_a_typo_but_naming_another_gpu_is_not_corrected(asked):
    # As text these are within the typo threshold of what idle nodes carry; as hardware they are not.
    assert selector_as_idle_nodes_carry(_selector_ev({"pool": asked}), "j1", {}, None) is None


def _gpu_label_ev(selector: dict) -> Evidence:
    ev = _ev(config={"nodeSelector": selector})
    ev.nodes = {
        "n1": {"node": "n1", "state": "idle", "gpus": 8, "gpu_model": "NVIDIA L40S",
               "labels": {"gpu.vendor/product": "nvidia-l40s-48gb"}},
        "n2": {"node": "n2", "state": "idle", "gpus": 8, "gpu_model": "NVIDIA A100-SXM4-80GB",
               "labels": {"gpu.vendor/product": "nvidia-a100-80gb"}},
        "n3": {"node": "n3", "state": "mixed", "gpus": 8, "gpu_model": "NVIDIA A100-SXM4-40GB",
               "labels": {"gpu.vendor/product": "nvidia-a100-40gb"}},
    }
    return ev


def test_a_gpu_named_in_another_spelling_becomes_the_label_its_nodes_carry():
    # The value names the L40S the idle nodes' nvidia-smi reports, in another vendor's words.
    ev = _gpu_label_ev({"gpu.vendor/product": "NVIDIA-Tesla-L40S"})
    assert selector_as_idle_nodes_carry(ev, "j1", {}, None) == {"gpu.vendor/product": "nvidia-l40s-48gb"}
    # The size it names picks one of two A100 pools.
    ev = _gpu_label_ev({"gpu.vendor/product": "tesla-a100-80g"})
    assert selector_as_idle_nodes_carry(ev, "j1", {}, None) == {"gpu.vendor/product": "nvidia-a100-80gb"}


@pytest.mark.parametrize("asked", ["nvidia-tesla-a100", "nvidia-h100-80gb", "nvidia-a100-24gb"])
def test_a_gpu_name_that_fits_no_pool_or_several_is_the_owners_choice(asked):
    # Two A100 pools (the size decides), no H100 at all, an A100 size that does not exist here.
    assert selector_as_idle_nodes_carry(_gpu_label_ev({"gpu.vendor/product": asked}), "j1", {}, None) is None


# --- a time limit clamped to the partition's MaxTime -------------------------------------------

@pytest.mark.parametrize("reason, max_time, expected", [
    ("PartitionTimeLimit", "2-00:00:00", 172800), ("PartitionTimeLimit", "UNLIMITED", None),
    ("PartitionNodeLimit", "2-00:00:00", None), ("PartitionTimeLimit", None, None),
])
def test_the_time_limit_comes_from_the_partitions_maxtime_only_when_that_is_what_binds(reason, max_time, expected):
    from crashcart.agent.policies.computed import partition_max_time

    ev = _ev(config={"save_steps": 500}, partition="a100", reason=reason, state="PENDING")
    ev.partitions = {"a100": {"partition": "a100", "max_time": max_time}}
    assert partition_max_time(ev, "j1", {}, None) == expected
    ev.configs = {"j1": {}}  # a job that never checkpoints would lose its work at MaxTime
    assert partition_max_time(ev, "j1", {}, None) is None


def test_the_whole_checkpoints_step_is_put_in_the_jobs_own_resume_path():
    log = "\n".join([
        "[INFO|trainer.py:3812] Saving model checkpoint to /out/run7/checkpoint-5500",
        "[INFO|modeling_utils.py:3042] Model weights saved in /out/run7/checkpoint-5500/model.safetensors",
        "[INFO|trainer.py:3812] Saving model checkpoint to /out/run7/checkpoint-6000",
        "slurmstepd: error: *** JOB 51123 ON gpu-c12 CANCELLED AT 2026-05-01T03:11:09 DUE TO NODE FAILURE ***",
        "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
    ])
    ev = _ev(log, {"resume_from_checkpoint": "/out/run7/checkpoint-6000"})
    assert newest_complete_checkpoint(ev, "j1", {}, None) == "/out/run7/checkpoint-5500"
    padded = _ev("Saved checkpoint to /ckpt/gpt/iter_0003500/model_optim_rng.pt", {"load": "/ckpt/gpt/iter_0004000"})
    assert newest_complete_checkpoint(padded, "j1", {}, None) == "/ckpt/gpt/iter_0003500"


def test_ray_data_cpu_stage_is_capped_at_the_cpus_the_gpu_actors_leave():
    from crashcart.agent.policies.computed import cpus_left_for_gpu_actors

    caps = {"cpus_total": "64", "gpus_total": "8", "cpu_each": "1.0"}
    assert cpus_left_for_gpu_actors(_ev(config={"preprocess_concurrency": 64}), "j1", caps, None) == {"preprocess_concurrency": 56}
    assert cpus_left_for_gpu_actors(_ev(config={"preprocess_concurrency": 32}), "j1", caps, None) == {}
    assert cpus_left_for_gpu_actors(_ev(config={"preprocess_concurrency": 64}), "j1", {"cpus_total": "64"}, None) == {}


# --- an eviction's own numbers decide whose fault it was ----------------------------------------

def _evicted(using: str, request: str) -> Evidence:
    ev = _ev(config={"resources": {"requests": {"memory": request}}}, state="Evicted", nodes=["n1"])
    ev.docs = [TextDoc("events", "job:j1", [
        f"Warning Evicted: The node was low on resource: memory. Threshold quantity: 100Mi, available: 81244Ki. "
        f"Container trainer was using {using}, request is {request}, has larger consumption of memory."], "kubectl_events:j1")]
    return ev


def test_an_eviction_over_the_request_is_the_jobs_and_the_new_request_goes_above_its_use():
    kb = load_playbooks()
    ev = _evicted("44821336Ki", "24Gi")  # 42.7 GiB used against 24 requested
    match = match_label(kb["evicted_memory_pressure"], ev)
    assert match is not None and match_label(kb["evicted_memory_pressure_within_request"], ev) is None
    changes, _ = compute_changes(kb["evicted_memory_pressure"].label.remedy, ev, "j1", captured_values(match))
    assert changes == {"resources.requests.memory": "54Gi"}  # 42.7 x 1.25 = 53.4, rounded up


def test_an_eviction_within_the_request_is_the_nodes():
    kb = load_playbooks()
    ev = _evicted("74763264Ki", "96Gi")  # 71.3 GiB used against 96 requested
    assert match_label(kb["evicted_memory_pressure"], ev) is None
    assert match_label(kb["evicted_memory_pressure_within_request"], ev) is not None


def test_arithmetic_must_name_groups_its_pattern_has():
    from pydantic import ValidationError
    from crashcart.playbooks import Signal

    with pytest.raises(ValidationError, match="covers needs"):
        Signal.model_validate({"where": "log", "pattern": "(?P<free>\\d+) free",
                               "covers": {"add": ["free"], "at_least": "request"}})


# --- a spill path moved to the large empty disk the node's df shows ------------------------------

DF = """Filesystem      Size  Used Avail Use% Mounted on
/dev/root       194G  186G  8.1G  96% /
tmpfs           252G     0  252G   0% /dev/shm
/dev/nvme1n1    3.5T   41G  3.3T   2% /mnt/local_nvme
10.20.0.5:/datasets  500T  312T  189T  63% /mnt/datasets
"""


def test_df_rows_are_read_as_printed():
    from crashcart.tools.diskfree import parse_df

    mounts = parse_df(DF)
    assert [m.mounted_on for m in mounts] == ["/", "/dev/shm", "/mnt/local_nvme", "/mnt/datasets"]
    assert mounts[2].avail_bytes == pytest.approx(3.3 * 2**40) and mounts[0].use_pct == 96


def test_the_spill_path_moves_to_the_roomiest_local_disk_and_never_to_ram_or_the_network():
    from crashcart.agent.policies.computed import path_on_roomiest_disk
    from crashcart.tools.diskfree import parse_df

    ev = _ev(config={"object_spilling_directory": "/tmp/ray/spill"}, nodes=["n1"])
    ev.disks = {"n1": [m.model_dump() for m in parse_df(DF)]}
    assert path_on_roomiest_disk(ev, "j1", {}, None) == "/mnt/local_nvme/tmp/ray/spill"
    ev.disks = {}  # df not seen: no guess
    assert path_on_roomiest_disk(ev, "j1", {}, None) is None
    ev.disks = {"n1": [m.model_dump() for m in parse_df(DF) if m.mounted_on != "/mnt/local_nvme"]}
    assert path_on_roomiest_disk(ev, "j1", {}, None) is None  # only RAM and NFS have room


@pytest.mark.parametrize("model, expected", [
    ("NVIDIA H100 80GB HBM3", {"mixed_precision": "bf16"}),
    ("Tesla V100-SXM2-32GB", {}),  # no bf16 there: nothing to change, the owner lowers the LR instead
])
def test_an_fp16_overflow_moves_to_bf16_only_on_gpus_that_have_it(model, expected):
    ev = _ev(config={"mixed_precision": "fp16"}, nodes=["n1"], gpus=8)
    ev.nodes = {"n1": {"node": "n1", "gpu_model": model}}
    remedy = load_playbooks()["fp16_loss_scale_floor"].label.remedy
    assert compute_changes(remedy, ev, "j1", {})[0] == expected


def test_a_cpu_stage_whose_tasks_take_several_cpus_is_capped_in_tasks_not_cpus():
    from crashcart.agent.policies.computed import cpus_left_for_gpu_actors

    # 256 CPUs, 32 GPU actors at 2 CPUs: 192 CPUs left, 4 per preprocessing actor -> 48 actors.
    caps = {"cpus_total": "256", "gpus_total": "32", "cpu_each": "2.0"}
    config = {"preprocess_concurrency": 64, "preprocess_num_cpus": 4, "read_num_cpus": 1}
    assert cpus_left_for_gpu_actors(_ev(config=config), "j1", caps, None) == {"preprocess_concurrency": 48}


RAY_STATUS = """======== Autoscaler status: 2026-11-11 07:14:31.118203 ========
Usage:
 {cpu}/{cpu} CPU
 0.0/{gpu} GPU
"""


@pytest.mark.parametrize("cpus, gpus, asked, expected", [
    ("200.0", "16.0", "{'CPU': 1.0} * 1, {'CPU': 16.0, 'GPU': 1.0} * 16 (PACK)", 12),   # (200-1)/16
    ("392.0", "32.0", "{'CPU': 24.0, 'GPU': 2.0} * 8 (SPREAD)", None),  # 12.25 per GPU x 2 = 24: it fits, no fix
    ("200.0", "16.0", "{'CPU': 16.0, 'GPU': 1.0} * 32 (PACK)", None),  # 32 GPUs on 16: CPUs are not the problem
])
def test_worker_cpus_come_down_to_what_the_gpu_nodes_have_per_gpu(cpus, gpus, asked, expected):
    import re

    from crashcart.agent.policies.computed import cpus_per_worker_that_fit

    m = re.search(r"\{'CPU': (?P<c>[\d.]+), 'GPU': (?P<g>[\d.]+)\} \* (?P<n>\d+)", asked)
    caps = {"request": asked, "cpu_each": m["c"], "gpu_each": m["g"], "bundles": m["n"]}
    ev = _ev(RAY_STATUS.format(cpu=cpus, gpu=gpus), {"resources_per_worker": {"CPU": float(m["c"]), "GPU": 1}})
    assert cpus_per_worker_that_fit(ev, "j1", caps, None) == expected


# --- the toleration for the taint that blocks a pod, from where it is known to be right ---------

TOL = {"key": "dedicated", "operator": "Equal", "value": "llm-train", "effect": "NoSchedule"}
TAINT = {"taint_key": "dedicated", "taint_value": "llm-train"}


def _runs(now_config: dict, earlier: list[tuple[str, str, dict]]) -> Evidence:
    """The pending job j1 (`train`, owner u1) and earlier runs (id, state, config), newest last."""
    ev = _ev(config=now_config)
    ev.jobs["j1"] = JobFacts(job="j1", name="train", user="u1", state="Pending", submit_time=T0)
    for i, (job, state, config) in enumerate(earlier):
        ev.jobs[job] = JobFacts(job=job, name="train", user="u1", state=state,
                                end_time=T0 - timedelta(days=len(earlier) - i))
        ev.configs[job] = config
    return ev


def test_the_toleration_comes_from_the_last_run_of_the_same_job_that_succeeded():
    from crashcart.agent.policies.computed import toleration_for_blocking_taint

    ev = _runs({"tolerations": []}, [("r1", "Succeeded", {"tolerations": [TOL]}), ("r2", "Failed", {"tolerations": []})])
    assert ev.earlier_good_runs("j1") == ["r1"]
    assert toleration_for_blocking_taint(ev, "j1", TAINT, None) == [TOL]


@pytest.mark.parametrize("earlier, taint", [
    ([("r1", "Succeeded", {"tolerations": []})], TAINT),                       # the run predates the taint
    ([("r1", "Failed", {"tolerations": [TOL]})], TAINT),                       # a run that did not work proves nothing
    ([("r1", "Succeeded", {"tolerations": [TOL]})], {"taint_key": "node.kubernetes.io/unreachable", "taint_value": ""}),
])
def test_no_toleration_without_proof_or_for_a_node_that_is_unwell(earlier, taint):
    from crashcart.agent.policies.computed import toleration_for_blocking_taint

    assert toleration_for_blocking_taint(_runs({"tolerations": []}, earlier), "j1", taint, None) is None


def test_another_run_by_someone_else_is_not_the_same_job():
    from crashcart.agent.policies.computed import toleration_for_blocking_taint

    ev = _runs({"tolerations": []}, [("r1", "Succeeded", {"tolerations": [TOL]})])
    ev.jobs["r1"].user = "someone-else"
    assert toleration_for_blocking_taint(ev, "j1", TAINT, None) is None


def test_a_replica_type_missing_the_toleration_gets_the_one_its_sibling_carries():
    from crashcart.agent.policies.computed import toleration_for_blocking_taint

    ev = _runs({"tolerations": {"Master": [TOL], "Worker": []}}, [])
    assert toleration_for_blocking_taint(ev, "j1", TAINT, None) == {"Master": [TOL], "Worker": [TOL]}


def test_a_selector_value_no_typo_explains_comes_from_the_last_good_run_if_free_nodes_carry_it():
    from crashcart.agent.policies.computed import selector_as_idle_nodes_carry, selector_needs_more_than_a_typo

    key = "cloud.google.com/gke-accelerator"
    ev = _runs({"nodeSelector": {key: "nvidia-tesla-v100"}}, [("r1", "Succeeded", {"nodeSelector": {key: "nvidia-a100-80gb"}})])
    ev.trigger = {"kind": "job_pending", "job": "j1"}
    ev.nodes = {"a1": {"node": "a1", "state": "idle", "gpus": 8, "labels": {key: "nvidia-a100-80gb"}},
                "l1": {"node": "l1", "state": "idle", "gpus": 4, "labels": {key: "nvidia-l4"}}}
    assert selector_needs_more_than_a_typo(ev)
    assert selector_as_idle_nodes_carry(ev, "j1", {}, None) == {key: "nvidia-a100-80gb"}
    ev.nodes["a1"]["state"] = "cordoned"  # the pool the good run used has no free node now
    assert selector_as_idle_nodes_carry(ev, "j1", {}, None) is None
