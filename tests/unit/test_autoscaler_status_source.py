"""`ray status` read from the cluster is text a label reads (source autoscaler_status), as the same
words echoed in a driver's log are: a pending Ray job whose node type is at max_workers is told so."""

from __future__ import annotations

from datetime import datetime, timezone

from crashcart.agent.policies.evidence import build_evidence
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.playbooks import load_playbooks

NOW = datetime(2026, 11, 3, 10, 40, tzinfo=timezone.utc)
STATUS = """======== Autoscaler status: 2026-11-03 10:40:00.000000 ========
Node status
---------------------------------------------------------------
Active:
 6 l4-workers
 1 head
Idle:
 (no idle nodes)
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 288.0/304.0 CPU
 24.0/24.0 GPU

Demands:
 {'GPU': 1.0, 'CPU': 1.0}: 4+ pending tasks/actors
"""

def _obs(status: str) -> list[dict]:
    return [
        {"tool": "ray_job_status", "args": {"job": "raysubmit_U"}, "ok": True,
         "text": "Status for job 'raysubmit_U': PENDING", "data": {"status": "PENDING",
                                                                   "row": {"job": "raysubmit_U", "state": "PENDING"}}},
        {"tool": "ray_autoscaler_status", "args": {}, "ok": True, "text": status,
         "data": {"autoscaler": {"node_types": [{"name": "l4-workers", "max_workers": 6, "running": 6}]}}},
    ]


def _diagnose(status: str):
    state = {"observations": _obs(status), "trigger": {"kind": "job_pending", "job": "raysubmit_U"}, "backend": "ray"}
    return PlaybookPolicy(kb=load_playbooks()).diagnose(state, NOW)[0]


def test_the_status_read_is_a_text_document():
    ev = build_evidence(_obs(STATUS), {"kind": "job_pending", "job": "raysubmit_U"}, NOW)
    assert [d.source for d in ev.docs if d.entity == "cluster"] == ["autoscaler_status"]


def test_a_pending_job_at_max_workers_is_told_the_binding_limit():
    d = _diagnose(STATUS)
    assert (d.label, d.remedy, d.root_cause) == ("capacity_autoscaler_at_max", "wait", "cluster")
    assert "max_workers=6" in d.summary


def test_a_node_being_launched_is_not_at_max():
    launching = STATUS.replace(" (no pending nodes)", " l4-workers, 1 launching")
    assert _diagnose(launching).label != "capacity_autoscaler_at_max"
