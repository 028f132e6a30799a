"""Remedy changes computed from what the tools returned: captured numbers, text-valued numbers.

A component that prints the value that fits (vLLM's KV cache length) is believed over a guess;
a number kept as text (an environment variable) is still a number to compute with.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crashcart.agent.policies.evidence import Evidence, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.agent.policies.remedy import captured_values, compute_changes, parse_number
from crashcart.agent.verdict import diagnose_text
from crashcart.playbooks import Label, load_playbooks
from crashcart.playbooks._loader import LabelEntry

V0 = ("ValueError: The model's max seq len (65536) is larger than the maximum number of tokens that "
      "can be stored in KV cache (40960). Try increasing `gpu_memory_utilization` or decreasing "
      "`max_model_len` when initializing the engine.")
V1 = ("ValueError: To serve at least one request with the models's max seq len (65536), (8.00 GiB KV "
      "cache is needed, which is larger than the available KV cache memory (5.10 GiB). Based on the "
      "available memory, the estimated maximum model length is 41728. Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
NO_NUMBER = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`."


def _evidence(log: str, config: dict) -> Evidence:
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "j1"})
    ev.docs = [TextDoc("log", "job:j1", log.splitlines(), "get_logs:j1")]
    ev.configs = {"j1": config}
    return ev


def _changes(label: str, log: str, config: dict) -> dict:
    entry = load_playbooks()[label]
    ev = _evidence(log, config)
    match = match_label(entry, ev)
    assert match is not None, f"{label} did not match"
    changes, _ = compute_changes(entry.label.remedy, ev, "j1", captured_values(match))
    return changes


@pytest.mark.parametrize("log, fits", [(V0, 40960), (V1, 41728)])
def test_max_model_len_becomes_the_length_the_engine_says_fits(log, fits):
    assert _changes("vllm_kv_cache_too_small", log, {"max_model_len": 65536}) == {"max_model_len": fits}


def test_without_a_printed_length_the_remedy_falls_back_to_its_arithmetic():
    assert _changes("vllm_kv_cache_too_small", NO_NUMBER, {"max_model_len": 65536}) == {"max_model_len": 32768}


def test_the_log_only_verdict_reports_the_captured_length():
    verdict = diagnose_text(V1)
    assert verdict.diagnosis == "vllm_kv_cache_too_small"
    assert verdict.changes["max_model_len"] == 41728


def test_a_change_that_captures_a_group_no_signal_defines_is_refused():
    with pytest.raises(ValidationError, match="captures 'fits'"):
        Label.model_validate({
            "title": "t", "signals": [{"where": "log", "pattern": "cache \\((?P<blocks>\\d+)\\)"}],
            "remedy": {"kind": "resubmit_with_changes", "changes": {"max_model_len": {"capture": "fits"}}},
        })


def test_a_capture_from_any_label_is_used_not_just_the_bundled_ones():
    label = Label.model_validate({
        "title": "t",
        "signals": [{"where": "log", "pattern": "at most (?P<limit>\\d+) workers"}],
        "remedy": {"kind": "resubmit_with_changes", "changes": {"num_workers": {"capture": "limit"}}},
    })
    entry = LabelEntry("probe", "memory", label, (__import__("re").compile(label.signals[0].pattern, 2),))
    ev = _evidence("this node allows at most 6 workers", {"num_workers": 16})
    match = match_label(entry, ev)
    assert compute_changes(label.remedy, ev, "j1", captured_values(match))[0] == {"num_workers": 6}


@pytest.mark.parametrize("current, expected", [("0.45", "0.9"), (0.3, 0.9), ("0.95", None)])
def test_a_jax_memory_cap_below_the_floor_is_raised_whether_text_or_number(current, expected):
    log = "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 5368709120 bytes."
    changes = _changes("cuda_oom", log, {"batch_size": 8, "env": {"XLA_PYTHON_CLIENT_MEM_FRACTION": current}})
    assert changes.get("env.XLA_PYTHON_CLIENT_MEM_FRACTION") == expected


@pytest.mark.parametrize("text, value", [("27392", 27392), ("21,456", 21456), ("0.9", 0.9), ("16Gi", "16Gi")])
def test_captured_text_is_read_as_a_number_when_it_is_one(text, value):
    assert parse_number(text) == value


BF16_REFUSED = ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
                "Your Tesla V100-SXM2-32GB GPU has compute capability 7.0.")


@pytest.mark.parametrize("config, fixed", [
    ({"dtype": "bfloat16"}, {"dtype": "float16"}),            # vLLM's --dtype, spelled out
    ({"mixed_precision": "bf16"}, {"mixed_precision": "fp16"}),  # Accelerate
])
def test_bf16_refused_by_the_gpu_becomes_fp16_in_the_jobs_own_spelling(config, fixed):
    # No node facts: half_precision falls back to fp16, the dtype every tensor-core GPU runs.
    assert _changes("bf16_unsupported_gpu", BF16_REFUSED, config) == fixed
