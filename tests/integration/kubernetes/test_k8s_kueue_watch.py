"""`watch` under Kueue: a Workload that waits in a way that will not end by itself opens an
incident (a request beyond the ClusterQueue's maximum capacity; a wait past the pending
threshold on quota its own queue's workloads hold); ordinary waiting does not. Objects shaped as
Kueue v1beta1 writes them, messages in the flavor assigner's words."""

from __future__ import annotations

from datetime import timedelta

import pytest

import kubeseed as k
from test_k8s_agent import ALLOW_ALL

NEVER = ("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, "
         "request > maximum capacity (128 > 64)")
UNUSED = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, {n} more needed"


def queued(lab, name: str, pods: int, queue: str = "team-a", waited: timedelta = timedelta(minutes=3),
           pending: str | None = None, admitted: bool = False, user: str = "dana"):
    """A batch Job of `pods` 8-GPU pods that Kueue manages, and the Workload Kueue made for it."""
    job = k.job(name, labels={"user": user, "kueue.x-k8s.io/queue-name": queue})
    job["spec"].update(parallelism=pods, completions=pods, suspend=not admitted)
    job["metadata"]["creationTimestamp"] = k.ts(k.ago() - waited)
    job = lab.add(job)
    wl = k.kueue_workload(job, queue, pending=pending, admitted_to="gpu-cq" if admitted else None, at=k.ago() - waited)
    wl["metadata"]["creationTimestamp"] = k.ts(k.ago() - waited)
    wl = lab.add(wl)
    if pending:
        # Kueue's scheduler records each failed attempt on the Workload (type Normal, reason Pending).
        lab.add(k.event(wl, "Pending", pending, type_="Normal", component="kueue-admission", count=40))
    return job, wl


@pytest.fixture
def team_queue(lab):
    """ClusterQueue gpu-cq (64 H100 GPUs nominal, alone in its cohort, so nothing to borrow),
    full with the team's own 8 admitted 8-GPU jobs."""
    lab.store.install_crd("workloads", "clusterqueues", "localqueues")
    for i in range(8):
        lab.add(k.node(f"gpu-a{i:02d}"))
    lab.add(k.clusterqueue("gpu-cq", gpus=64, reserved=64, used=64, pending=3, admitted=8))
    lab.add(k.localqueue("team-a", "train", "gpu-cq"))
    for i in range(8):
        queued(lab, f"sweep-{i}", 1, waited=timedelta(hours=2), admitted=True, user="tobias")
    return lab


def test_only_waits_that_will_not_end_are_reported(team_queue):
    lab = team_queue
    queued(lab, "pretrain-128g", 16, waited=timedelta(minutes=2), pending=NEVER)
    queued(lab, "ft-32g", 4, waited=timedelta(minutes=40), pending=UNUSED.format(n=32))
    queued(lab, "eval-8g", 1, waited=timedelta(minutes=4), pending=UNUSED.format(n=8))  # ordinary waiting
    b = lab.backend(pending_minutes=30)
    changes = b.changes_since(b.now() - timedelta(minutes=10), stall_minutes=45)
    assert sorted((r.job, r.reason, r.user) for r in changes.pending) == [
        ("train/ft-32g", "KueueQuotaHeldByQueue", "dana"), ("train/pretrain-128g", "KueueRequestExceedsQuota", "dana")]
    assert changes.failed == []
    # Kueue's objects are kept by list + watch like the rest: listed once, then watched.
    listed = [p for m, p, q, _ in lab.store.requests if m == "GET" and "watch" not in q and "kueue.x-k8s.io/v1beta1/" in p]
    assert sorted(listed) == ["/apis/kueue.x-k8s.io/v1beta1/clusterqueues", "/apis/kueue.x-k8s.io/v1beta1/localqueues",
                              "/apis/kueue.x-k8s.io/v1beta1/workloads"]
    again = b.changes_since(b.now() - timedelta(minutes=1), stall_minutes=45)
    assert len(again.pending) == 2
    listed_again = [p for m, p, q, _ in lab.store.requests if m == "GET" and "watch" not in q and "kueue.x-k8s.io/v1beta1/" in p]
    assert listed_again == listed


def test_inside_the_threshold_or_on_quota_held_elsewhere_is_ordinary_waiting(lab):
    """A long wait on quota that another ClusterQueue of the cohort borrowed is Kueue's to
    reclaim, and a short wait on the team's own quota is what a queue is for: no incident."""
    lab.store.install_crd("workloads", "clusterqueues", "localqueues")
    lab.add(k.node("gpu-a01"))
    # gpu-cq lent its 64 GPUs: research-cq's workloads reserve them (as borrowed), none of its own do.
    lab.add(k.clusterqueue("gpu-cq", gpus=64, reserved=0, used=0, pending=2, admitted=0))
    other = k.clusterqueue("research-cq", gpus=64, reserved=128, used=128, pending=0, admitted=16)
    for usage in other["status"]["flavorsReservation"] + other["status"]["flavorsUsage"]:
        next(r for r in usage["resources"] if r["name"] == "nvidia.com/gpu")["borrowed"] = "64"
    lab.add(other)
    lab.add(k.localqueue("team-a", "train", "gpu-cq"))
    queued(lab, "ft-32g", 4, waited=timedelta(minutes=90), pending=UNUSED.format(n=32))
    queued(lab, "eval-8g", 1, waited=timedelta(minutes=2), pending=UNUSED.format(n=8))
    b = lab.backend(pending_minutes=30)
    assert b.changes_since(b.now() - timedelta(minutes=10), stall_minutes=45).pending == []


