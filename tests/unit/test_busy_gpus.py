"""A job whose GPUs are all busy is not starved by its data pipeline (Ray Data's notices are pacing)."""

from crashcart.agent.policies.evidence import Evidence, JobFacts, TextDoc
from crashcart.agent.policies.matching import match_label, signal_hits
from crashcart.playbooks import load_playbooks
from crashcart.playbooks._model import Signal
from crashcart.tools.cluster import GpuSample

NOTICE = "WARNING streaming_executor_state.py:790 -- Operator MapBatches(tok) is backpressured (output queue full)"


def _ev(utils: list[int]) -> Evidence:
    ev = Evidence(now=None, trigger={"kind": "chat", "job": "r"})
    ev.jobs["r"] = JobFacts(job="r", state="RUNNING", nodes=["g1", "c1"], gpus=len(utils))
    ev.telemetry["g1"] = [GpuSample(index=i, util_pct=u, memory_used_mib=30000) for i, u in enumerate(utils)]
    ev.docs.append(TextDoc("log", "job:r", [NOTICE], "get_logs:r"))
    return ev


def test_every_sampled_gpu_busy_is_a_busy_job():
    sig = Signal(where="gpus_busy", gpus_busy_pct=80)
    assert signal_hits(0, sig, None, _ev([91, 95, 88]))
    assert not signal_hits(0, sig, None, _ev([91, 4, 88]))
    assert not signal_hits(0, sig, None, _ev([]))  # nothing sampled proves nothing


def test_backpressure_notices_with_busy_gpus_are_not_backpressure():
    entry = load_playbooks()["ray_data_backpressure"]
    assert match_label(entry, _ev([93, 95])) is None
    assert match_label(entry, _ev([3, 0])) is not None
