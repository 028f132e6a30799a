"""One table of setting synonyms and units: a fix lands on the key the job reads, in its unit."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crashcart.agent.policies.config_keys import (
    KeyTable, KeyTableError, format_slurm_time, load_key_table, parse_duration, parse_size,
)
from crashcart.agent.policies.evidence import Evidence, JobFacts
from crashcart.agent.policies.remedy import compute_changes
from crashcart.playbooks import Remedy, load_playbooks
from crashcart.playbooks._loader import PlaybookError, _check_setting_names


def _changes(changes: dict, config: dict, **facts) -> tuple[dict, list[str]]:
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "j1"})
    ev.configs = {"j1": config}
    if facts:
        ev.jobs = {"j1": JobFacts(job="j1", **facts)}
    return compute_changes(Remedy.model_validate({"kind": "resubmit_with_changes", "changes": changes}), ev, "j1")


@pytest.mark.parametrize("text, nbytes", [
    ("16Gi", 16 * 2**30), ("512Mi", 512 * 2**20), ("16g", 16 * 2**30), ("31.5 GiB", 31.5 * 2**30),
    ("33554432kB", 32 * 2**30), ("64G", 64e9), ("240GB", 240e9), (1024, 1024),
])
def test_sizes_read_in_every_spelling_jobs_and_tools_use(text, nbytes):
    assert parse_size(text) == pytest.approx(nbytes)


@pytest.mark.parametrize("text", ["lots", "16 bananas", "", True])
def test_a_size_that_is_not_one_is_none_not_a_guess(text):
    assert parse_size(text) is None


@pytest.mark.parametrize("text, seconds", [
    ("2-00:00:00", 172800), ("04:00:00", 14400), ("90", 5400), ("1-12", 129600), ("30:00", 1800),
])
def test_slurm_time_limits(text, seconds):
    assert parse_duration(text, "slurm_time") == seconds


def test_slurm_time_round_trips():
    assert format_slurm_time(172800) == "2-00:00:00"
    assert format_slurm_time(5400) == "01:30:00"


@pytest.mark.parametrize("config, key, expected", [
    ({"shm_size": "64Mi"}, "shm_size", "16Gi"),
    ({"shm_size_mib": 64}, "shm_size_mib", 16384),
    ({"shm_size_gb": 1}, "shm_size_gb", 18),  # 16 GiB in decimal GB, rounded up
    ({"dshm_size_limit": "1g"}, "dshm_size_limit", "16g"),
])
def test_one_setting_lands_on_the_jobs_own_key_in_its_unit(config, key, expected):
    changes, _ = _changes({"shm_size": {"set": "16Gi"}}, config)
    assert changes == {key: expected}


@pytest.mark.parametrize("key", [
    "batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu", "micro_batch_size",
])
def test_the_batch_is_halved_on_whichever_key_the_trainer_reads(key):
    changes, _ = _changes({"per_gpu_batch": {"divide": 2, "min_value": 1, "only_if_present": True}}, {key: 8})
    assert changes == {key: 4}


def test_a_nested_pod_limit_is_changed_where_it_lives():
    changes, _ = _changes({"host_memory_limit": {"multiply": 2, "only_if_present": True}},
                          {"resources": {"limits": {"memory": "24Gi"}}})
    assert changes == {"resources.limits.memory": "48Gi"}


def test_a_key_the_job_does_not_have_is_never_added():
    changes, notes = _changes({"ray_gcs_fault_tolerance": {"set": True}}, {"head_memory_gb": 8})
    assert changes == {}
    assert any("no key for ray_gcs_fault_tolerance" in n for n in notes)


def test_the_setting_uses_the_jobs_synonym():
    changes, _ = _changes({"ray_gcs_fault_tolerance": {"set": True}, "ray_head_memory": {"multiply": 2}},
                          {"gcs_ft_enabled": False, "head_memory_gib": 16})
    assert changes == {"gcs_ft_enabled": True, "head_memory_gib": 32}


def test_an_env_var_the_runtime_reads_is_added():
    changes, _ = _changes({"pytorch_alloc_conf": {"set": "expandable_segments:True"}}, {"env": {}})
    assert changes == {"env.PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


@pytest.mark.parametrize("config, expected", [
    ({"mixed_precision": "fp16"}, {"mixed_precision": "bf16"}),
    ({"precision": "16-mixed"}, {"precision": "bf16-mixed"}),
    ({"bf16": {"enabled": False}, "fp16": {"enabled": True}}, {"bf16.enabled": True, "fp16.enabled": False}),
    ({"fp16": True}, {"fp16": False}),
])
def test_a_dtype_is_written_in_each_frameworks_spelling(config, expected):
    changes, _ = _changes({"precision": {"set": "bf16", "only_if_present": True}}, config)
    assert changes == expected


def test_a_remedy_naming_a_synonym_instead_of_its_setting_is_refused():
    kb = load_playbooks()
    entry = kb["cuda_oom"]
    bad_remedy = entry.label.remedy.model_copy(update={"changes": {"per_device_train_batch_size": entry.label.remedy.changes["per_gpu_batch"]}})
    bad = entry.__class__(entry.name, entry.family, entry.label.model_copy(update={"remedy": bad_remedy}), entry.patterns)
    with pytest.raises(PlaybookError, match="per_device_train_batch_size.*per_gpu_batch"):
        _check_setting_names({bad.name: bad})


def test_the_table_refuses_a_key_in_two_settings_and_a_unit_that_does_not_fit():
    with pytest.raises(ValidationError, match="in both"):
        KeyTable.model_validate({"settings": {
            "a": {"description": "a", "kind": "count", "keys": [{"key": "x"}]},
            "b": {"description": "b", "kind": "count", "keys": [{"key": "x"}]},
        }})
    with pytest.raises(ValidationError, match="does not fit"):
        KeyTable.model_validate({"settings": {
            "a": {"description": "a", "kind": "memory", "keys": [{"key": "x", "unit": "seconds"}]},
        }})
    with pytest.raises(ValidationError, match="Extra inputs"):
        KeyTable.model_validate({"settings": {}, "synonyms": {}})


def test_a_broken_table_file_names_the_file(tmp_path):
    bad = tmp_path / "keys.yaml"
    bad.write_text("settings:\n  a: {description: a, kind: volume, keys: []}\n")
    with pytest.raises(KeyTableError) as err:
        load_key_table(str(bad))
    assert str(bad) in str(err.value)


def test_bf16_capable_gpus_are_matched_as_words():
    table = load_key_table()
    assert table.supports_bf16("NVIDIA H100 80GB HBM3")
    assert table.supports_bf16("NVIDIA A100-SXM4-40GB")
    assert table.supports_bf16("NVIDIA L40S")
    assert not table.supports_bf16("Tesla V100-SXM2-32GB")
    assert not table.supports_bf16("Tesla T4")
    assert not table.supports_bf16(None)


def test_a_companion_change_is_never_made_alone():
    rule = {"per_gpu_batch": {"divide": 2, "min_value": 1, "only_if_present": True},
            "grad_accumulation": {"multiply": 2, "only_if_present": True, "along_with": "per_gpu_batch"}}
    assert _changes(rule, {"batch_size": 8, "gradient_accumulation_steps": 2})[0] == {
        "batch_size": 4, "gradient_accumulation_steps": 4}
    # Already at one sample per GPU: more accumulation alone would only grow the global batch.
    assert _changes(rule, {"batch_size": 1, "gradient_accumulation_steps": 2})[0] == {}
