"""A shortened job id in a question resolves to the one job whose id starts with it, or is
reported ambiguous with the candidates (never a guess); a node that died under a job is the root
cause, read from the node listing (DEAD, NotReady, or no longer listed)."""

from __future__ import annotations

from datetime import datetime, timezone

from crashcart.agent.policies.evidence import Evidence, JobFacts
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.playbooks import load_playbooks

NOW = datetime(2026, 11, 24, 16, 30, tzinfo=timezone.utc)


def _chat(text: str, *ids: str) -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": "chat", "text": text})
    for j in ids:
        ev.jobs[j] = JobFacts(job=j, state="FAILED")
    return ev


def test_an_ellided_ray_id_means_the_one_job_it_starts():
    ev = _chat("my job (raysubmit_bT7...) waits for an hour", "raysubmit_bT7nW2qPz8Lc", "raysubmit_Qa1sD4fG7hJk")
    assert ev.focus_jobs() == ["raysubmit_bT7nW2qPz8Lc"]
    assert ev.unmatched_names() == []


def test_the_first_characters_of_an_opaque_id_without_dots():
    ev = _chat("what killed raysubmit_8cWkq?", "raysubmit_8cWkq2Lm9Xz1", "raysubmit_8cWpA0Lm9Xz1")
    assert ev.focus_jobs() == ["raysubmit_8cWkq2Lm9Xz1"]


def test_a_workload_name_without_its_generated_suffix():
    ev = _chat("why did train-mt5-28870110 fail?", "train-mt5-28870110-qv5sd", "train-mt5-28868670-h2k9d")
    assert ev.focus_jobs() == ["train-mt5-28870110-qv5sd"]


def test_several_jobs_starting_with_it_are_ambiguous_and_none_is_picked():
    ev = _chat("job 88120... died overnight", "881201", "881207", "881310")
    assert ev.focus_jobs() == []
    assert ev.shortened_ids() == {"88120": ["881201", "881207"]}
    rows = [{"job": j, "state": "FAILED", "name": n, "user": u}
            for j, n, u in (("881201", "llama-sft", "rv"), ("881207", "vit-l", "km"), ("881310", "asr", "rv"))]
    obs = [{"tool": "list_jobs", "args": {}, "ok": True, "text": "", "data": {"rows": rows}}]
    diagnosis, plan = PlaybookPolicy(kb=load_playbooks()).diagnose({"observations": obs, "trigger": ev.trigger}, NOW)
    assert (diagnosis.label, diagnosis.remedy, plan) == ("unrecognized", "none", [])
    assert "881201 (llama-sft" in diagnosis.summary and "881207 (vit-l" in diagnosis.summary
    assert "881310" not in diagnosis.summary


def test_a_bare_number_is_never_taken_for_the_start_of_another():
    # 48213 is not job 482130's id shortened: people type whole numeric ids; only dots say "shortened".
    ev = _chat("why did 48213 fail?", "482130")
    assert ev.focus_jobs() == [] and ev.unmatched_names() == ["48213"]
    assert _chat("why did 48213... fail?", "482130").focus_jobs() == ["482130"]


def test_a_short_prefix_without_a_boundary_or_dots_is_not_a_guess():
    ev = _chat("is llama-7 ok?", "llama-70b-sft")
    assert ev.focus_jobs() == []


def test_an_exact_id_still_wins_over_a_longer_one_it_starts():
    ev = _chat("why did train-a1 fail?", "train-a1", "train-a1-retry")
    assert ev.focus_jobs() == ["train-a1"]


def _ray_obs(node_state: str | None) -> list[dict]:
    log = ("The node with node id: 3f1a and address: 10.0.44.58 and node name: 10.0.44.58 has been marked dead "
           "because the detector has missed too many heartbeats from it.\n"
           "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n")
    rows = [{"node": "w-10-0-44-17", "state": "allocated", "gpus": 4}]
    if node_state:
        rows.append({"node": "w-10-0-44-58", "state": node_state, "gpus": 4})
    return [
        {"tool": "ray_job_status", "args": {"job": "raysubmit_X"}, "ok": True, "text": "FAILED",
         "data": {"status": "FAILED", "row": {"job": "raysubmit_X", "state": "FAILED",
                                              "nodes": ["w-10-0-44-17", "w-10-0-44-58"]}}},
        {"tool": "get_logs", "args": {"job": "raysubmit_X"}, "ok": True, "text": log, "data": {}},
        {"tool": "ray_list_nodes", "args": {}, "ok": True, "text": "", "data": {"rows": rows}},
    ]


def _diagnose(obs):
    state = {"observations": obs, "trigger": {"kind": "job_failed", "job": "raysubmit_X"}, "backend": "ray"}
    return PlaybookPolicy(kb=load_playbooks()).diagnose(state, NOW)


def test_a_node_that_died_under_the_job_is_the_root_cause_and_the_job_is_rerun():
    for state in ("down", "not_ready", None):  # DEAD (normalised), NotReady, gone from the listing
        diagnosis, plan = _diagnose(_ray_obs(state))
        assert diagnosis.label == "ray_node_died", state
        assert diagnosis.root_cause == "node:w-10-0-44-58", state
        assert [c.tool for c in plan] == ["resubmit"], state


def test_no_dead_node_shown_means_no_node_is_blamed():
    obs = _ray_obs("allocated")
    diagnosis, _ = _diagnose(obs)
    assert diagnosis.root_cause is None
