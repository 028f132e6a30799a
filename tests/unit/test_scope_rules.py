"""Scope and non-incident rules read from the evidence, not from one scenario's words.

Who cancelled a job (sacct's "CANCELLED by <uid>" against the owner's uid from the job's own
`id` output) decides between an owner's decision (no incident) and someone else's (infra asks
why).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from crashcart.agent.policies.evidence import build_evidence, cancelled_by
from crashcart.agent.policies.playbook import PlaybookPolicy

NOW = datetime(2027, 5, 4, 12, 0, tzinfo=timezone.utc)


def _obs(tool: str, args: dict[str, Any], text: str = "", **data: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args, "ok": True, "data": data, "text": text}


def _job(job: str, state: str, nodes: list[str], user: str = "kim", started_h: float = 6,
         ended_h: float | None = 1, gpus: int = 8, partition: str = "gpu") -> dict[str, Any]:
    row = {"job": job, "state": state, "user": user, "nodes": nodes, "gpus": gpus, "partition": partition,
           "start_time": (NOW - timedelta(hours=started_h)).isoformat()}
    if ended_h is not None:
        row["end_time"] = (NOW - timedelta(hours=ended_h)).isoformat()
    return row


CANCEL_LOG = """+ id
uid={uid}(kim) gid=500(ml) groups=500(ml)
step 900 | loss 2.01
slurmstepd: error: *** JOB 71 ON n1 CANCELLED AT 2027-05-04T11:00:00 ***
srun: error: n1: task 0: Terminated
"""


def _cancel_state(state: str, log: str | None) -> dict[str, Any]:
    obs = [_obs("sacct", {"job": "71"}, rows=[_job("71", state, ["n1"])])]
    if log is not None:
        obs.append(_obs("get_logs", {"job": "71"}, log))
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": "71"}, "backend": "slurm"}


@pytest.mark.parametrize("state, log, who", [
    ("CANCELLED by 0", CANCEL_LOG.format(uid=4242), "system"),
    ("CANCELLED by 4242", CANCEL_LOG.format(uid=4242), "owner"),
    ("CANCELLED by 1001", CANCEL_LOG.format(uid=4242), "other"),
    ("CANCELLED by 1001", "step 900 | loss 2.01\n", "person"),
    ("FAILED", CANCEL_LOG.format(uid=4242), None),
])
def test_who_cancelled(state: str, log: str, who: str | None) -> None:
    st = _cancel_state(state, log)
    ev = build_evidence(st["observations"], st["trigger"], NOW)
    assert cancelled_by(ev, "71") == who


def test_an_id_line_of_another_user_does_not_name_the_owner() -> None:
    log = CANCEL_LOG.format(uid=4242).replace("(kim)", "(svc-runner)")
    st = _cancel_state("CANCELLED by 1001", log)
    assert cancelled_by(build_evidence(st["observations"], st["trigger"], NOW), "71") == "person"


def test_owner_cancel_is_no_incident_and_another_uid_goes_to_infra() -> None:
    policy = PlaybookPolicy()
    own, acts = policy.diagnose(_cancel_state("CANCELLED by 4242", CANCEL_LOG.format(uid=4242)), NOW)
    assert (own.label, own.family, own.remedy, acts) == ("job_cancelled_by_user", "none", "none", [])
    other, acts = policy.diagnose(_cancel_state("CANCELLED by 1001", CANCEL_LOG.format(uid=4242)), NOW)
    assert (other.label, other.family, other.remedy) == ("job_cancelled_by_admin", "scheduling", "escalate_infra")
    assert [a.tool for a in acts] == ["escalate"]
