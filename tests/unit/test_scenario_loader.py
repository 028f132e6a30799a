"""The scenario loader (Contract 2): every error names the file and the field."""

from __future__ import annotations

import re

import pytest

from crashcart.evals.scenario import (
    FAMILIES,
    REMEDIES,
    Scenario,
    ScenarioError,
    discover,
    load_scenario,
    parse_scenario,
)
from helpers import GOOD_SCENARIO, dump, minimal

FILE = "evals/scenarios/typo.yaml"


def load_error(data: dict | str, path: str = FILE) -> ScenarioError:
    text = data if isinstance(data, str) else dump(data)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, path)
    err = info.value
    assert err.path == path
    assert str(err).startswith(f"{path}: "), str(err)
    return err


# --- the minimal file is valid, so every failure below comes from the one change ---

def test_minimal_scenario_loads():
    sc = parse_scenario(dump(minimal()), FILE)
    assert sc.id == "minimal"
    assert sc.trigger.job == "48213"
    assert sc.cluster.job("48213").nodes == ["gpu-b07"]
    assert sc.expected_families == ["memory"]  # expect.family defaults to the top-level one


def test_good_scenario_text_loads():
    sc = parse_scenario(GOOD_SCENARIO, "good.yaml")
    assert sc.expect.actions[0].changes == {"batch_size": {"lt": 8}}
    assert sc.expect.forbid[0].args == {"node": "gpu-a01"}


# --- unknown keys, at every level ---

def test_unknown_top_level_key():
    err = load_error(minimal(titel="typo"))
    assert "titel" in err.message
    assert "unknown field" in err.message


def test_unknown_key_in_trigger():
    data = minimal()
    data["trigger"]["jbo"] = "48213"
    err = load_error(data)
    assert "trigger.jbo" in err.message
    assert "unknown field" in err.message


def test_unknown_key_in_node_names_the_node():
    data = minimal()
    data["cluster"]["nodes"][0]["kernal_log"] = "[1.0] NVRM: Xid 79"
    err = load_error(data)
    assert "cluster.nodes[0:gpu-b07].kernal_log" in err.message
    assert "unknown field" in err.message


def test_unknown_key_in_job_names_the_job_id():
    data = minimal()
    data["cluster"]["jobs"][0]["stat"] = "FAILED"
    err = load_error(data)
    assert "cluster.jobs[0:48213].stat" in err.message
    assert "unknown field" in err.message


def test_unknown_key_in_second_job_names_its_index_and_id():
    data = minimal()
    data["cluster"]["jobs"].append({"id": 48214, "state": "RUNNING", "confg": {}})
    err = load_error(data)
    assert "cluster.jobs[1:48214].confg" in err.message


def test_unknown_key_in_an_earlier_attempt():
    data = minimal()
    data["cluster"]["jobs"][0]["attempts"] = [{"id": "48100", "state": "FAILED", "exitcode": "1:0"}]
    err = load_error(data)
    assert "cluster.jobs[0:48213].attempts[0:48100].exitcode" in err.message


def test_unknown_key_in_expected_action():
    data = minimal(expect={"remedy": "resubmit", "actions": [{"tool": "resubmit", "arg": {"job": "48213"}}]})
    err = load_error(data)
    assert "expect.actions[0].arg" in err.message


def test_unknown_key_in_expect():
    data = minimal(expect={"remedy": "resubmit", "max_toolcalls": 5})
    err = load_error(data)
    assert "expect.max_toolcalls" in err.message


# --- required fields ---

@pytest.mark.parametrize("field", ["id", "title", "family", "backend"])
def test_missing_required_top_level_field(field):
    err = load_error(minimal(**{field: None}))
    assert re.search(rf"(^|; ){field}: Field required", err.message), err.message


def test_missing_trigger_kind():
    data = minimal(trigger={"job": "48213"})
    err = load_error(data)
    assert "trigger.kind: Field required" in err.message


def test_missing_cluster_now():
    data = minimal()
    del data["cluster"]["now"]
    err = load_error(data)
    assert "cluster.now: Field required" in err.message


def test_missing_expect_remedy():
    data = minimal(expect={"family": "memory", "diagnosis": ["cuda_oom"]})
    err = load_error(data)
    assert "expect.remedy: Field required" in err.message


def test_several_errors_are_all_reported():
    data = minimal(title=None, backend=None)
    err = load_error(data)
    assert "title: Field required" in err.message
    assert "backend: Field required" in err.message


# --- bad values ---

