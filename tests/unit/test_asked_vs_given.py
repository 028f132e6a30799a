"""Two general signals: a job's own log asking for more than the scheduler gave it
(`exceeds_job`), and a memory figure the job prints that only ever rises (`memory_growth`
with a pattern). Both decide between a retry and a fix only the owner can make."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.playbooks import load_playbooks
from crashcart.playbooks._model import Signal

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=timezone.utc)
TIMEOUT = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
KB = load_playbooks()


def _evidence(log: str, nodes: int = 2, gpus: int = 16, state: str = "FAILED") -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": "job_failed", "job": "7"})
    ev.jobs["7"] = JobFacts(job="7", state=state, nodes=[f"n{i}" for i in range(nodes)], gpus=gpus)
    ev.docs = [TextDoc("log", "job:7", log.splitlines(), "get_logs:7")]
    return ev


@pytest.mark.parametrize("launch, nodes, gpus, too_big", [
    ("+ srun torchrun --nnodes=4 --nproc-per-node=8 train.py", 2, 16, True),
    ("+ srun torchrun --nnodes=2 --nproc_per_node=8 train.py", 2, 16, False),
    ("+ srun torchrun --nnodes=2 --nproc_per_node=8 train.py", 2, 8, True),     # 4 GPUs a node, 8 processes each
    ("+ srun torchrun --nnodes 1:4 --nproc-per-node 4 train.py", 2, 8, False),  # elastic: the minimum is what must assemble
    ("  min_nodes        : 6\n  max_nodes        : 6\n  nproc_per_node   : 8", 4, 32, True),
    ("  min_nodes        : 4\n  max_nodes        : 4\n  nproc_per_node   : 8", 4, 32, False),
])
def test_a_launch_bigger_than_the_allocation_is_a_config_error(launch, nodes, gpus, too_big):
    match = match_label(KB["invalid_config"], _evidence(f"{launch}\n{TIMEOUT}", nodes, gpus))
    assert (match is not None) is too_big


def test_a_job_with_no_gpu_count_is_never_called_too_small():
    assert match_label(KB["invalid_config"], _evidence(f"torchrun --nnodes=8 --nproc-per-node=8\n{TIMEOUT}", 2, 0)) is None


def _rss_log(values: list[float], end: str = "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.") -> str:
    lines = [f"[rank0] step {i * 1000} loss 0.3 host_rss_gb {v}" for i, v in enumerate(values, 1)]
    return "\n".join([*lines, end])


def test_host_memory_that_only_rises_before_an_oom_is_a_leak():
    match = match_label(KB["memory_leak"], _evidence(_rss_log([14.0, 30.5, 47.1, 63.8])))
    assert match is not None
    assert any("logged memory 14 -> 63.8 over 4 lines" in h.line for h in match.hits)


@pytest.mark.parametrize("values", [
    [40.0, 44.0, 43.0, 48.0],   # it came down once: not a steady leak
    [40.0, 42.0, 44.0],         # +10%: a warm-up, not a leak
    [40.0, 80.0],               # two samples are not a trend
])
def test_memory_that_dips_barely_grows_or_is_sampled_twice_is_not_a_leak(values):
    assert match_label(KB["memory_leak"], _evidence(_rss_log(values))) is None


def test_rising_memory_without_an_oom_is_not_a_leak_incident():
    assert match_label(KB["memory_leak"], _evidence(_rss_log([10.0, 20.0, 30.0], end="Training completed."))) is None


def test_a_peak_figure_can_only_rise_and_is_not_read_as_a_leak():
    log = "\n".join(f"step {i} max_rss_gb {v}" for i, v in enumerate([10, 20, 30, 40]))
    assert match_label(KB["memory_leak"], _evidence(log + "\nCUDA out of memory. Tried to allocate 2.00 GiB")) is None


def test_deepspeed_memory_reports_count_as_a_series():
    log = "\n".join(f"[INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = {v} GB, percent = {v / 5:.1f}%"
                    for v in (50.2, 71.9, 93.0, 120.4))
    assert match_label(KB["memory_leak"], _evidence(log + "\nslurmstepd: error: Detected 1 oom_kill event in StepId=7.0.")) is not None


def test_the_signals_say_what_they_need():
    with pytest.raises(ValidationError, match="named group `count`"):
        Signal(where="log", pattern=r"--nnodes=(\d+)", exceeds_job="nodes")
    with pytest.raises(ValidationError, match="named group `value`"):
        Signal(where="memory_growth", pattern=r"rss (\d+)")


def _events(message: str) -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": "job_pending", "job": "p"})
    ev.jobs["p"] = JobFacts(job="p", state="Pending")
    ev.docs = [TextDoc("events", "job:p", [f"Warning FailedScheduling pod/p {message}"], "kubectl_events:p")]
    return ev


@pytest.mark.parametrize("message, taint, selector", [
    ("0/9 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, 6 node(s) had untolerated taint {dedicated: gpu}.", True, False),
    ("0/9 nodes are available: 7 node(s) didn't match Pod's node affinity/selector, 2 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }.", False, True),
    ("0/8 nodes are available: 8 node(s) had untolerated taint {nvidia.com/gpu: present}.", True, False),
    ("0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.", False, True),
    ("node(s) had untolerated taint {dedicated: gpu}", True, False),  # no counts: the one reason given
])
def test_the_reason_that_kept_most_nodes_out_is_the_cause(message, taint, selector):
    ev = _events(message)
    assert (match_label(KB["taint_toleration_mismatch"], ev) is not None) is taint
    assert (match_label(KB["node_affinity_mismatch"], ev) is not None) is selector


@pytest.mark.parametrize("line, virtual", [
    ("NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>", True),
    ("NCCL INFO NET/Socket : Using [0]ens1f0np0:10.40.3.21<0> [1]docker0:172.17.0.1<0>", True),
    ("NCCL INFO NET/Socket : Using [0]enp65s0f0np0:10.31.2.107<0> [1]virbr0:192.168.122.1<0>", True),
    ("NCCL INFO Bootstrap : Using cni0:10.244.3.1<0>", True),
    ("NCCL INFO NET/Socket : Using [0]ens1f0np0:10.40.3.21<0> [1]ens1f1np1:10.41.3.21<0>", False),
    ("NCCL INFO NET/Socket : Using [0]bond0:10.2.0.7<0>", False),
    ("NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0> [1]loopback-test:1.2.3.4<0>", False),
])
def test_a_host_local_interface_anywhere_in_nccls_list_is_the_problem(line, virtual):
    ev = _evidence(line + "\nsocketStartConnect: Connect to 172.17.0.1<37711> failed : Connection refused")
    assert (match_label(KB["nccl_socket_interface"], ev) is not None) is virtual
