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
