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


# --- the RDMA device a job's pods ask for -------------------------------------------------------

T_RDMA = datetime(2026, 9, 19, 15, tzinfo=timezone.utc)
NO_IB = ("host:61:134 [0] NCCL INFO NET/IB : No device found.\n"
         "host:61:134 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.4<0>\n"
         "host:61:134 [0] NCCL INFO Using network Socket\n")


def _rdma_ev(config: dict[str, Any] | None, peers: list[dict[str, Any]] = (), log: str = NO_IB):
    from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc

    ev = Evidence(now=T_RDMA, trigger={"kind": "chat", "job": "j1"})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")]
    ev.jobs = {"j1": JobFacts(job="j1", name="lora-a", user="ana", partition="nlp", state="Running",
                              submit_time=datetime(2026, 9, 19, 9, tzinfo=timezone.utc))}
    ev.configs = {"j1": config} if config is not None else {}
    for p in peers:
        facts = {"name": "lora-b", "user": "ana", "partition": "nlp", "state": "Succeeded",
                 "end_time": datetime(2026, 8, 21, 16, tzinfo=timezone.utc), **p.get("facts", {})}
        ev.jobs[p["id"]] = JobFacts(job=p["id"], **facts)
        ev.configs[p["id"]] = p["config"]
    return ev


def _rdma_entry():
    from crashcart.playbooks import load_playbooks

    return next(e for e in load_playbooks() if e.name == "rdma_device_not_requested")


def test_owner_good_runs_take_the_same_job_first_then_the_owners_jobs_in_the_namespace() -> None:
    ev = _rdma_ev({"rdma_devices_per_pod": 0}, [
        {"id": "other-ns", "config": {}, "facts": {"partition": "vision"}},
        {"id": "other-user", "config": {}, "facts": {"user": "bo"}},
        {"id": "failed", "config": {}, "facts": {"state": "Failed"}},
        {"id": "after", "config": {}, "facts": {"end_time": datetime(2026, 9, 19, 12, tzinfo=timezone.utc)}},
        {"id": "sibling", "config": {}},
        {"id": "same-name", "config": {}, "facts": {"name": "lora-a", "end_time": datetime(2026, 7, 1, tzinfo=timezone.utc)}},
    ])
    assert ev.owner_good_runs("j1") == ["same-name", "sibling"]


@pytest.mark.parametrize("peers, value", [
    ([{"id": "p", "config": {"rdma_devices_per_pod": 1}}], 1),
    # The value is read from whichever of the setting's keys the earlier run used.
    ([{"id": "p", "config": {"resources": {"limits": {"rdma/hca_shared_devices_a": 2}}}}], 2),
    ([{"id": "p", "config": {"rdma_devices_per_pod": 0}}], None),   # that run had none either
    ([{"id": "p", "config": {}}], None),
    ([], None),
])
def test_rdma_devices_come_from_a_run_that_had_them(peers: list[dict[str, Any]], value: Any) -> None:
    from crashcart.agent.policies.computed import rdma_devices_of_good_run

    assert rdma_devices_of_good_run(_rdma_ev({"rdma_devices_per_pod": 0}, peers), "j1", {}, None) == value


@pytest.mark.parametrize("config, log, waits, matches", [
    (None, NO_IB, True, False),                          # the log says it; the job's own request decides
    ({"rdma_devices_per_pod": 0}, NO_IB, True, True),
    ({"rdma_devices_per_pod": 1}, NO_IB, True, False),   # it asked for one: something else hides it
    ({"other": 1}, NO_IB, True, False),
    (None, "NCCL INFO Using network IB\n", False, False),  # nothing points at it: no config read
])
def test_the_rdma_label_reads_the_config_only_when_its_log_evidence_is_there(config, log, waits, matches) -> None:
    from crashcart.agent.policies.matching import match_label, waits_for_config

    ev = _rdma_ev(config, log=log)
    entry = _rdma_entry()
    assert (match_label(entry, ev) is not None) is matches
    # Worth a job_config read whenever the log evidence is there (a read already made is not repeated).
    assert waits_for_config(entry, ev) is waits


# --- a fix goes to the upstream job that never starts -------------------------------------------

@pytest.mark.parametrize("root, fixed", [
    ("job:up", "up"),          # the root cause is the job the focus job waits on
    ("job:other", "eval"),     # a job it does not wait on is no target
    ("node:n1", "eval"),
    (None, "eval"),
])
def test_the_fix_goes_to_the_upstream_job_the_diagnosis_names(root: str | None, fixed: str) -> None:
    from crashcart.agent.policies.evidence import Evidence, JobFacts
    from crashcart.agent.policies.playbook import PlaybookPolicy

    ev = Evidence(now=T_RDMA, trigger={"kind": "job_pending", "job": "eval"})
    ev.jobs = {"eval": JobFacts(job="eval", state="PENDING", reason="Dependency", depends_on=["up"]),
               "up": JobFacts(job="up", state="PENDING", reason="PartitionTimeLimit"),
               "other": JobFacts(job="other", state="PENDING")}
    assert PlaybookPolicy._fixed_job(root, ev) == fixed
