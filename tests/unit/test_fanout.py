"""Bounded per-node fan-out: GPU probes wait for the kernel logs, then go to the suspects."""

from __future__ import annotations

from types import SimpleNamespace

from crashcart.agent.policies.evidence import Evidence, JobFacts, call_key
from crashcart.agent.policies.fanout import bound
from crashcart.tools._spec import ToolCall

NODES = ["g1", "g2", "g3", "g4"]


class Pointing:
    """A candidate label whose hits name some nodes (a node's fault, unless `scope` says otherwise)."""

    def __init__(self, *nodes, scope="node", symptom=False):
        self.nodes = nodes
        self.entry = SimpleNamespace(label=SimpleNamespace(root_cause=scope, symptom=symptom))

    def entities(self, kind):
        return [f"node:{n}" for n in self.nodes] if kind == "node" else []


def evidence(state="FAILED", nodes=NODES):
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "7"})
    ev.jobs["7"] = JobFacts(job="7", state=state, nodes=list(nodes))
    return ev


def calls(tool, nodes=NODES):
    return [ToolCall(tool=tool, args={"node": n}) for n in nodes]


def test_probes_wait_while_kernel_logs_are_outstanding():
    kept = bound(calls("kernel_log") + calls("nvidia_smi_query") + calls("gpu_metrics"), evidence(), [])
    assert [c.tool for c in kept] == ["kernel_log"] * 4


def test_probes_go_only_to_the_node_the_evidence_names():
    kept = bound(calls("nvidia_smi_query") + calls("gpu_metrics"), evidence(), [Pointing("g3", "elsewhere")])
    assert [(c.tool, c.args["node"]) for c in kept] == [("nvidia_smi_query", "g3"), ("gpu_metrics", "g3")]


def test_no_suspect_after_the_kernel_logs_means_a_full_sweep():
    wanted = calls("nvidia_smi_query") + calls("gpu_metrics")
    assert bound(wanted, evidence(), []) == wanted


def test_a_running_job_is_probed_everywhere_at_once():
    wanted = calls("kernel_log") + calls("nvidia_smi_query")
    assert bound(wanted, evidence(state="RUNNING"), [Pointing("g1")]) == wanted


def test_one_node_jobs_are_not_bounded():
    wanted = calls("kernel_log", NODES[:1]) + calls("nvidia_smi_query", NODES[:1])
    assert bound(wanted, evidence(nodes=NODES[:1]), []) == wanted


def test_a_node_listed_or_described_is_not_listed_again():
    ev = evidence()
    ev.calls.add(call_key("sinfo", {}))
    described = [ToolCall(tool="kubectl_describe", args={"kind": "node", "name": "g1"}),
                 ToolCall(tool="kubectl_get_nodes", args={"node": "g1"})]
    listed = [ToolCall(tool="sinfo", args={"node": "g2"}), ToolCall(tool="kernel_log", args={"node": "g2"})]
    kept = bound(described + listed, ev, [Pointing("g1", "g2")])
    assert [(c.tool, c.args) for c in kept] == [
        ("kubectl_describe", {"kind": "node", "name": "g1"}), ("kernel_log", {"node": "g2"})]


def test_describe_adds_nothing_once_every_node_is_listed_and_its_events_read():
    ev = evidence()
    ev.calls |= {call_key("kubectl_get_nodes", {}), call_key("kubectl_events", {"object": "node/g1"})}
    wanted = [ToolCall(tool="kubectl_describe", args={"kind": "node", "name": "g1"})]
    assert bound(wanted, ev, [Pointing("g1")]) == []


def test_listing_a_namespace_defers_the_probes_even_on_one_known_node():
    ev = evidence(nodes=["g1"])
    wanted = [ToolCall(tool="list_jobs", args={"partition": "team"})] + calls("gpu_metrics", ["g1"])
    assert [c.tool for c in bound(wanted, ev, [])] == ["list_jobs"]


def test_a_cause_across_several_nodes_stops_the_per_node_probes():
    # A switch or rack event named on three nodes: probing each node cannot name one of them.
    wanted = calls("nvidia_smi_query") + calls("gpu_metrics") + calls("sinfo") + [ToolCall(tool="sinfo", args={})]
    kept = bound(wanted + [ToolCall(tool="list_jobs", args={"node": "g1"})], evidence(), [Pointing("g1", "g2", "g3", scope="cluster")])
    assert [(c.tool, c.args) for c in kept] == [("sinfo", {}), ("list_jobs", {"node": "g1"})]


def test_a_cluster_symptom_or_a_one_node_blame_still_probes_its_suspects():
    wanted = calls("gpu_metrics")
    symptom = [Pointing("g1", "g2", scope="cluster", symptom=True)]
    assert [c.args["node"] for c in bound(wanted, evidence(), symptom)] == ["g1", "g2"]
    one = [Pointing("g2", scope="cluster")]
    assert [c.args["node"] for c in bound(wanted, evidence(), one)] == ["g2"]


