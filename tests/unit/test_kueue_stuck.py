"""Kueue waits that will not end by themselves (tools/backends/kubernetes/_kueue_stuck.py): the
most a ClusterQueue can ever give (nominal quota plus what its cohort can lend, capped by its
borrowingLimit), over every flavor that covers the resource, and who holds its quota."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from crashcart.tools.backends.kubernetes import _kueue_stuck as ks

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "couldn't assign flavors ..."}


def cq(name: str, flavors: dict[str, dict[str, str]], cohort: str | None = "research", reserved: dict[str, int] | None = None):
    spec = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": f, "resources": [{"name": "nvidia.com/gpu", **q}]} for f, q in flavors.items()]}]}
    if cohort:
        spec["cohort"] = cohort
    status = {"flavorsReservation": [{"name": f, "resources": [{"name": "nvidia.com/gpu", "total": str(n)}]}
                                     for f, n in (reserved or {}).items()]}
    return {"kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec, "status": status}


def workload(name: str, gpus: int, waited: timedelta = timedelta(minutes=5), admitted_to: str | None = None,
             flavor: str = "h100", finished: bool = False):
    wl = {"kind": "Workload", "metadata": {"name": name, "namespace": "train", "creationTimestamp":
                                           (NOW - waited).strftime("%Y-%m-%dT%H:%M:%SZ")},
          "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": gpus // 8}]},
          "status": {"resourceRequests": [{"name": "main", "resources": {"nvidia.com/gpu": str(gpus)}}],
                     "conditions": [PENDING]}}
    if admitted_to:
        wl["status"]["admission"] = {"clusterQueue": admitted_to, "podSetAssignments": [
            {"name": "main", "flavors": {"nvidia.com/gpu": flavor}, "resourceUsage": {"nvidia.com/gpu": str(gpus)}}]}
        wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
        if finished:
            wl["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    return wl


def test_the_borrowing_limit_caps_what_the_cohort_could_lend():
    team = cq("team-cq", {"h100": {"nominalQuota": "64", "borrowingLimit": "32"}})
    peer = cq("peer-cq", {"h100": {"nominalQuota": "128"}})
    cap = ks.capacity(team, [team, peer], "h100", "nvidia.com/gpu")
    assert (cap.nominal, cap.borrowable, cap.maximum) == (64, 32, 96)
    fits = ks.stuck(workload("w96", 96), team, [team, peer], [], NOW, timedelta(minutes=30))
    assert fits is None  # 96 is at most what it may hold: it waits, as queues do
    never = ks.stuck(workload("w104", 104), team, [team, peer], [], NOW, timedelta(minutes=30))
    assert never.reason == ks.NEVER_FITS and never.cluster_queue == "team-cq"
    assert never.lines == ["ClusterQueue team-cq can never admit Workload train/w104: it asks for 104 nvidia.com/gpu, more "
                           "than the queue can ever hold (flavor h100: nominal quota 64 + borrowing limit 32 = at most 96)"]


def test_without_a_borrowing_limit_the_peers_lending_limits_bound_it():
    team = cq("team-cq", {"h100": {"nominalQuota": "64"}})
    lends = cq("peer-cq", {"h100": {"nominalQuota": "128", "lendingLimit": "16"}})
    other_cohort = cq("far-cq", {"h100": {"nominalQuota": "512"}}, cohort="elsewhere")
    cap = ks.capacity(team, [team, lends, other_cohort], "h100", "nvidia.com/gpu")
    assert cap.maximum == 80
    alone = cq("solo-cq", {"h100": {"nominalQuota": "64"}}, cohort=None)
    assert ks.capacity(alone, [alone, lends], "h100", "nvidia.com/gpu").maximum == 64


def test_a_request_one_flavor_can_hold_is_not_never():
    team = cq("team-cq", {"h100": {"nominalQuota": "64"}, "a100": {"nominalQuota": "128"}}, cohort=None)
    assert ks.stuck(workload("w128", 128), team, [team], [], NOW, timedelta(minutes=30)) is None


def test_a_long_wait_on_its_own_queue_s_work_names_the_holders_and_a_finished_one_holds_nothing():
    team = cq("team-cq", {"h100": {"nominalQuota": "64"}}, cohort=None, reserved={"h100": 64})
    running = [workload(f"sweep-{i}", 16, admitted_to="team-cq") for i in range(4)]
    waiting = workload("ft", 32, waited=timedelta(minutes=45))
    found = ks.stuck(waiting, team, [team], running + [waiting], NOW, timedelta(minutes=30))
    assert found.reason == ks.HELD_BY_QUEUE
    assert found.lines[0] == ("ClusterQueue team-cq: Workload train/ft has waited 45 min (pending threshold 30 min) "
                              "for 32 nvidia.com/gpu, and the quota it needs is held by workloads of the same queue")
    assert found.lines[1].startswith("flavor h100: nominal quota 64 nvidia.com/gpu, 64 held by 4 admitted workload(s) "
                                     "of ClusterQueue team-cq: 0 left of the 32 it needs")
    # Inside the threshold: ordinary waiting.
    assert ks.stuck(workload("ft2", 32, waited=timedelta(minutes=10)), team, [team], running, NOW, timedelta(minutes=30)) is None
    # Two of the four finished (Kueue has not yet released their quota in the status): 32 is left for it.
    done = [workload(f"sweep-{i}", 16, admitted_to="team-cq", finished=i < 2) for i in range(4)]
    assert ks.stuck(waiting, team, [team], done + [waiting], NOW, timedelta(minutes=30)) is None


# Kueue's flavor assigner, as its tests and release notes print it: before v0.14, and since v0.14
# for a workload of several pod sets; the unused-quota wait that is not a never-fits.
NEVER_MESSAGES = [
    "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, request > maximum capacity (10 > 8)",
    "couldn't assign flavors to pod set workers: insufficient quota for nvidia.com/gpu in flavor gpu-flavor, "
    "previously considered podsets requests (16) + current podset request (8) > maximum capacity (16)",
]
WAIT_MESSAGE = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
                "8 more needed")


def test_the_never_fits_label_reads_both_forms_of_kueue_s_message_and_not_a_wait():
    from crashcart.playbooks import load_playbooks

    entry = load_playbooks()["kueue_request_exceeds_quota"]
    kueue_said = [p for sig, p in zip(entry.label.signals, entry.patterns) if sig.where == "events" and sig.group == "never"]
    assert len(kueue_said) == 1
    assert all(kueue_said[0].search(m) for m in NEVER_MESSAGES)
    assert not kueue_said[0].search(WAIT_MESSAGE)
    described = [p for sig, p in zip(entry.label.signals, entry.patterns) if sig.where == "describe"]
    team = cq("team-cq", {"h100": {"nominalQuota": "64", "borrowingLimit": "32"}})
    found = ks.stuck(workload("w104", 104), team, [team], [], NOW, timedelta(minutes=30))
    assert described[0].search(f"[crashcart: {found.lines[0]}]")  # as the job's describe prints it