def test_bad_family_lists_the_families():
    err = load_error(minimal(family="memroy"))
    assert err.message.startswith("family:")
    assert "'memroy'" in err.message
    assert all(f in err.message for f in FAMILIES)


def test_bad_expected_family_in_a_list():
    err = load_error(minimal(expect={"remedy": "resubmit", "family": ["memory", "hardwear"]}))
    assert "expect.family" in err.message
    assert "'hardwear'" in err.message


def test_bad_remedy():
    err = load_error(minimal(expect={"remedy": "reboot"}))
    assert "expect.remedy" in err.message
    assert "'reboot'" in err.message
    assert "resubmit_with_changes" in err.message  # the allowed ones are listed


def test_bad_remedy_in_a_list_of_acceptable_ones():
    err = load_error(minimal(expect={"remedy": ["resubmit", "drain"]}))
    assert "expect.remedy" in err.message and "'drain'" in err.message


def test_a_list_of_remedies_is_accepted():
    sc = parse_scenario(dump(minimal(expect={"remedy": ["resubmit", "resubmit_with_changes"]})), FILE)
    assert sc.expect.remedy == ["resubmit", "resubmit_with_changes"]
    assert set(sc.expect.remedy) <= set(REMEDIES)


def test_bad_backend():
    err = load_error(minimal(backend="pbs"))
    assert err.message.startswith("backend:")
    assert "slurm" in err.message and "kubernetes" in err.message and "ray" in err.message


@pytest.mark.parametrize("root_cause", ["gpu-b07", "host:gpu-b07", "Node:gpu-b07"])
def test_bad_root_cause(root_cause):
    err = load_error(minimal(expect={"remedy": "resubmit", "root_cause": root_cause}))
    assert "expect.root_cause" in err.message
    assert repr(root_cause) in err.message
    assert "node:NAME" in err.message


@pytest.mark.parametrize("root_cause", ["node:gpu-b07", "job:48213", "cluster"])
def test_good_root_causes(root_cause):
    sc = parse_scenario(dump(minimal(expect={"remedy": "resubmit", "root_cause": root_cause})), FILE)
    assert sc.expect.root_cause == root_cause


def test_bad_trigger_kind():
    err = load_error(minimal(trigger={"kind": "job_crashed"}))
    assert "trigger.kind" in err.message


def test_bad_node_state_names_the_node():
    data = minimal()
    data["cluster"]["nodes"][0]["state"] = "broken"
    err = load_error(data)
    assert "cluster.nodes[0:gpu-b07].state" in err.message


def test_bad_time_names_the_field():
    data = minimal()
    data["cluster"]["now"] = "yesterday"
    err = load_error(data)
    assert "cluster.now" in err.message


# --- YAML and file problems ---

def test_invalid_yaml_names_line_and_column():
    text = dump(minimal()).replace("title: Minimal scenario", "title: [unclosed, list")
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.startswith("title:"))
    err = load_error(text)
    m = re.search(r"line (\d+), column (\d+)", err.message)
    assert m, err.message
    assert int(m.group(1)) in (line, line + 1)  # where the parser notices, at or just after the error
    assert "not valid YAML" in err.message


def test_bad_indentation_names_its_line():
    text = "id: x\ntitle: t\n  family: memory\n"
    err = load_error(text)
    assert "line 3" in err.message
    assert "not valid YAML" in err.message


@pytest.mark.parametrize("text", ["- id: a\n- id: b\n", "just a string\n", "", "42\n"])
def test_a_file_that_is_not_a_mapping(text):
    err = load_error(text)
    assert "one mapping" in err.message


def test_unreadable_binary_file_names_the_file(write_scenario):
    path = write_scenario("binary.yaml", b"\xff\xfe\x00\x01\x02binary\x00")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert "cannot read" in info.value.message


