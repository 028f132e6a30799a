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


# --- a port that dropped once and verifiably recovered -------------------------------------------

BLIP = """[   30.1] mlx5_core 0000:c1:00.0 ibp193s0: Link up
[ 9000.1] mlx5_core 0000:c1:00.0 ibp193s0: Link down
[ 9046.4] mlx5_core 0000:c1:00.0 ibp193s0: Link up
[ 9048.0] IPv6: ADDRCONF(NETDEV_CHANGE): ibp193s0: link becomes ready
"""
AGAIN = BLIP + """[ 9900.2] mlx5_core 0000:c1:00.0 ibp193s0: Link down
[ 9911.7] mlx5_core 0000:c1:00.0 ibp193s0: Link up
[ 9913.0] IPv6: ADDRCONF(NETDEV_CHANGE): ibp193s0: link becomes ready
"""
STILL_DOWN = "[ 9000.1] mlx5_core 0000:c1:00.0 ibp193s0: Link down\n"
IB_ERROR = "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4410> with status=12 opcode=0 len=0 vendor err 129 (Send)\n"


def _flap_state(kernel: str, later: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [_job("90", "FAILED", ["n1", "n2"], started_h=8, ended_h=4), *later]
    obs = [_obs("sacct", {"job": "90"}, rows=rows[:1]), _obs("get_logs", {"job": "90"}, IB_ERROR),
           _obs("kernel_log", {"node": "n1"}, kernel), _obs("kernel_log", {"node": "n2"}, "[ 30.2] ibp193s0: Link up\n"),
           _obs("list_jobs", {"node": "n1"}, rows=rows[1:])]
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": "90"}, "backend": "slurm"}


RAN_SINCE = [_job("91", "RUNNING", ["n1"], user="lee", started_h=3, ended_h=None)]


def test_one_port_back_and_the_node_busy_since_is_a_recovered_transient() -> None:
    diagnosis, actions = PlaybookPolicy().diagnose(_flap_state(BLIP, RAN_SINCE), NOW)
    assert diagnosis.label == "ib_port_flap_recovered" and diagnosis.remedy == "resubmit"
    assert [a.tool for a in actions] == ["resubmit", "notify"]
    assert "exclude_nodes" not in actions[0].args


@pytest.mark.parametrize("kernel, later, why", [
    (BLIP, [], "nothing has run on the node since"),
    (BLIP, [_job("91", "RUNNING", ["n1"], started_h=0.2, ended_h=None)], "the later job ran only minutes"),
    (BLIP, [_job("91", "FAILED", ["n1"], started_h=3, ended_h=2)], "the later job failed too"),
    (BLIP, [_job("91", "RUNNING", ["n1"], started_h=9, ended_h=None)], "the job started before the failure"),
    (AGAIN, RAN_SINCE, "the port dropped again after it came back"),
    (STILL_DOWN, RAN_SINCE, "the port never came back"),
    (BLIP + "[ 8999.0] mlx5_core 0000:c1:00.0: Port module event[error]: module 0, Cable error, Bad or shorted cable/module\n",
     RAN_SINCE, "the cable reported a fault"),
])
def test_not_verifiably_recovered(kernel: str, later: list[dict[str, Any]], why: str) -> None:
    diagnosis, _ = PlaybookPolicy().diagnose(_flap_state(kernel, later), NOW)
    assert diagnosis.label != "ib_port_flap_recovered", why


# --- many nodes at once: the switch (hosts logged their links dropping) or the rack (they went silent)

ETH_DOWN = """[    7.3] bnxt_en 0000:3b:00.0 ens2f0np0: NIC Link is Up, 25000 Mbps (NRZ) full duplex, Flow control: none
[ 9100.4] bnxt_en 0000:3b:00.0 ens2f0np0: NIC Link is Down
[ 9100.5] bond0: (slave ens2f0np0): link status definitely down, disabling slave
[ 9100.5] bond0: now running without any active interface!
"""
SILENT = "[    7.3] bnxt_en 0000:3b:00.0 ens2f0np0: NIC Link is Up, 25000 Mbps (NRZ) full duplex, Flow control: none\n"


def _rack_state(kernel: str, logged_by: int = 3) -> dict[str, Any]:
    nodes = ["r1", "r2", "r3"]
    obs = [_obs("sacct", {"job": "55"}, rows=[_job("55", "NODE_FAIL", nodes)]),
           _obs("get_logs", {"job": "55"}, "srun: error: Node failure on r1\n"),
           _obs("sinfo", {}, rows=[{"node": n, "state": "down", "reason": "Not responding", "gpus": 8} for n in nodes])]
    obs += [_obs("kernel_log", {"node": n}, kernel if i < logged_by else SILENT) for i, n in enumerate(nodes)]
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": "55"}, "backend": "slurm"}


@pytest.mark.parametrize("kernel, logged_by, label, remedy", [
    (ETH_DOWN, 3, "network_fabric_failure", "escalate_network"),
    (SILENT, 3, "many_nodes_lost_at_once", "escalate_infra"),
    (ETH_DOWN, 2, "many_nodes_lost_at_once", "escalate_infra"),  # two hosts' links are not yet a switch
])
def test_nodes_lost_together_switch_or_rack(kernel: str, logged_by: int, label: str, remedy: str) -> None:
    diagnosis, actions = PlaybookPolicy().diagnose(_rack_state(kernel, logged_by), NOW)
    assert (diagnosis.label, diagnosis.remedy, diagnosis.root_cause) == (label, remedy, "cluster")
    assert not [a for a in actions if a.tool == "node_drain"]


# --- every victim of a faulty node, in any namespace and end state --------------------------------

def test_victims_include_a_gpu_pod_still_crash_looping_but_not_a_gpu_less_daemon() -> None:
    rows = [
        _job("train-0", "Failed", ["bad"], partition="nlp", started_h=6, ended_h=1),
        _job("serve-x", "CrashLoopBackOff", ["bad"], partition="serving", gpus=1, started_h=20, ended_h=None),
        _job("batch-y", "Error", ["bad"], partition="data", gpus=1, started_h=2, ended_h=0.9),
        _job("exporter", "CrashLoopBackOff", ["bad"], partition="gpu-operator", gpus=0, started_h=400, ended_h=None),
        _job("cpu-prep", "Running", ["bad"], partition="nlp", gpus=0, started_h=3, ended_h=None),
        _job("late-fail", "Error", ["bad"], partition="data", gpus=1, started_h=30, ended_h=20),
        _job("elsewhere", "CrashLoopBackOff", ["good"], partition="serving", gpus=1, started_h=5, ended_h=None),
    ]
    ev = build_evidence([_obs("list_jobs", {"node": "bad"}, rows=rows)], {"kind": "job_failed", "job": "train-0"}, NOW)
    assert sorted(ev.victims_of("bad")) == ["batch-y", "serve-x", "train-0"]


# --- a bystander evicted under node pressure that has cleared since ---------------------------------

def _event(minutes_ago: float, reason: str, obj: str, message: str, kind: str = "Normal") -> dict[str, Any]:
    return {"time": (NOW - timedelta(minutes=minutes_ago)).isoformat(), "type": kind, "reason": reason,
            "object": obj, "message": message}


BYSTANDER = ("The node was low on resource: ephemeral-storage. Threshold quantity: 38576553164, available: "
             "31207720Ki. Container trainer was using 3116Ki, request is 0, has larger consumption of ephemeral-storage. ")
HOG = BYSTANDER.replace("trainer was using 3116Ki", "trainer was using 641728512Ki")


def _evicted_state(pod_message: str, node_events: list[tuple[float, str]],
                   neighbour: str | None = None) -> dict[str, Any]:
    pod = [_event(40, "Evicted", "pod/ml/ft-0", pod_message, "Warning")]
    node = [_event(m, r, "node/w1", f"Node w1 status is now: {r}") for m, r in node_events]
    obs = [_obs("kubectl_describe", {"kind": "pod", "name": "ft-0"},
                job=_job("ft-0", "Failed", ["w1"], started_h=5, ended_h=40 / 60)),
           _obs("kubectl_events", {"object": "ft-0"}, events=pod),
           _obs("kubectl_events", {"object": "node/w1"}, events=node)]
    if neighbour:
        obs.append(_obs("kubectl_events", {"object": "export-9"},
                        events=[_event(41, "Evicted", "pod/data/export-9", neighbour, "Warning")]))
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": "ft-0"}, "backend": "kubernetes"}


PRESSURE = (42, "NodeHasDiskPressure")
CLEARED = (30, "NodeHasNoDiskPressure")


def test_bystander_on_a_node_that_recovered_reruns_as_it_was() -> None:
    # A neighbour evicted for using hundreds of GiB does not make the trainer the cause.
    diagnosis, actions = PlaybookPolicy().diagnose(_evicted_state(BYSTANDER, [PRESSURE, CLEARED], neighbour=HOG), NOW)
    assert (diagnosis.label, diagnosis.remedy) == ("evicted_node_pressure_cleared", "resubmit")
    resubmits = [a for a in actions if a.tool == "resubmit"]
    assert len(resubmits) == 1 and "exclude_nodes" not in resubmits[0].args and "changes" not in resubmits[0].args
    assert not [a for a in actions if a.tool in {"node_drain", "escalate"}]


@pytest.mark.parametrize("message, node_events, why", [
    (BYSTANDER, [PRESSURE], "the node never reported the pressure gone"),
    (BYSTANDER, [PRESSURE, CLEARED, (10, "NodeHasDiskPressure")], "the pressure came back after it cleared"),
    (BYSTANDER, [(50, "NodeHasNoDiskPressure"), PRESSURE], "the only 'cleared' event is older than the eviction"),
    (HOG, [PRESSURE, CLEARED], "the pod itself filled the disk"),
])
def test_not_a_recovered_bystander(message: str, node_events: list[tuple[float, str]], why: str) -> None:
    diagnosis, _ = PlaybookPolicy().diagnose(_evicted_state(message, node_events), NOW)
    assert diagnosis.label != "evicted_node_pressure_cleared", why


STAMPED_BLIP = """[Tue May  4 08:59:40 2027] mlx5_core 0000:5e:00.0 ibp94s0: Link down
[Tue May  4 09:00:16 2027] mlx5_core 0000:5e:00.0 ibp94s0: Link up
[Tue May  4 09:00:18 2027] IPv6: ADDRCONF(NETDEV_CHANGE): ibp94s0: link becomes ready
[Tue May  4 10:12:03 2027] cni0: port 3(veth1a2b3c4d) entered forwarding state
"""


def test_a_stamped_kernel_log_quiet_since_the_port_came_back_is_proof_enough() -> None:
    diagnosis, _ = PlaybookPolicy().diagnose(_flap_state(STAMPED_BLIP, []), NOW)
    assert diagnosis.label == "ib_port_flap_recovered"


def test_a_port_back_only_minutes_ago_has_not_held_yet() -> None:
    recent = STAMPED_BLIP.replace("Tue May  4 09:00:18", "Tue May  4 11:50:18").replace("cni0", "x").splitlines()[:3]
    diagnosis, _ = PlaybookPolicy().diagnose(_flap_state("\n".join(recent) + "\n", []), NOW)
    assert diagnosis.label != "ib_port_flap_recovered"


# --- a suspended Job (spec.suspend) is not a failure -------------------------------------------

def _suspend_state(events: list[tuple[str, str]], log: str = "received SIGTERM, checkpoint saved\n") -> dict[str, Any]:
    pod = {**_job("train-0", "Failed", ["k1"]), "name": "train", "exit_code": "143"}
    obs = [_obs("kubectl_describe", {"kind": "pod", "name": "train-0"}, "Name: train-0", job=pod),
           _obs("get_logs", {"job": "train-0"}, log),
           _obs("kubectl_events", {"object": "train"}, events=[
               {"object": "job/ns/train", "type": "Normal", "reason": r, "message": m,
                "time": (NOW - timedelta(hours=1)).isoformat()} for r, m in events])]
    return {"observations": obs, "trigger": {"kind": "job_failed", "job": "train-0"}, "backend": "kubernetes"}


def test_a_suspended_job_is_no_incident() -> None:
    st = _suspend_state([("Suspended", "Job suspended"), ("SuccessfulDelete", "Deleted pod: train-0-abcde")])
    diagnosis, actions = PlaybookPolicy().diagnose(st, NOW)
    assert (diagnosis.label, diagnosis.remedy, actions) == ("job_suspended", "none", [])


@pytest.mark.parametrize("extra", [
    ("Preempted", "Preempted to accommodate a workload (UID: 1f2e) due to prioritization in the ClusterQueue"),
    ("BackoffLimitExceeded", "Job has reached the specified backoff limit"),
])
def test_a_queue_preemption_or_a_failed_job_is_not_a_suspension(extra: tuple[str, str]) -> None:
    st = _suspend_state([("Suspended", "Job suspended"), extra])
    diagnosis, _ = PlaybookPolicy().diagnose(st, NOW)
    assert diagnosis.label != "job_suspended"


def test_nothing_recognised_waits_for_the_workload_events_before_sweeping() -> None:
    # Round two of a failed pod: its own events said nothing; the Job's events (by name) go out
    # alone, before the nodes and the job's past are swept.
    st = _suspend_state([])
    st["observations"] = [o for o in st["observations"] if o["tool"] != "kubectl_events"]
    st["observations"].append(_obs("kubectl_events", {"object": "train-0"}, events=[]))
    calls = PlaybookPolicy().next_calls(st, NOW, "kubernetes")
    assert [(c.tool, c.args) for c in calls] == [("kubectl_events", {"object": "train"})]


# --- a node's Lustre client wedged after it reconnected: drain, no page to storage --------------

EVICTED = ("LustreError: 167-0: fs-OST0001-osc-ffff1: This client was evicted by fs-OST0001; in progress "
           "operations using this service will fail.\n")
RESTORED = "Lustre: fs-OST0001-osc-ffff1: Connection restored to 10.0.0.5@o2ib (at 10.0.0.5@o2ib)\n"
HUNG = ("INFO: task python:4411 blocked for more than 241 seconds.\nCall Trace:\n"
        " cl_sync_io_wait+0x1f4/0x380 [obdclass]\n ll_readpage+0x11d/0x6a0 [lustre]\n")


@pytest.mark.parametrize("kernel, label, teams", [
    (EVICTED + RESTORED + HUNG, "lustre_client_wedged", []),
    # Never reconnected: the mount stays unusable until storage remounts it.
    (EVICTED + HUNG, "lustre_client_evicted", ["storage"]),
])
def test_a_wedged_client_is_drained_without_a_storage_page(kernel: str, label: str, teams: list[str]) -> None:
    obs = [_obs("sacct", {"job": "81"}, rows=[_job("81", "FAILED", ["n1", "n2"])]),
           _obs("kernel_log", {"node": "n1"}, kernel), _obs("kernel_log", {"node": "n2"}, "clean\n")]
    st = {"observations": obs, "trigger": {"kind": "job_failed", "job": "81"}, "backend": "slurm"}
    diagnosis, actions = PlaybookPolicy().diagnose(st, NOW)
    assert (diagnosis.label, diagnosis.root_cause, diagnosis.remedy) == (label, "node:n1", "exclude_node")
    assert [a.args["team"] for a in actions if a.tool == "escalate"] == teams
    assert ("node_drain", "n1") in [(a.tool, a.args.get("node")) for a in actions]


@pytest.mark.parametrize("state, reads_workload", [("Running", False), ("Failed", True)])
def test_a_running_pod_nothing_points_at_skips_its_workloads_events(state: str, reads_workload: bool) -> None:
    pod = {**_job("train-0", state, ["k1"], ended_h=None if state == "Running" else 1), "name": "train"}
    obs = [_obs("kubectl_describe", {"kind": "pod", "name": "train-0"}, "Name: train-0", job=pod),
           _obs("kubectl_events", {"object": "train-0"}, events=[]),
           _obs("get_logs", {"job": "train-0"}, "step 10 loss 2.0\n")]
    st = {"observations": obs, "trigger": {"kind": "job_stalled", "job": "train-0"}, "backend": "kubernetes"}
    calls = [(c.tool, c.args) for c in PlaybookPolicy().next_calls(st, NOW, "kubernetes")]
    assert (("kubectl_events", {"object": "train"}) in calls) is reads_workload
