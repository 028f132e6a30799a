"""A job's fault seen in several jobs is their shared dependency's fault (one credential, one secret).

The policy looks at the recently failed peers of the job (same partition or namespace) when a
label asks for it, and a label with `shared_after_jobs` points at the cluster once that many
jobs show its required error.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.playbooks import load_playbooks

NOW = datetime(2027, 8, 12, 7, 30, tzinfo=timezone.utc)
EXPIRED = ("botocore.exceptions.ClientError: An error occurred (ExpiredToken) when calling the "
           "GetObject operation: The provided token has expired.")
GOOGLE = "google.auth.exceptions.RefreshError: ('invalid_grant: Bad Request', {'error': 'invalid_grant'})"


def _evidence(logs: dict[str, str], partitions: dict[str, str], ended_hours_ago: dict[str, float]) -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": "job_failed", "job": "a"})
    for job, part in partitions.items():
        ev.jobs[job] = JobFacts(job=job, state="FAILED", partition=part,
                                end_time=NOW - timedelta(hours=ended_hours_ago[job]))
    ev.docs = [TextDoc("log", f"job:{j}", text.splitlines(), f"get_logs:{j}") for j, text in logs.items()]
    return ev


def _root(ev: Evidence) -> str | None:
    policy = PlaybookPolicy()
    match = match_label(policy.kb["storage_credentials_expired"], ev)
    assert match is not None
    return policy._root_cause(match, ev)


def test_one_job_with_expired_credentials_is_that_jobs_fault():
    ev = _evidence({"a": EXPIRED, "b": "step 10 loss 2.1"}, {"a": "p", "b": "p"}, {"a": 0.5, "b": 1})
    assert _root(ev) == "job:a"


def test_two_jobs_with_the_same_credential_error_share_the_cause():
    ev = _evidence({"a": EXPIRED, "b": GOOGLE.replace("Bad Request", "Invalid JWT Signature.")},
                   {"a": "p", "b": "p"}, {"a": 0.5, "b": 1})
    assert _root(ev) == "cluster"


def test_failed_peers_are_recent_failures_of_the_same_partition_latest_first():
    ev = _evidence({}, {"a": "p", "b": "p", "c": "p", "d": "other", "e": "p"},
                   {"a": 0.2, "b": 3, "c": 1, "d": 1, "e": 50})
    ev.jobs["f"] = JobFacts(job="f", state="RUNNING", partition="p")
    assert ev.failed_peers() == ["c", "b"]


def test_the_credentials_label_asks_for_the_peers_logs():
    ev = _evidence({"a": EXPIRED}, {"a": "p", "b": "p"}, {"a": 0.5, "b": 1})
    match = match_label(load_playbooks()["storage_credentials_expired"], ev)
    calls = PlaybookPolicy()._steps(match, ev, "slurm")
    assert any(c.tool == "get_logs" and c.args == {"job": "b"} for c in calls)