def test_nul_bytes_in_utf8_text_are_an_error_not_a_crash(write_scenario):
    path = write_scenario("nul.yaml", b"id: x\x00\x01\ntitle: t\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(path) in str(info.value)
    assert "not valid YAML" in info.value.message


def test_missing_file_and_directory_name_the_path(tmp_path):
    for path in (tmp_path / "nope.yaml", tmp_path):
        with pytest.raises(ScenarioError) as info:
            load_scenario(path)
        assert info.value.path == str(path)
        assert "cannot read" in info.value.message


def test_load_scenario_reads_a_good_file(write_scenario):
    sc = load_scenario(write_scenario("good.yaml", GOOD_SCENARIO))
    assert sc.id == "tiny-cuda-oom-bs8"
    assert sc.cluster.job("90210").config == {"batch_size": 8, "gradient_checkpointing": False}


def test_errors_from_load_scenario_name_the_real_path(write_scenario):
    path = write_scenario("sub/typo.yaml", minimal(famliy="memory"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"{path}: ")
    assert "famliy" in info.value.message


# --- references and defaults ---

def test_trigger_job_not_among_jobs():
    err = load_error(minimal(trigger={"kind": "job_failed", "job": "99999"}))
    assert "trigger.job '99999' is not among cluster.jobs" in err.message


def test_trigger_node_not_among_nodes():
    err = load_error(minimal(trigger={"kind": "node_alert", "node": "gpu-z99"}))
    assert "trigger.node 'gpu-z99' is not among cluster.nodes" in err.message


def test_null_optional_fields_take_defaults():
    data = minimal(description=None)
    data.update({"tags": None, "guard": None, "description": None})
    data["trigger"].update({"node": None, "text": None})
    data["cluster"].update({"events": None})
    data["cluster"]["nodes"][0].update({"partition": None, "gpus": None, "labels": None, "taints": None,
                                        "kernel_log": None, "gpu_telemetry": None})
    data["cluster"]["jobs"][0].update({"config": None, "attempts": None, "checkpoints": None,
                                       "progress": None, "depends_on": None, "log": None, "gpus": None})
    data["expect"].update({"family": None, "diagnosis": None, "root_cause": None, "actions": None,
                           "forbid": None, "max_tool_calls": None})
    text = dump(data)
    assert "tags: null" in text and "config: null" in text  # the nulls really are in the file
    sc = parse_scenario(text, FILE)
    assert sc.tags == [] and sc.guard is None and sc.description is None
    assert sc.cluster.events == []
    node, job = sc.cluster.nodes[0], sc.cluster.jobs[0]
    assert node.gpus == 0 and node.labels == {} and node.taints == [] and node.gpu_telemetry == []
    assert job.config == {} and job.attempts == [] and job.depends_on == [] and job.gpus == 0
    assert sc.expect.actions == [] and sc.expect.forbid == [] and sc.expect.max_tool_calls is None
    assert sc.expected_families == ["memory"]
    assert sc.split == "main"


def test_null_required_field_is_still_required():
    data = minimal()
    data["expect"]["remedy"] = None
    err = load_error(data)
    assert "expect.remedy: Field required" in err.message


def test_integer_job_ids_become_strings():
    data = minimal(trigger={"kind": "job_failed", "job": 48213})
    data["cluster"]["jobs"][0]["id"] = 48213
    data["cluster"]["jobs"][0]["attempts"] = [{"id": 48100, "state": "FAILED"}]
    data["cluster"]["jobs"][0]["depends_on"] = [48000]
    text = dump(data)
    assert "id: 48213" in text and "job: 48213" in text  # unquoted: YAML reads ints
    sc = parse_scenario(text, FILE)
    assert sc.trigger.job == "48213"
    job = sc.cluster.job("48213")
    assert job is not None and job.id == "48213"
    assert job.attempts[0].id == "48100"
    assert job.depends_on == ["48000"]


def test_one_diagnosis_label_is_a_list():
    sc = parse_scenario(dump(minimal(expect={"remedy": "resubmit", "diagnosis": "cuda_oom"})), FILE)
    assert sc.expect.diagnosis == ["cuda_oom"]


def test_holdout_tag_sets_the_split():
    sc = parse_scenario(dump(minimal(tags=["holdout", "oom"])), FILE)
    assert sc.split == "holdout"


# --- the bundled suite ---

BUNDLED = discover()


def test_the_bundled_suite_is_not_empty():
    assert len(BUNDLED) >= 20
    assert all(p.suffix == ".yaml" for p in BUNDLED)


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_bundled_scenario_loads(path):
    sc = load_scenario(path)
    assert isinstance(sc, Scenario)
    assert sc.id and sc.title
    assert sc.family in FAMILIES


def test_bundled_ids_are_unique():
    ids: dict[str, str] = {}
    dupes = []
    for path in BUNDLED:
        sc = load_scenario(path)
        if sc.id in ids:
            dupes.append(f"{sc.id}: {ids[sc.id]} and {path}")
        ids[sc.id] = str(path)
    assert not dupes, dupes


def test_discover_skips_underscore_files_and_takes_files_as_given(tmp_path, write_scenario):
    a = write_scenario("b/a.yaml", minimal())
    write_scenario("b/_draft.yaml", minimal())
    write_scenario("b/notes.txt", "not a scenario")
    loose = write_scenario("loose.yml", minimal())
    assert discover([tmp_path / "b"]) == [a]
    assert discover([loose]) == [loose]
