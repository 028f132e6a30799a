"""A job Slurm kills at its time limit (started at session start: it takes 60-100 s)."""

from __future__ import annotations

from crashcart.tools import REGISTRY, ToolCall
from slurmlab import SlurmLab, new_job, run_agent


def test_time_limit_is_resubmitted_from_its_checkpoint(lab: SlurmLab, tmp_path):
    old = lab.background["time_limit"]
    assert lab.wait_state(old, "TIMEOUT", timeout=180) == "TIMEOUT"
    backend = lab.backend()
    # Its log has checkpoints: the restart budget counts from the latest one.
    facts = backend.target(ToolCall(tool="resubmit", args={"job": old}))
    assert facts.last_checkpoint is not None and facts.restarts_without_progress == 0

    state = run_agent(backend, {"kind": "job_failed", "job": old}, tmp_path / "s.duckdb")

    assert state["diagnosis"]["label"] == "job_timeout"
    assert any("TIMEOUT" in line or "TIME LIMIT" in line for line in state["diagnosis"]["evidence"])
    new = new_job(state)
    try:
        shown = lab.job(new)
        assert shown["TimeLimit"] == "00:01:00" and shown["JobName"] == "pretrain-tl"
        assert f"crashcart: resubmit of {old}" in shown["Comment"]
        # The resubmit is an earlier attempt of the new job now.
        history = backend.run(REGISTRY.get("job_history"), {"job": new}).rows
        assert [(r.job, r.attempt) for r in history] == [(old, 1), (new, None)]
    finally:
        lab.cancel(new)
