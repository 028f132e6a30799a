"""Fixes computed from what the tools returned: the newest whole checkpoint in the job's own
resume keys, a default spill directory moved to the roomy disk, a pod's own termination
reason behind a Job that hit its backoffLimit, a memory peak an earlier run logged."""

from __future__ import annotations

from datetime import datetime, timezone

from crashcart.agent.policies.computed import (
    newest_complete_checkpoint, newest_complete_in_resume_path, newest_complete_step,
)
from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.remedy import compute_changes
from crashcart.playbooks import load_playbooks
from crashcart.tools.cluster import Checkpoint

T0 = datetime(2026, 5, 1, tzinfo=timezone.utc)


def _ev(config: dict, steps: list[tuple[int, str]] = (), log: str = "", **facts) -> Evidence:
    ev = Evidence(now=T0, trigger={"kind": "job_failed", "job": "j1"})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")] if log else []
    ev.configs = {"j1": config}
    ev.jobs = {"j1": JobFacts(job="j1", **{"state": "FAILED", **facts})}
    if steps:
        ev.progress = {"j1": ([], [Checkpoint(step=s, path=p, time=T0) for s, p in steps])}
    return ev


MEGATRON = [(22000, "/ckpt/gpt/iter_0022000"), (23000, "/ckpt/gpt/iter_0023000"), (24000, "/ckpt/gpt/iter_0024000")]


def test_a_trainer_with_a_step_key_gets_the_step_and_keeps_its_run_directory():
    ev = _ev({"load": "/ckpt/gpt", "ckpt_step": None}, MEGATRON)
    assert newest_complete_step(ev, "j1", {}, None) == 23000
    assert newest_complete_checkpoint(ev, "j1", {}, None) is None  # `load` is the run directory
    changes, _ = compute_changes(load_playbooks()["checkpoint_corrupt"].label.remedy, ev, "j1")
    assert changes == {"ckpt_step": 23000}


def test_without_a_step_key_the_resume_path_gets_the_whole_checkpoint():
    ev = _ev({"resume_from_checkpoint": "/ckpt/gpt/iter_0024000"}, MEGATRON)
    changes, _ = compute_changes(load_playbooks()["checkpoint_corrupt"].label.remedy, ev, "j1")
    assert changes == {"resume_from_checkpoint": "/ckpt/gpt/iter_0023000"}


def test_an_empty_resume_key_gets_the_whole_checkpoints_own_path_only_if_it_names_a_step():
    ray = [(17, "s3://b/run/checkpoint_000017"), (18, "s3://b/run/checkpoint_000018")]
    assert newest_complete_in_resume_path(_ev({"resume_from_checkpoint": None}, ray), "j1", {}, None) \
        == "s3://b/run/checkpoint_000017"
    # The trainer takes the step apart: its path key stays the run directory.
    assert newest_complete_in_resume_path(_ev({"load": None, "ckpt_step": None}, MEGATRON), "j1", {}, None) is None
    unnamed = [(1, "/ckpt/a/last.ckpt"), (2, "/ckpt/b/last.ckpt")]
    assert newest_complete_in_resume_path(_ev({"ckpt_path": None}, unnamed), "j1", {}, None) is None


# --- a spill directory left unset spills to the runtime's default --------------------------------

DF = """Filesystem      Size  Used Avail Use% Mounted on
overlay         240G  229G   11G  96% /
tmpfs           373G  373G     0 100% /dev/shm
/dev/md0        3.5T   52G  3.4T   2% /mnt/nvme0
"""
FULL = ("(raylet, ip=10.0.0.2) file_system_monitor.cc:116: /tmp/ray/session_2026-01-02_03-04-05_6789_1 is over "
        "95% full, available space: 11811160064; capacity: 257698037760. Object creation will fail if spilling is required.\n"
        "ray.exceptions.OutOfDiskError: Local disk is full")


def test_the_default_directory_is_above_the_runtimes_per_run_directory():
    from crashcart.agent.policies.computed import default_directory

    assert default_directory("/tmp/ray/session_2026-01-02_03-04-05_6789_1") == "/tmp/ray"
    assert default_directory("/data/ray_tmp/session_latest/") == "/data/ray_tmp"
    assert default_directory("/scratch/spill") == "/scratch/spill"
    assert default_directory("relative/path") is None


def test_an_unset_spill_key_moves_from_the_default_the_error_names_and_an_absent_key_is_not_added():
    from crashcart.agent.policies.matching import match_label
    from crashcart.agent.policies.remedy import captured_values
    from crashcart.tools.diskfree import parse_df

    entry = load_playbooks()["ray_spill_disk_full"]
    ev = _ev({"object_spilling_directory": None}, log=FULL, nodes=["n1"])
    ev.disks = {"n1": [m.model_dump() for m in parse_df(DF)]}
    match = match_label(entry, ev)
    assert captured_values(match)["full_path"].startswith("/tmp/ray/session_")
    changes, _ = compute_changes(entry.label.remedy, ev, "j1", captured_values(match))
    assert changes == {"object_spilling_directory": "/mnt/nvme0/tmp/ray"}
    # A job that names no spill key at all: nothing to change (the platform's spill config decides).
    ev.configs = {"j1": {"entrypoint": "python x.py"}}
    assert compute_changes(entry.label.remedy, ev, "j1", captured_values(match))[0] == {}
    # No roomy local disk: nothing computed, so the incident escalates.
    ev.configs = {"j1": {"object_spilling_directory": None}}
    ev.disks = {"n1": [m.model_dump() for m in parse_df(DF) if m.mounted_on != "/mnt/nvme0"]}
    assert compute_changes(entry.label.remedy, ev, "j1", captured_values(match))[0] == {}


