"""Investigation near the minimal path: which steps a settled diagnosis no longer needs, which
nodes' kernel logs go first, and which Kubernetes events a Ray job is worth."""

from __future__ import annotations

from types import SimpleNamespace

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc, call_key
from crashcart.agent.policies.fanout import (
    bound, kernel_logs_first, nodes_named_in_errors, one_listing, worth_taking,
)
from crashcart.agent.policies.playbook import KUBE_NAME, PlaybookPolicy
from crashcart.playbooks import load_playbooks
from crashcart.tools._spec import ToolCall

NODES = ["h1", "h2", "h3", "h4", "h5"]
KB = load_playbooks()


def label(priority, symptom=False, root_cause="job", *nodes):
    """A ranked candidate: its label's rank and kind, and the nodes its hits name."""
    hits = [SimpleNamespace(entity=f"node:{n}") for n in nodes]
    return SimpleNamespace(
        entry=SimpleNamespace(label=SimpleNamespace(priority=priority, symptom=symptom, root_cause=root_cause)),
        hits=hits, entities=lambda kind, hits=hits: [h.entity for h in hits] if kind == "node" else [])


def probes(*nodes):
    return [ToolCall(tool="gpu_metrics", args={"node": n}) for n in nodes]


def failed_job(log: str = "", nodes=NODES) -> Evidence:
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "7"})
    ev.jobs["7"] = JobFacts(job="7", state="FAILED", nodes=list(nodes))
    if log:
        ev.docs.append(TextDoc("log", "job:7", log.splitlines(), "get_logs:7"))
    return ev


def read_kernel_log(ev: Evidence, node: str, text: str) -> None:
    ev.calls.add(call_key("kernel_log", {"node": node}))
    ev.docs.append(TextDoc("kernel_log", f"node:{node}", text.splitlines(), f"kernel_log:{node}"))


# --- which candidates' steps are still worth taking --------------------------------------------

def test_a_symptoms_steps_stop_once_a_cause_leads():
    cause, symptom = label(88, False, "cluster"), label(34, True)
    assert worth_taking(symptom, [cause, symptom], probes("h1", "h2")) == []
    assert worth_taking(cause, [cause, symptom], probes("h1")) == probes("h1")


def test_while_a_symptom_leads_every_candidate_keeps_its_steps():
    symptom, cause = label(34, True), label(20, False)
    assert worth_taking(cause, [symptom, cause], probes("h1", "h2")) == probes("h1", "h2")


def test_a_lower_cause_keeps_only_its_steps_on_the_leaders_node():
    leader, lower = label(79, False, "node", "h3"), label(52, False)
    wanted = probes("h1", "h3") + [ToolCall(tool="job_history", args={"job": "7"})]
    assert worth_taking(lower, [leader, lower], wanted) == probes("h3")


def test_a_lower_cause_under_a_job_or_cluster_verdict_reads_nothing_more():
    for root in ("job", "cluster"):
        leader, lower = label(62, False, root, "h1"), label(55, False)
        assert worth_taking(lower, [leader, lower], probes("h1", "h2")) == []


def test_a_cause_of_the_leaders_own_rank_can_still_overtake_it():
    leader, peer = label(66, False, "job"), label(66, False)
    assert worth_taking(peer, [leader, peer], probes("h1")) == probes("h1")


# --- one listing for many nodes ----------------------------------------------------------------

def test_several_nodes_of_one_listing_come_from_one_unfiltered_listing():
    calls = [ToolCall(tool="ray_list_nodes", args={"node": n}) for n in NODES[:3]]
    calls.append(ToolCall(tool="disk_usage", args={"node": "h1"}))
    assert one_listing(calls, failed_job()) == [ToolCall(tool="ray_list_nodes", args={}),
                                                ToolCall(tool="disk_usage", args={"node": "h1"})]


def test_one_nodes_listing_stays_filtered_and_a_read_listing_is_not_read_again():
    one = [ToolCall(tool="sinfo", args={"node": "h1"})]
    assert one_listing(one, failed_job()) == one
    ev = failed_job()
    ev.calls.add(call_key("sinfo", {}))
    assert one_listing(one + [ToolCall(tool="sinfo", args={"node": "h2"})], ev) == []


# --- reads about the job wait for the kernel logs ---------------------------------------------

def test_the_jobs_history_waits_a_round_while_kernel_logs_are_outstanding():
    history = ToolCall(tool="job_history", args={"job": "7"})
    logs = [ToolCall(tool="kernel_log", args={"node": n}) for n in NODES]
    assert history not in bound(logs + [history], failed_job(), [])
    assert bound([history], failed_job(), []) == [history]


# --- the kernel logs of the hosts the errors name go first --------------------------------------

