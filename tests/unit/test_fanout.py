"""Bounded per-node fan-out: GPU probes wait for the kernel logs, then go to the suspects."""

from __future__ import annotations

from crashcart.agent.policies.evidence import Evidence, JobFacts
from crashcart.agent.policies.fanout import bound
from crashcart.tools._spec import ToolCall

NODES = ["g1", "g2", "g3", "g4"]


class Pointing:
    """A candidate label whose hits name some nodes."""

    def __init__(self, *nodes):
        self.nodes = nodes

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
