"""Bad input gets a clear error naming what and where, never a traceback or a silent wrong
answer (issue 8, item 8); and every bundled scenario still loads (DESIGN.md: the contract only grows)."""

from __future__ import annotations

import copy

import pytest
import yaml
from typer.testing import CliRunner

from crashcart.agent.config import ClusterConfigError, load_cluster_config
from crashcart.agent.interfaces.cli import app
from crashcart.evals.scenario import ScenarioError, discover, load_scenario, parse_scenario
from helpers import GOOD_SCENARIO, dump

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}


def good() -> dict:
    return copy.deepcopy(yaml.safe_load(GOOD_SCENARIO))


def error_of(data: dict | str) -> str:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data if isinstance(data, str) else dump(data), "s.yaml")
    message = str(info.value)
    assert message.startswith("s.yaml: ")
    return message


def test_a_key_given_twice_is_an_error_naming_the_line_not_last_wins():
    text = GOOD_SCENARIO.replace("      state: FAILED\n", "      state: FAILED\n      state: COMPLETED\n", 1)
    message = error_of(text)
    assert "key 'state' appears twice" in message and "line " in message


def test_a_key_given_twice_in_a_cluster_config_is_an_error(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("name: a\nbackend: slurm\nname: b\n")
    with pytest.raises(ClusterConfigError) as info:
        load_cluster_config(path)
    assert str(path) in str(info.value) and "key 'name' appears twice" in str(info.value)


def test_yaml_merge_keys_may_still_be_overridden():
    data = yaml.safe_load(GOOD_SCENARIO)
    text = dump(data).replace("expect:\n", "x_defaults: &d {remedy: none}\nexpect:\n  <<: *d\n", 1)
    # Only the unknown top-level key is wrong; the overridden merged `remedy` is not a duplicate.
    message = error_of(text)
    assert "x_defaults: unknown field" in message and "twice" not in message


@pytest.mark.parametrize("state", ["FIALED", "exploded", "RUNING"])
def test_an_unknown_job_state_names_the_job_and_the_field(state):
    data = good()
    data["cluster"]["jobs"][0]["state"] = state
    message = error_of(data)
    assert f"cluster.jobs[0:90210].state: unknown job state {state!r}" in message


@pytest.mark.parametrize("state", ["CANCELLED by 40231", "COMPLETED", "Failed", "Init:CrashLoopBackOff",
                                   "OOMKilled", "SUCCEEDED", "REQUEUED", "OutOfnvidia.com/gpu"])
def test_the_schedulers_real_words_are_states(state):
    data = good()
    data["cluster"]["jobs"][0]["state"] = state
    parse_scenario(dump(data), "s.yaml")


def test_an_unknown_state_in_an_earlier_attempt_is_found_too():
    data = good()
    attempt = copy.deepcopy(data["cluster"]["jobs"][0])
    attempt.update(id="90209", state="FAILD")
    data["cluster"]["jobs"][0]["attempts"] = [attempt]
    assert "cluster.jobs[0:90210].attempts[0:90209].state" in error_of(data)


def test_the_trigger_job_on_an_undeclared_node_is_an_error():
    data = good()
    data["cluster"]["jobs"][0]["nodes"] = ["gpu-a01", "gpu-a99"]
    assert "the trigger job runs on gpu-a99, not among cluster.nodes" in error_of(data)


def test_other_jobs_may_name_nodes_the_recording_left_out():
    data = good()
    other = copy.deepcopy(data["cluster"]["jobs"][0])
    other.update(id="90100", state="COMPLETED", nodes=["gpu-a77"])
    data["cluster"]["jobs"].append(other)
    parse_scenario(dump(data), "s.yaml")


@pytest.mark.parametrize("where", ["nodes", "jobs"])
def test_a_negative_gpu_count_is_an_error(where):
    data = good()
    data["cluster"][where][0]["gpus"] = -8
    message = error_of(data)
    assert f"cluster.{where}[0:" in message and ".gpus: Input should be greater than or equal to 0" in message


def test_an_end_before_the_start_is_an_error():
    data = good()
    data["cluster"]["jobs"][0]["end_time"] = "2026-03-02T08:00:00Z"
    assert "cluster.jobs[0:90210]: end_time 2026-03-02T08:00:00+00:00 is before start_time" in error_of(data)


@pytest.mark.parametrize("section", ["forbid", "actions"])
def test_an_expectation_naming_an_unknown_tool_is_an_error(section):
    data = good()
    data["expect"][section] = [{"tool": "node_drian", "args": {"node": "gpu-a01"}}]
    message = error_of(data)
    assert f"expect.{section}[0].tool: unknown tool 'node_drian'" in message and "node_drain" in message


def test_every_bundled_scenario_still_loads():
    files = discover()
    assert len(files) >= 320
    for path in files:
        load_scenario(path)


# --- the command line ---------------------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def test_eval_reads_yml_files(tmp_path):
    (tmp_path / "oom.yml").write_text(GOOD_SCENARIO)
    assert [p.name for p in discover([tmp_path])] == ["oom.yml"]
    out = invoke("eval", tmp_path, "-q")
    assert out.exit_code == 0, out.output
    assert "1/1 passed" in out.output


def test_eval_on_a_folder_with_no_scenarios_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    out = invoke("eval", tmp_path)
    assert out.exit_code == 2
    assert f"{tmp_path}: no scenario files here" in out.output


def test_eval_exits_non_zero_when_a_scenario_errors(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD_SCENARIO)
    (tmp_path / "bad.yaml").write_text(GOOD_SCENARIO.replace("state: FAILED", "state: FIALED"))
    out = invoke("eval", tmp_path, "-q")
    assert out.exit_code == 1, out.output
    assert "1 errors" in out.output and "could not be loaded or run" in out.output


def test_eval_html_to_a_folder_is_refused_before_running(tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD_SCENARIO)
    out = invoke("eval", tmp_path / "good.yaml", "--html", tmp_path)
    assert out.exit_code == 2
    assert f"--html {tmp_path}: is a folder" in out.output


def test_export_to_a_missing_folder_is_a_clear_error(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD_SCENARIO)
    invoke("investigate", tmp_path / "s.yaml", "--state-dir", tmp_path / "state")
    out = invoke("export", "inc-whatever", "-o", tmp_path / "missing" / "new.yaml", "--state-dir", tmp_path / "state")
    assert out.exit_code == 2
    assert f"the folder {tmp_path / 'missing'} does not exist" in out.output


@pytest.mark.parametrize("flag, value", [("--polls", "-1"), ("--polls", "0"), ("--interval", "-5"),
                                         ("--stall-minutes", "0"), ("--lookback-minutes", "-1")])
def test_watch_refuses_impossible_numbers(tmp_path, flag, value):
    (tmp_path / "s.yaml").write_text(GOOD_SCENARIO)
    out = invoke("watch", tmp_path / "s.yaml", flag, value, "--state-dir", tmp_path / "state")
    assert out.exit_code == 2
    assert flag in out.output and "Traceback" not in out.output
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("command", [["replay", "inc-x"], ["export", "inc-x"], ["incidents"],
                                     ["incidents", "show", "inc-x"]])
def test_a_missing_state_dir_is_named(tmp_path, command):
    out = invoke(*command, "--state-dir", tmp_path / "nope")
    assert out.exit_code == 2
    assert f"--state-dir {tmp_path / 'nope'}: no such folder" in out.output


def test_a_state_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "s.yaml").write_text(GOOD_SCENARIO)
    (tmp_path / "state").write_text("oops")
    out = invoke("investigate", tmp_path / "s.yaml", "--state-dir", tmp_path / "state")
    assert out.exit_code == 2 and "is a file, not a folder" in out.output
