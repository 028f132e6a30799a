"""General rules behind older holdout failures: Kueue workloads belong to the job that owns them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from crashcart.agent.policies.evidence import build_evidence

NOW = datetime(2026, 8, 12, 16, 5, tzinfo=timezone.utc)


def _events(*objects: str) -> dict[str, Any]:
    events = [{"time": "2026-08-12T16:04:31Z", "type": "Normal", "reason": "Pending", "object": o,
               "message": "couldn't assign flavors to pod set main: insufficient unused quota for "
                          "nvidia.com/gpu in flavor a100, 8 more needed"} for o in objects]
    return {"tool": "kubectl_events", "args": {}, "ok": True, "data": {"events": events}, "text": ""}


@pytest.mark.parametrize("obj, entity", [
    # Kueue's workload name: <owner kind>-<owner name>-<5 hex>, for every integration's kind.
    ("workload/team-a/job-ft-mixtral-8x22b-legal-5c1e2", "job:ft-mixtral-8x22b-legal"),
    ("workload/speech/jobset-asr-v9-0a9ff", "job:asr-v9"),
    ("workload/robotics/rayjob-policy-distill-bc-v4-8e0d2", "job:policy-distill-bc-v4"),
    ("workload/nlp/pytorchjob-llama-sft-41b7c", "job:llama-sft"),
    # Not Kueue's form (no hash, unknown kind prefix): the object's own name.
    ("workload/nlp/llama-sft", "job:llama-sft"),
    ("workload/nlp/notakind-llama-sft-41b7c", "job:notakind-llama-sft-41b7c"),
    # Only Workload objects are renamed: a pod named like one stays itself.
    ("pod/nlp/job-train-0-41b7c", "job:job-train-0-41b7c"),
])
def test_kueue_workload_events_point_at_the_owning_job(obj: str, entity: str) -> None:
    ev = build_evidence([_events(obj)], {"kind": "job_pending", "job": "x"}, NOW)
    assert [d.entity for d in ev.docs if d.source == "events"] == [entity]