# --- a Job past its backoffLimit: its pods' termination names the cause --------------------------

def _backoff(pods: list[dict], earlier_log: str = "", config: dict | None = None) -> Evidence:
    ev = _ev(config or {"memory_limit_gi": 32}, reason="BackoffLimitExceeded", state="Failed")
    ev.jobs["j1"].attempts = pods
    if earlier_log:
        ev.docs.append(TextDoc("attempt_log", "job:j1", earlier_log.splitlines(), "get_logs:j1"))
    return ev


OOM_PODS = [{"attempt": 1, "job": "j1-a", "state": "OOMKilled", "reason": "OOMKilled"},
            {"attempt": 2, "job": "j1-b", "state": "OOMKilled", "reason": "OOMKilled"}]


def test_oomkilled_pods_behind_a_backoff_limit_make_it_a_host_oom():
    from crashcart.agent.policies.matching import match_label

    kb = load_playbooks()
    assert match_label(kb["host_oom"], _backoff(OOM_PODS)) is not None
    # Pods that failed with their own error name no memory cause.
    assert match_label(kb["host_oom"], _backoff([{"attempt": 1, "state": "Error", "reason": "Error"}])) is None
    # Only a Job that gave up after its pods failed: a failed job's old attempts are its own history.
    ev = _backoff(OOM_PODS)
    ev.jobs["j1"].reason = "Error"
    assert match_label(kb["host_oom"], ev) is None


def test_the_peak_an_earlier_finished_run_reported_sets_the_limit_but_proves_nothing():
    from crashcart.agent.policies.matching import match_label
    from crashcart.agent.policies.remedy import captured_values

    entry = load_playbooks()["host_oom"]
    history = "step 48000 done\nmax RSS 41.2 GiB (resource.getrusage)\n"
    ev = _backoff(OOM_PODS, history)
    match = match_label(entry, ev)
    assert captured_values(match)["peak"] == "41.2 GiB" and not any("RSS" in h.line for h in match.hits)
    changes, _ = compute_changes(entry.label.remedy, ev, "j1", captured_values(match))
    assert changes == {"memory_limit_gi": 52}  # 41.2 GiB with 25 % headroom, rounded up
    # Without it, the limit that was hit doubles.
    ev = _backoff(OOM_PODS)
    assert compute_changes(entry.label.remedy, ev, "j1", captured_values(match_label(entry, ev)))[0] == {"memory_limit_gi": 64}


def test_a_job_that_finished_before_is_not_leaking():
    from crashcart.agent.policies.matching import match_label

    entry = load_playbooks()["memory_leak"]
    log = "\n".join(f"loading index rss={r}GiB" for r in (10.1, 20.3, 30.2, 40.8))
    ev = _backoff(OOM_PODS)
    ev.docs.append(TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1"))
    assert match_label(entry, ev) is not None
    ev.jobs["j1"].attempts = [{"attempt": 1, "job": "j0", "state": "Succeeded", "reason": "Completed"}, *OOM_PODS]
    assert match_label(entry, ev) is None


# --- a node lost while a checkpoint was being written ------------------------------------------

def test_a_node_lost_mid_save_resumes_from_the_newest_whole_checkpoint_and_after_a_finished_save_it_does_not():
    from crashcart.agent.policies.matching import match_label

    entry = load_playbooks()["node_lost_during_checkpoint_save"]
    steps = [(1000, "/out/run/checkpoint-1000"), (1500, "/out/run/checkpoint-1500")]
    cut = ("Saving model checkpoint to /out/run/checkpoint-1500\n"
           "Configuration saved in /out/run/checkpoint-1500/config.json\n"
           "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***\n")
    ev = _ev({"resume_from_checkpoint": "/out/run/checkpoint-500"}, steps, cut)
    assert match_label(entry, ev) is not None
    assert compute_changes(entry.label.remedy, ev, "j1")[0] == {"resume_from_checkpoint": "/out/run/checkpoint-1000"}
    whole = cut.replace("Configuration saved", "Model weights saved in /out/run/checkpoint-1500/model.safetensors\nConfiguration saved")
    assert match_label(entry, _ev({"resume_from_checkpoint": None}, steps, whole)) is None


def test_a_later_run_that_failed_loading_the_partial_checkpoint_is_a_corrupt_checkpoint_not_a_node_loss():
    from crashcart.agent.policies.matching import match_label

    kb = load_playbooks()
    requeued = ("Saving model checkpoint to /out/run/checkpoint-1500\n"
                "slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE FAILURE ***\n"
                "Loading model from /out/run/checkpoint-1500.\n"
                "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer\n")
    ev = _ev({"resume_from_checkpoint": "/out/run/checkpoint-1500"}, log=requeued)
    assert match_label(kb["node_lost_during_checkpoint_save"], ev) is None
    assert match_label(kb["checkpoint_corrupt"], ev) is not None


def test_a_history_signal_must_be_a_log_signal_that_captures_something():
    import pytest
    from pydantic import ValidationError

    from crashcart.playbooks._model import Signal

    assert Signal(where="log", from_history=True, pattern=r"peak (?P<peak>\d+ GiB)").from_history
    for bad in ({"where": "events", "pattern": r"(?P<peak>\d+)"}, {"where": "log", "pattern": r"peak \d+"}):
        with pytest.raises(ValidationError, match="from_history"):
            Signal(from_history=True, **bad)
