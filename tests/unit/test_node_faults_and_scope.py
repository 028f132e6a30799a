"""Node faults behind other symptoms, every victim of one cause, the scope of a fault, quiet jobs.

Each test feeds the playbook policy observations shaped like the tools' output and checks the
general rule, not a scenario's strings.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from crashcart.agent.policies.evidence import build_evidence
from crashcart.agent.policies.playbook import PlaybookPolicy

NOW = datetime(2027, 1, 5, 12, 0, tzinfo=timezone.utc)
NCCL_TIMEOUT = ("[rank3]:[E105 11:02:15.118402 22 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                "ran for 600071 milliseconds before timing out.")


def at(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).isoformat()


def row(job: str, nodes: list[str], state: str = "FAILED", ended: float | None = 1.0, **extra) -> dict[str, Any]:
    r = {"job": job, "state": state, "partition": "gpu", "nodes": nodes, "start_time": at(6), "user": "u"}
    if ended is not None:
        r["end_time"] = at(ended)
    r.update(extra)
    return r


def obs(tool: str, args: dict[str, Any], text: str = "", **data) -> dict[str, Any]:
    return {"tool": tool, "args": args, "ok": True, "text": text, "data": data}


def state(observations: list[dict[str, Any]], job: str = "7", kind: str = "job_failed") -> dict[str, Any]:
    return {"observations": observations, "trigger": {"kind": kind, "job": job}, "backend": "slurm"}


def diagnose(observations, **kw):
    return PlaybookPolicy().diagnose(state(observations, **kw), NOW)


def drained(actions) -> list[str]:
    return [c.args["node"] for c in actions if c.tool == "node_drain"]


def resubmitted(actions) -> list[str]:
    return [c.args["job"] for c in actions if c.tool == "resubmit"]


# --- node faults behind other symptoms -----------------------------------------------------------

PSTORE_PANIC = """Panic#1 Part1
<0>[1208977.404153] mce: [Hardware Error]: CPU 38: Machine Check Exception: 5 Bank 7: be00000000800400
<0>[1208977.404186] mce: [Hardware Error]: Machine check: Processor context corrupt
<0>[1208977.404190] Kernel panic - not syncing: Fatal machine check
[    2.911520] pstore: Registered efi_pstore as persistent store backend"""


def test_a_panic_kept_by_pstore_names_the_node_though_the_job_log_says_nccl():
    nodes = ["a", "b", "c"]
    d, actions = diagnose([obs("sacct", {"job": "7"}, rows=[row("7", nodes)]),
                           obs("get_logs", {"job": "7"}, NCCL_TIMEOUT),
                           obs("kernel_log", {"node": "a"}, "[ 1.0] ok"),
                           obs("kernel_log", {"node": "b"}, PSTORE_PANIC),
                           obs("kernel_log", {"node": "c"}, "[ 1.0] ok")])
    assert (d.label, d.root_cause, d.remedy) == ("node_kernel_panic", "node:b", "exclude_node")
    assert drained(actions) == ["b"]


def test_srun_node_failure_points_at_the_node_it_names_whatever_the_job_state():
    log = "step=96500 loss=2.11\nsrun: error: Node failure on c\nsrun: error: a: task 0: Exited with exit code 1"
    d, actions = diagnose([obs("sacct", {"job": "7"}, rows=[row("7", ["a", "b", "c"])]),
                           obs("get_logs", {"job": "7"}, log)])
    assert (d.label, d.root_cause) == ("node_failure", "node:c")
    assert drained(actions) == ["c"]


def test_a_node_name_the_incident_does_not_know_points_nowhere():
    log = "srun: error: Node failure on elsewhere-99"
    d, actions = diagnose([obs("sacct", {"job": "7"}, rows=[row("7", ["a", "b", "c"])]),
                           obs("get_logs", {"job": "7"}, log)])
    assert d.root_cause != "node:elsewhere-99" and not drained(actions)


# --- one root cause, every victim ----------------------------------------------------------------

def test_every_job_the_node_killed_is_rerun_and_no_other():
    rows = [row("7", ["a", "b"]),
            row("8", ["b"], state="NODE_FAIL", ended=0.9, user="v"),
            row("9", ["b"], state="CANCELLED by 0", ended=0.9, partition="other"),
            row("10", ["b"], state="CANCELLED by 51234", ended=1.2),        # its owner's decision
            row("11", ["b"], state="COMPLETED", ended=5),                   # finished before the fault
            row("12", ["b"], state="FAILED", ended=20),                     # long before the fault
            row("13", ["b"], state="CrashLoopBackOff", ended=None),         # a daemon restarting in place
            row("14", ["a"], state="FAILED", ended=1.0)]                    # another node
    ev = build_evidence([obs("list_jobs", {}, rows=rows)], {"kind": "job_failed", "job": "7"}, NOW)
    assert ev.victims_of("b") == ["7", "8", "9"]


def test_a_workloads_other_pods_are_its_own_not_separate_victims():
    rows = [row("train-worker-0", ["a"], name="train"), row("train-worker-1", ["b"], state="Unknown", name="train"),
            row("other-0", ["b"], state="Error", name="other")]
    ev = build_evidence([obs("list_jobs", {}, rows=rows)], {"kind": "job_failed", "job": "train-worker-0"}, NOW)
    assert ev.relevant_nodes() == ["b", "a"]  # the peer pod's node belongs to the incident
    assert ev.victims_of("b") == ["other-0"]


# --- scope ---------------------------------------------------------------------------------------

def nodes_listing(states: dict[str, str]) -> dict[str, Any]:
    return obs("sinfo", {}, rows=[{"node": n, "state": s, "gpus": 8, "reason": "Not responding" if s == "down" else None}
                                 for n, s in states.items()])


def test_several_job_nodes_down_together_is_the_rack_not_each_node():
    d, actions = diagnose([obs("sacct", {"job": "7"}, rows=[row("7", ["a", "b", "c", "d"], state="NODE_FAIL")]),
                           nodes_listing({"a": "down", "b": "down", "c": "down", "d": "down", "e": "idle"})])
    assert (d.label, d.root_cause, d.remedy) == ("many_nodes_lost_at_once", "cluster", "escalate_infra")
    assert not drained(actions) and not resubmitted(actions)


def test_one_job_node_down_is_still_that_node():
    d, actions = diagnose([obs("sacct", {"job": "7"}, rows=[row("7", ["a", "b", "c", "d"], state="NODE_FAIL")]),
                           nodes_listing({"a": "down", "b": "idle", "c": "idle", "d": "idle"})])
    assert d.label == "node_failure" and drained(actions) == ["a"]


IB_DOWN = "[ 10.0] ib0: lost carrier\n"
IB_BACK = "[ 100.0] IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready\n"


def ib_incident(kernel: dict[str, str]):
    return diagnose([obs("sacct", {"job": "7"}, rows=[row("7", list(kernel))]),
                     obs("get_logs", {"job": "7"}, "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5> with status=12"),
                     *[obs("kernel_log", {"node": n}, t) for n, t in kernel.items()]])


def test_ib_ports_back_active_on_every_node_is_a_recovered_transient():
    d, actions = ib_incident({"a": IB_DOWN + IB_BACK, "b": IB_DOWN + IB_BACK, "c": IB_DOWN + IB_BACK})
    assert (d.label, d.remedy) == ("fabric_flap_recovered", "resubmit")
    assert resubmitted(actions) == ["7"] and any(c.tool == "notify" for c in actions) and not drained(actions)


def test_a_port_still_down_is_not_recovered():
    d, _ = ib_incident({"a": IB_DOWN + IB_BACK, "b": IB_DOWN + IB_BACK, "c": IB_BACK + IB_DOWN})
    assert d.label != "fabric_flap_recovered"


# --- quiet but healthy -----------------------------------------------------------------------------

EVAL_TAIL = ("Epoch 6: 100%|██████████| 5960/5960 [1:14:38<00:00,  1.33it/s, v_num=3]\n"
             "Validation DataLoader 0:  37%|███▋      | 1104/2980 [40:54<1:09:31,  0.45it/s]")


def stalled(util: float) -> list[dict[str, Any]]:
    gpus = [{"index": i, "util_pct": util, "memory_used_mib": 60000, "memory_total_mib": 81559} for i in range(2)]
    return [obs("sacct", {"job": "7"}, rows=[row("7", ["a"], state="RUNNING", ended=None)]),
            obs("get_logs", {"job": "7"}, EVAL_TAIL),
            obs("training_progress", {"job": "7"}, points=[{"time": at(1.5), "step": 10}, {"time": at(1.0), "step": 20}]),
            obs("nvidia_smi_query", {"node": "a"}, "index,...", gpus=gpus)]


def test_a_log_ending_in_an_eval_pass_on_busy_gpus_is_not_a_hang():
    d, actions = diagnose(stalled(util=93), kind="job_stalled")
    assert d.label != "training_hang" and d.remedy == "none" and not actions


def test_the_same_log_on_idle_gpus_is_still_a_hang():
    d, _ = diagnose(stalled(util=0), kind="job_stalled")
    assert d.label == "training_hang"


def test_a_job_stopped_on_request_is_left_alone():
    d, actions = PlaybookPolicy().diagnose({
        "observations": [obs("ray_job_status", {"job": "r1"}, "Status for job 'r1': STOPPED\nStatus message: Job was intentionally stopped.",
                             status="STOPPED", row=row("r1", ["w"], state="STOPPED"))],
        "trigger": {"kind": "job_failed", "job": "r1"}, "backend": "ray"}, NOW)
    assert (d.label, d.remedy) == ("stopped_on_request", "none") and not actions