NAMED_LOG = """\
step 41210 | loss 1.908
[rank37]:[E217 03:13:51.402311822 ProcessGroupNCCL.cpp:1618] Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered
srun: error: h3: task 37: Aborted (core dumped)
"""
XID95 = "[1204387.553120] NVRM: Xid (PCI:0000:9d:00): 95, pid=1882211, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No\n"
LINK_DOWN = "[ 87990.003318] mlx5_core 0000:c1:00.0 ibp193s0: Link down\n"
ALL_LOGS = [ToolCall(tool="kernel_log", args={"node": n}) for n in NODES]


def test_error_lines_name_nodes_by_host_name_or_by_the_address_it_stands_for():
    ev = failed_job("(RayTrainWorker pid=18807, ip=10.1.8.22) RuntimeError: CUDA error: invalid device ordinal\n"
                    "10.1.8.2 INFO all fine\n",
                    nodes=["ip-10-1-8-2", "ip-10-1-8-22", "ip-10-1-8-221"])
    assert nodes_named_in_errors(ev) == {"ip-10-1-8-22"}


def test_the_named_hosts_kernel_log_goes_first():
    ev = failed_job(NAMED_LOG)
    assert kernel_logs_first(ev, ALL_LOGS, [], KB) == {"h3"}
    assert [c.args["node"] for c in bound(ALL_LOGS, ev, [], KB)] == ["h3"]


def test_a_node_fault_on_the_named_host_settles_it_and_the_peers_are_not_read():
    ev = failed_job(NAMED_LOG)
    read_kernel_log(ev, "h3", XID95)
    leader = PlaybookPolicy(KB)._candidates(ev)[0]
    assert leader.name == "ecc_uncorrectable"
    assert kernel_logs_first(ev, ALL_LOGS[:2], [leader], KB) == {"h3"}


def test_a_link_down_on_the_named_host_leaves_the_scope_open_so_the_peers_are_read():
    ev = failed_job(NAMED_LOG)
    read_kernel_log(ev, "h3", LINK_DOWN)
    leader = label(82, False, "node", "h3")
    assert kernel_logs_first(ev, ALL_LOGS[:2], [leader], KB) is None
    # Without the labels that count the error across nodes the host alone would have settled it.
    assert kernel_logs_first(ev, ALL_LOGS[:2], [leader], []) == {"h3"}


def test_errors_that_name_every_node_or_none_read_every_kernel_log_at_once():
    assert kernel_logs_first(failed_job("RuntimeError: boom\n"), ALL_LOGS, [], KB) is None
    every = "".join(f"srun: error: {n}: task 0: Exited with exit code 1\n" for n in NODES)
    assert kernel_logs_first(failed_job(every), ALL_LOGS, [], KB) is None


# --- Kubernetes events a job is worth ---------------------------------------------------------

def test_only_a_name_a_kubernetes_object_can_have_is_asked_for_events():
    assert KUBE_NAME.match("docs-summarize-batch") and KUBE_NAME.match("train-worker-3.ns")
    assert not KUBE_NAME.match("raysubmit_Hp4Tn8Wq2Lc6Zv1R") and not KUBE_NAME.match("-x")


def ray_events(state: str, leader) -> list[dict]:
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "raysubmit_Ab1"})
    ev.jobs["raysubmit_Ab1"] = JobFacts(job="raysubmit_Ab1", name="embed-batch", state=state)
    calls = PlaybookPolicy(KB)._job_calls("raysubmit_Ab1", ev, "ray", leader=leader)
    return [c.args for c in calls if c.tool == "kubectl_events"]


def test_a_ray_jobs_events_are_read_by_its_name_while_nothing_explains_it():
    assert ray_events("FAILED", None) == [{"object": "embed-batch"}]
    assert ray_events("FAILED", label(34, True)) == [{"object": "embed-batch"}]
    assert ray_events("RUNNING", label(30, True)) == [{"object": "embed-batch"}]


def test_a_ray_jobs_events_are_skipped_once_a_cause_explains_it_or_while_it_runs_unsuspected():
    assert ray_events("FAILED", label(62, False)) == []
    assert ray_events("RUNNING", None) == []


# --- a slow job: its GPUs' history after their current sample ------------------------------------

def running_job() -> Evidence:
    ev = failed_job()
    ev.jobs["7"].state = "RUNNING"
    return ev


def test_a_slow_jobs_gpu_history_waits_for_the_current_samples():
    samples = [ToolCall(tool="nvidia_smi_query", args={"node": n}) for n in NODES]
    assert bound(samples + probes(*NODES), running_job(), []) == samples


def test_then_the_history_goes_to_the_node_the_samples_name_or_everywhere():
    assert bound(probes(*NODES), running_job(), [label(74, False, "node", "h4")]) == probes("h4")
    assert bound(probes(*NODES), running_job(), []) == probes(*NODES)
