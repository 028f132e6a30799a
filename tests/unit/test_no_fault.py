"""A "healthy" verdict needs positive evidence; a job nothing explains is "could not tell"."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.no_fault import NoFaultTableError, load_table, standing, unexplained
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.playbooks import load_playbooks

NOW = datetime(2026, 9, 30, 12, 0, tzinfo=timezone.utc)
KB = load_playbooks()


def _ev(kind: str, job: str, **facts) -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": kind, "job": job})
    ev.jobs[job] = JobFacts(job=job, **facts)
    return ev


def _log(ev: Evidence, job: str, minutes_ago: float) -> None:
    ev.docs.append(TextDoc("log", f"job:{job}", ["step 100 loss 1.2"], f"get_logs:{job}", NOW - timedelta(minutes=minutes_ago)))


def test_pending_with_a_by_design_reason_is_fine_and_says_why():
    s = standing(_ev("job_pending", "1", state="PENDING", reason="BeginTime"), "1", KB)
    assert s.unexplained is None and "--begin" in s.why


def test_pending_with_no_reason_anything_explains_is_unexplained():
    for reason in (None, "SomethingNew"):
        s = standing(_ev("job_pending", "1", state="Pending", reason=reason), "1", KB)
        assert s.unexplained == "pending"


def test_a_suspended_workload_is_a_wait_by_design():
    assert standing(_ev("job_pending", "j", state="Suspended", reason="JobSuspended"), "j", KB).unexplained is None


def test_a_stalled_job_needs_progress_to_be_fine():
    silent = _ev("job_stalled", "7", state="RUNNING")
    _log(silent, "7", 95)
    assert standing(silent, "7", KB).unexplained == "stalled"
    busy = _ev("job_stalled", "7", state="RUNNING")
    _log(busy, "7", 3)
    assert standing(busy, "7", KB).unexplained is None


def test_a_running_job_another_trigger_asks_about_is_fine():
    # A job_failed alert on a pod that runs again, a chat question: the scheduler runs it.
    assert standing(_ev("job_failed", "p", state="Running"), "p", KB).unexplained is None


def test_a_job_the_scheduler_has_no_record_of_is_missing():
    ev = Evidence(now=NOW, trigger={"kind": "job_pending", "job": "404"})
    assert [s.unexplained for s in unexplained(ev, KB)] == ["missing"]


def test_finished_is_fine():
    assert standing(_ev("chat", "3", state="COMPLETED"), "3", KB).unexplained is None


def test_policy_escalates_what_it_could_not_tell_and_never_says_healthy():
    policy = PlaybookPolicy(kb=KB)
    obs = [{"tool": "sacct", "args": {"job": "5"}, "ok": True, "text": "",
            "data": {"rows": [{"job": "5", "state": "PENDING", "reason": "NewReason", "partition": "a100"}]}}]
    diagnosis, plan = policy.diagnose({"observations": obs, "trigger": {"kind": "job_pending", "job": "5"}}, NOW)
    assert diagnosis.label == "unrecognized" and diagnosis.remedy == "escalate_infra"
    assert diagnosis.family == "scheduling" and any("NewReason" in e for e in diagnosis.evidence)
    assert [(c.tool, c.args["team"]) for c in plan] == [("escalate", "infra")]


def test_policy_says_healthy_on_a_by_design_wait_with_the_reason():
    policy = PlaybookPolicy(kb=KB)
    obs = [{"tool": "sacct", "args": {"job": "5"}, "ok": True, "text": "",
            "data": {"rows": [{"job": "5", "state": "PENDING", "reason": "JobHeldUser", "partition": "a100"}]}}]
    diagnosis, plan = policy.diagnose({"observations": obs, "trigger": {"kind": "job_pending", "job": "5"}}, NOW)
    assert (diagnosis.label, diagnosis.remedy, plan) == ("healthy", "none", [])
    assert "holds it" in diagnosis.evidence[0]


def test_a_bad_table_is_a_clear_error_naming_the_file(tmp_path):
    bad = tmp_path / "no_fault.yaml"
    bad.write_text("by_design: {}\nprogress: {step_minutes: 0, log_minutes: 10}\nundetermined: {}\n")
    with pytest.raises(NoFaultTableError) as e:
        load_table(str(bad))
    assert "no_fault.yaml" in str(e.value) and "step_minutes" in str(e.value)
    partial = tmp_path / "partial.yaml"
    partial.write_text("by_design: {}\nprogress: {step_minutes: 30, log_minutes: 10}\n"
                       "undetermined: {pending: {family: scheduling, team: infra}}\n")
    with pytest.raises(NoFaultTableError, match="no route for stalled"):
        load_table(str(partial))
