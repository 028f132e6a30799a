"""A job waiting with reason Priority is told which factor ranks it low, from sshare and sprio."""

from crashcart.agent.policies.constraint import priority_factors
from crashcart.agent.policies.evidence import Evidence, JobFacts


def _ev(fairshare: float | None) -> Evidence:
    ev = Evidence(now=None, trigger={"kind": "job_pending", "job": "1"})
    ev.jobs["1"] = JobFacts(job="1", state="PENDING", reason="Priority", account="geo", gpus=8)
    ev.jobs["2"] = JobFacts(job="2", state="PENDING", reason="Priority", account="med", gpus=8)
    if fairshare is not None:
        ev.limits["shares"] = [
            {"account": "geo", "user": None, "norm_shares": 0.2, "effectv_usage": 0.5, "fairshare": fairshare},
            {"account": "med", "user": None, "norm_shares": 0.8, "effectv_usage": 0.5, "fairshare": 0.7}]
        ev.limits["priorities"] = [{"job": "1", "fairshare": 120}, {"job": "2", "fairshare": 5400}]
    return ev


def test_a_spent_fair_share_is_named_with_its_numbers():
    answer, lines, _ = priority_factors(_ev(0.05))
    assert "fair share is spent" in answer and "geo" in answer and "50%" in answer and "20%" in answer
    assert any("sprio" in line and "120" in line and "5400" in line for line in lines)


def test_no_shortfall_or_no_tables_blame_no_account():
    for ev in (_ev(0.6), _ev(None)):
        answer, lines, _ = priority_factors(ev)
        assert "spent" not in answer and "geo" not in answer and lines == []