# --- a slow job's GPUs, sampled a few nodes a round -------------------------------------------

EIGHT = [f"s{i}" for i in range(1, 9)]


def slow_job(sampled=(), hot=None):
    from crashcart.tools.cluster import GpuSample

    ev = Evidence(now=None, trigger={"kind": "job_stalled", "job": "7"})
    ev.jobs["7"] = JobFacts(job="7", state="RUNNING", nodes=list(EIGHT))
    for n in sampled:
        ev.calls.add(call_key("nvidia_smi_query", {"node": n}))
        reasons = ["HW Slowdown", "HW Thermal Slowdown"] if n == hot else []
        ev.telemetry[n] = [GpuSample(index=0, temperature_c=92 if n == hot else 60, throttle_reasons=reasons)]
    return ev


def test_a_slow_jobs_nodes_are_sampled_a_few_a_round_and_their_kernel_logs_wait():
    wanted = calls("nvidia_smi_query", EIGHT) + calls("kernel_log", EIGHT) + calls("gpu_metrics", EIGHT)
    kept = bound(wanted, slow_job(), [])
    assert [(c.tool, c.args["node"]) for c in kept] == [("nvidia_smi_query", "s1"), ("nvidia_smi_query", "s2")]
    kept = bound(wanted, slow_job(sampled=EIGHT[:6]), [])
    assert [(c.tool, c.args["node"]) for c in kept] == [("nvidia_smi_query", "s7"), ("nvidia_smi_query", "s8")]
    # Every node sampled and none named: the kernel logs sweep them all, then the GPU history.
    assert bound(wanted, slow_job(sampled=EIGHT), []) == calls("kernel_log", EIGHT)
    assert bound(calls("gpu_metrics", EIGHT), slow_job(sampled=EIGHT), []) == calls("gpu_metrics", EIGHT)


def test_sampling_stops_at_a_suspect_beside_a_healthy_peer_and_a_proven_hot_gpu_needs_no_more_reads():
    wanted = calls("nvidia_smi_query", EIGHT) + calls("kernel_log", EIGHT) + calls("gpu_metrics", EIGHT)
    assert bound(wanted, slow_job(sampled=EIGHT[:4], hot="s3"), [Pointing("s3")]) == []


def test_every_sampled_node_slow_keeps_sampling_a_wider_cause():
    wanted = calls("nvidia_smi_query", EIGHT)
    ev = slow_job(sampled=["s1", "s2"])
    kept = bound(wanted, ev, [Pointing("s1", "s2")])
    assert [c.args["node"] for c in kept] == ["s3", "s4"]


def test_hosts_that_only_waited_are_read_after_the_host_with_its_own_error():
    from crashcart.agent.policies.evidence import TextDoc
    from crashcart.agent.policies.fanout import nodes_named_in_errors

    ev = evidence()
    timeout = "{n}:[rank4]: [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, Timeout(ms)=600000)"
    lines = [timeout.format(n=n) for n in ("g1", "g2")] + ["srun: error: g4: task 3: Exited with exit code 1"]
    ev.docs.append(TextDoc("log", "job:7", lines, "get_logs:7"))
    assert nodes_named_in_errors(ev) == {"g1", "g2", "g4"}  # nobody's own error: all of them
    lines.append("g3:[rank9]: Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure")
    ev.docs[-1] = TextDoc("log", "job:7", lines, "get_logs:7")
    assert nodes_named_in_errors(ev) == {"g3"}


class JobCause:
    """A cause in the job itself, resting on signals of the given kinds (`log`, `progress`)."""

    def __init__(self, *where, symptom=False, required=()):
        signals = [SimpleNamespace(where=w, required=w in required) for w in where]
        self.entry = SimpleNamespace(label=SimpleNamespace(root_cause="job", symptom=symptom, signals=signals))
        self.hits = [SimpleNamespace(signal=i) for i in range(len(signals))]

    def entities(self, kind):
        return []


def test_a_stall_the_job_s_own_log_explains_ends_the_search_for_a_slow_gpu():
    wanted = calls("nvidia_smi_query", EIGHT[2:])
    ev = slow_job(sampled=["s1", "s2"])
    # Ray Data's own accounting says why it stalls: no GPU is dragging it, no more samples.
    assert bound(wanted, ev, [JobCause("log", "progress")]) == []
    # A hang with nothing but a missing step says nothing of why: the sampling goes on.
    assert [c.args["node"] for c in bound(wanted, ev, [JobCause("progress")])] == ["s3", "s4"]
    # A symptom (a timeout) is no cause either.
    assert [c.args["node"] for c in bound(wanted, ev, [JobCause("log", symptom=True)])] == ["s3", "s4"]
    # A hang (its missing step required) whose log words only echo the stall ("heartbeat",
    # "stuck") explains nothing: the GPUs still have to say busy or idle.
    hang = JobCause("log", "progress", required=("progress",))
    assert [c.args["node"] for c in bound(wanted, ev, [hang])] == ["s3", "s4"]