def test_without_kueue_the_watch_asks_for_nothing_of_it(lab):
    lab.add(k.node("gpu-a01"))
    b = lab.backend()
    assert b.changes_since(b.now() - timedelta(minutes=10), stall_minutes=45).pending == []
    assert not [p for _, p, _, _ in lab.store.requests if "kueue" in p]


def test_watch_opens_one_incident_each_and_the_diagnosis_names_the_queue_and_numbers(team_queue, tmp_path):
    from crashcart.agent.guard import policy_from_dict
    from crashcart.agent.policies import make_policy
    from crashcart.agent.runner import make_deps
    from crashcart.agent.store import IncidentStore
    from crashcart.agent.watch import Watcher, WatchSettings

    lab = team_queue
    queued(lab, "pretrain-128g", 16, waited=timedelta(minutes=2), pending=NEVER)
    queued(lab, "ft-32g", 4, waited=timedelta(minutes=40), pending=UNUSED.format(n=32))
    queued(lab, "eval-8g", 1, waited=timedelta(minutes=4), pending=UNUSED.format(n=8))
    store = IncidentStore(str(tmp_path / "s.duckdb"))
    policy = policy_from_dict(ALLOW_ALL).model_copy(update={"mode": "dry_run"})
    deps = make_deps(lab.backend(pending_minutes=30), make_policy("playbook"), policy, store, cluster="loopback")
    before = lab.snapshot()
    watcher = Watcher(deps, "loopback", settings=WatchSettings(interval_s=0))
    touched = watcher.poll_once()
    assert len(touched) == 2 and watcher.poll_once() == []  # one incident each, not one per poll
    found = {i: store.get_incident(i) for i in touched}
    by_job = {d.incident.trigger["job"]: d.incident.diagnosis for d in found.values()}
    assert sorted(by_job) == ["train/ft-32g", "train/pretrain-128g"]
    calls = {d.incident.trigger["job"]: [(c.tool, c.args, c.ok, c.error) for c in d.tool_calls] for d in found.values()}

    never = by_job["train/pretrain-128g"]
    assert (never["label"], never["remedy"], never["root_cause"]) == (
        "kueue_request_exceeds_quota", "escalate_user", "job:train/pretrain-128g"), (never, calls)
    assert any("ClusterQueue gpu-cq can never admit Workload train/job-pretrain-128g" in e
               and "asks for 128 nvidia.com/gpu" in e and "nominal quota 64 + 0 its cohort can lend = at most 64" in e
               for e in never["evidence"]), never["evidence"]

    held = by_job["train/ft-32g"]
    assert (held["family"], held["label"], held["remedy"]) == ("capacity", "kueue_queue_full_of_own_work", "wait"), (held, calls)
    assert any("ClusterQueue gpu-cq" in e and "for 32 nvidia.com/gpu" in e and "held by workloads of the same queue" in e
               for e in held["evidence"]), held["evidence"]
    assert any("flavor h100: nominal quota 64 nvidia.com/gpu, 64 held by 8 admitted workload(s) of ClusterQueue gpu-cq: "
               "0 left of the 32 it needs" in e for e in held["evidence"]), held["evidence"]
    assert lab.snapshot() == before  # dry run: nothing changed on the cluster

    # The live incident exported to a scenario passes eval: Kueue's own Pending event on the
    # Workload is in it. (The held-by-queue one is not replayed: a scenario holds no ClusterQueue,
    # so its replay can tell only the ordinary quota wait, kueue_quota_pending.)
    from crashcart.evals.export import scenario_from_incident
    from crashcart.evals.runner import run_scenario
    from crashcart.evals.scenario import parse_scenario
    from crashcart.tools.tape import Tape

    for incident_id, detail in found.items():
        if detail.incident.trigger["job"] != "train/pretrain-128g":
            continue
        last = {d.action_id: (d.tool, d.args, d.decision) for d in detail.decisions}
        text = scenario_from_incident(incident_id, Tape.from_jsonl(store.load_tape(incident_id)),
                                      detail.incident.diagnosis, list(last.values()))
        result = run_scenario(parse_scenario(text, f"{incident_id}.yaml"), f"{incident_id}.yaml")
        assert result.passed, (detail.incident.trigger, result.failures)
