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


# --- a partition recorded as scontrol printed it ------------------------------------------------

def _slurm(events: list[dict[str, Any]], partitions: list[dict[str, Any]] | None = None):
    from crashcart.tools import REGISTRY
    from crashcart.tools.backends.fixture import FixtureBackend
    from crashcart.tools.cluster import Cluster

    cluster = Cluster.model_validate({
        "now": "2026-02-18T08:30:00Z", "partitions": partitions or [], "events": events,
        "nodes": [{"name": f"g{i}", "state": "idle", "partition": p, "gpus": 8}
                  for i, p in enumerate(["long", "long", "short"])],
    })
    backend = FixtureBackend(cluster, "slurm")
    spec = REGISTRY.get("partition_info")
    return lambda name: backend.run(spec, spec.parse_args({"partition": name}))


def _record(obj: str, line: str, time: str = "2026-02-17T17:00:00Z") -> dict[str, Any]:
    return {"time": time, "reason": "PartitionConfig", "object": obj, "message": line}


def test_partition_info_serves_a_recorded_scontrol_record() -> None:
    info = _slurm([
        _record("partition/long", "PartitionName=long AllowGroups=ALL Default=NO MaxNodes=8 MaxTime=1-00:00:00 State=UP",
                "2026-01-01T00:00:00Z"),
        # The latest record is what scontrol prints today.
        _record("partition/long", "PartitionName=long AllowGroups=ALL Default=NO DefaultTime=04:00:00 MaxNodes=8 "
                "MaxTime=2-00:00:00 State=UP TotalNodes=2"),
    ])
    out = info("long")
    assert out.max_time == "2-00:00:00"
    assert "MaxTime=2-00:00:00" in out.text and "DefaultTime=04:00:00" in out.text and "MaxNodes=8" in out.text


@pytest.mark.parametrize("events", [
    [],
    # Another partition's record, or a message that is not scontrol's record, says nothing of this one.
    [_record("partition/short", "PartitionName=short MaxTime=02:00:00 State=UP")],
    [_record("partition/long", "partition long set to MaxTime=2-00:00:00 by admin")],
    [_record("node/long", "PartitionName=long MaxTime=2-00:00:00 State=UP")],
])
def test_partition_info_without_a_record_invents_no_limit(events: list[dict[str, Any]]) -> None:
    out = _slurm(events)("long")
    assert out.max_time is None and "MaxTime" not in out.text


def test_the_partitions_section_wins_over_a_record() -> None:
    out = _slurm([_record("partition/long", "PartitionName=long MaxTime=2-00:00:00 State=UP")],
                 [{"name": "long", "max_time": "7-00:00:00"}])("long")
    assert out.max_time == "7-00:00:00"


# --- a job Slurm held after a failed launch ------------------------------------------------------

@pytest.mark.parametrize("state, reason, held", [
    ("PENDING", "launch failed requeued held", True),   # squeue
    ("PENDING", "launch_failed_requeued_held", True),   # scontrol, spaces made underscores
    ("REQUEUED", "launch failed requeued held", True),
    ("PENDING", "JobHeldUser", False),                  # a person's hold
    ("PENDING", "JobHeldAdmin", False),
    ("PENDING", "Resources", False),
    ("FAILED", "launch failed requeued held", False),   # no longer queued
])
def test_held_after_failed_launch(state: str, reason: str, held: bool) -> None:
    from crashcart.tools.backends.base import held_after_failed_launch

    assert held_after_failed_launch(state, reason) is held


def _held_cluster(reason: str):
    from crashcart.tools import REGISTRY
    from crashcart.tools.backends.fixture import FixtureBackend
    from crashcart.tools.cluster import Cluster

    cluster = Cluster.model_validate({
        "now": "2026-12-03T07:20:00Z",
        "nodes": [{"name": n, "state": "idle", "partition": "p", "gpus": 8} for n in ("a1", "a2", "a3")],
        "jobs": [{"id": "77", "state": "PENDING", "reason": reason, "partition": "p", "config": {"nodes": 2}}],
    })
    backend = FixtureBackend(cluster, "slurm")
    spec = REGISTRY.get("resubmit")
    return backend, lambda **args: backend.run(spec, spec.parse_args({"job": "77", "reason": "r", **args}))


def test_fixture_releases_a_held_job_in_place() -> None:
    backend, resubmit = _held_cluster("launch failed requeued held")
    out = resubmit(exclude_nodes=["a1"])
    assert out.new_job == "77" and "scontrol release 77" in out.message
    assert [j.id for j in backend.cluster.jobs] == ["77"]
    job = backend.cluster.jobs[0]
    assert job.reason is None and job.config["exclude_nodes"] == ["a1"]


@pytest.mark.parametrize("reason, args", [
    ("launch failed requeued held", {"changes": {"nodes": 1}}),
    ("JobHeldUser", {"exclude_nodes": ["a1"]}),
])
def test_fixture_copies_a_job_it_cannot_release(reason: str, args: dict[str, Any]) -> None:
    backend, resubmit = _held_cluster(reason)
    out = resubmit(**args)
    assert out.new_job == "77-r1" and [j.id for j in backend.cluster.jobs] == ["77", "77-r1"]
