"""The command line (Contract 5): eval, diagnose, investigate and guard check, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app
from crashcart.evals.scenario import BUNDLED_DIR
from helpers import GOOD_SCENARIO

# Wide enough that rich never wraps a path or an error message across lines.
ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
CONTRACT_3_KEYS = {"family", "diagnosis", "remedy", "retriable", "changes", "confidence", "evidence", "summary"}
CONTRACT_5_FIELDS = {"id", "passed", "family", "diagnosis", "remedy", "root_cause", "actions",
                     "violations", "tool_calls", "duration_ms", "failures"}
XID79_SCENARIO = BUNDLED_DIR / "hardware" / "xid79-fell-off-bus-h100-4node.yaml"
WRITE_TOOLS = {"node_drain", "node_resume", "resubmit", "cancel_job", "escalate", "notify"}

OOM_LOG = """\
[rank0]: Traceback (most recent call last):
[rank0]:     loss.backward()
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free.
srun: error: gpu-a01: task 0: Exited with exit code 1
"""
XID_LOG = "[1843.113] NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus.\n"
NCCL_LOG = """\
node-1:1234:1234 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>
node-1:1234:1234 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
node-1:1234:1250 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 127.0.0.1<46321> failed : Software caused connection abort
"""


@pytest.fixture
def runner():
    return CliRunner()


def invoke(runner: CliRunner, *args: str, input: str | bytes | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input, env=ENV)


@pytest.fixture
def logs(tmp_path):
    files = {
        "oom.log": OOM_LOG.encode(),
        "xid.log": XID_LOG.encode(),
        "nccl.log": NCCL_LOG.encode(),
        "empty.log": b"",
        "core.bin": b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return {name: tmp_path / name for name in files}


# --- eval ---

def test_eval_one_bundled_scenario_writes_contract_5_json(runner, tmp_path):
    out = tmp_path / "reports" / "out.json"
    result = invoke(runner, "eval", XID79_SCENARIO, "--json", out)
    assert result.exit_code == 0, result.output
    assert "1/1 passed" in result.output
    assert f"results written to {out}" in result.output
    data = json.loads(out.read_text())
    assert data["summary"]["total"] == 1 and data["summary"]["passed"] == 1
    assert data["summary"]["violations"] == 0
    (entry,) = data["scenarios"]
    assert CONTRACT_5_FIELDS <= set(entry)
    assert entry["id"] == "xid79-fell-off-bus-h100-4node"
    assert entry["passed"] is True and entry["failures"] == [] and entry["error"] is None
    assert (entry["family"], entry["diagnosis"], entry["remedy"], entry["root_cause"]) == (
        "hardware", "gpu_fallen_off_bus", "exclude_node", "node:gpu-b07")
    assert entry["tool_calls"] > 0 and entry["duration_ms"] > 0
    tools = {a["tool"]: a for a in entry["actions"]}
    assert tools["node_drain"]["args"]["node"] == "gpu-b07"
    assert "gpu-b07" in tools["resubmit"]["args"]["exclude_nodes"]
    for a in entry["actions"]:
        assert {"tool", "args", "decision"} <= set(a)
        assert a["decision"] in {"allow", "dry_run", "needs_approval", "deny"}


def test_eval_quiet_prints_the_summary_line(runner, tmp_path):
    (tmp_path / "good.yaml").write_text(GOOD_SCENARIO)
    result = invoke(runner, "eval", tmp_path, "--quiet")
    assert result.exit_code == 0, result.output
    assert "1/1 passed (100.0%), 0 forbidden actions, 0 errors" in result.output


def test_eval_missing_path_is_a_clear_error(runner, tmp_path):
    missing = tmp_path / "no-such-scenarios"
    result = invoke(runner, "eval", missing)
    assert result.exit_code != 0
    assert f"error: {missing}: no such file or folder" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_eval_reports_a_broken_file_and_goes_on(runner, tmp_path):
    (tmp_path / "a-good.yaml").write_text(GOOD_SCENARIO)
    (tmp_path / "b-bad.yaml").write_text("id: bad\ntitle: [oops\n")
    out = tmp_path / "out.json"
    result = invoke(runner, "eval", tmp_path, "--json", out)
    assert result.exit_code == 1, result.output  # goes on, and says so in the exit code (issue 8)
    assert "1/2 passed" in result.output
    data = json.loads(out.read_text())
    bad = next(e for e in data["scenarios"] if e["error"])
    assert "b-bad.yaml" in bad["error"] and bad["passed"] is False
    assert data["summary"]["errors"] == 1


def test_eval_unknown_policy_is_refused(runner):
    result = invoke(runner, "eval", XID79_SCENARIO, "--policy", "oracle")
    assert result.exit_code != 0
    assert "policy 'oracle'" in result.output


# --- diagnose ---

def test_diagnose_several_files_one_verdict_each(runner, logs):
    result = invoke(runner, "diagnose", logs["oom.log"], logs["xid.log"], logs["nccl.log"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"{logs['oom.log']}: cuda_oom (memory) -> resubmit_with_changes" in out
    assert f"{logs['xid.log']}: gpu_fallen_off_bus (hardware) -> exclude_node" in out
    assert f"{logs['nccl.log']}: nccl_socket_interface (distributed) -> resubmit_with_changes" in out
    assert "NCCL_SOCKET_IFNAME" in out  # the changes are shown
    assert "| [1843.113] NVRM: Xid" in out  # and the evidence


def test_diagnose_json_one_object_per_line(runner, logs):
    result = invoke(runner, "diagnose", "--json", logs["oom.log"], logs["xid.log"], logs["nccl.log"])
    assert result.exit_code == 0, result.output
    lines = [l for l in result.stdout.splitlines() if l.strip()]
    assert len(lines) == 3
    verdicts = [json.loads(l) for l in lines]
    for v in verdicts:
        assert CONTRACT_3_KEYS <= set(v), v
        assert isinstance(v["retriable"], bool) and isinstance(v["evidence"], list) and v["evidence"]
        assert 0 <= v["confidence"] <= 1
    assert [v["diagnosis"] for v in verdicts] == ["cuda_oom", "gpu_fallen_off_bus", "nccl_socket_interface"]
    assert [v["source"] for v in verdicts] == [str(logs[n]) for n in ("oom.log", "xid.log", "nccl.log")]
    assert "batch_size" in verdicts[0]["changes"]
    assert "env.NCCL_SOCKET_IFNAME" in verdicts[2]["changes"]


def test_diagnose_reads_stdin(runner):
    result = invoke(runner, "diagnose", "-", "--json", input=XID_LOG)
    assert result.exit_code == 0, result.output
    v = json.loads(result.stdout.strip())
    assert v["source"] == "-"
    assert (v["family"], v["diagnosis"], v["remedy"]) == ("hardware", "gpu_fallen_off_bus", "exclude_node")


def test_diagnose_bad_files_get_an_error_line_and_good_ones_a_verdict(runner, logs, tmp_path):
    missing = tmp_path / "gone.log"
    result = invoke(runner, "diagnose", logs["oom.log"], logs["empty.log"], logs["core.bin"], missing,
                    logs["xid.log"])
    assert result.exit_code == 1
    out = result.output
    assert "Traceback" not in out
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"error: {logs['empty.log']}: the log is empty" in out
    assert f"error: {logs['core.bin']}: this looks like a binary file" in out
    assert f"error: {missing}: cannot read" in out
    assert f"{logs['oom.log']}: cuda_oom" in out
    assert f"{logs['xid.log']}: gpu_fallen_off_bus" in out  # a bad file in the middle stops nothing


def test_diagnose_json_errors_are_json_too(runner, logs):
    result = invoke(runner, "diagnose", "--json", logs["empty.log"], logs["nccl.log"], logs["core.bin"])
    assert result.exit_code == 1
    rows = [json.loads(l) for l in result.stdout.splitlines() if l.strip()]
    assert len(rows) == 3
    assert rows[0] == {"source": str(logs["empty.log"]), "error": f"{logs['empty.log']}: the log is empty"}
    assert rows[1]["diagnosis"] == "nccl_socket_interface"
    assert rows[2]["source"] == str(logs["core.bin"]) and "binary" in rows[2]["error"]


def test_diagnose_empty_stdin(runner):
    result = invoke(runner, "diagnose", "-", input="")
    assert result.exit_code == 1
    assert "error: -: the log is empty" in result.output


# --- investigate ---

def action_rows(output: str) -> dict[str, str]:
    """{tool: decision} from the 'write actions through the guard' table."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│|").split("│")]
        if len(cells) >= 3 and cells[0] in WRITE_TOOLS:
            rows[cells[0]] = cells[2]
    return rows


def test_investigate_prints_calls_diagnosis_and_dry_run_decisions(runner, tmp_path):
    state = tmp_path / "state"
    result = invoke(runner, "investigate", XID79_SCENARIO, "--state-dir", state)
    assert result.exit_code == 0, result.output
    out = result.output
    # the tool calls, in order, with their arguments
    assert "sacct(job='48213')" in out
    assert "kernel_log(node='gpu-b07')" in out
    assert "Xid" in out
    # the diagnosis
    assert "diagnosis gpu_fallen_off_bus" in out
    assert "root cause=node:gpu-b07" in out and "remedy=exclude_node" in out
    # the guard: the built-in policy is dry-run, so every write is a proposal and none is allowed
    assert "write actions through the guard" in out
    rows = action_rows(out)
    assert {"node_drain", "resubmit"} <= set(rows), out
    assert set(rows.values()) == {"dry_run"}, rows
    assert "allow" not in rows.values()
    assert "dry_run" in out
    assert (state / "incidents.duckdb").exists()


def test_investigate_in_observe_mode_takes_no_write_action(runner, tmp_path):
    result = invoke(runner, "investigate", XID79_SCENARIO, "--state-dir", tmp_path, "--mode", "observe")
    assert result.exit_code == 0, result.output
    rows = action_rows(result.output)
    assert "allow" not in rows.values() and "dry_run" not in rows.values()
    assert "diagnosis gpu_fallen_off_bus" in result.output


def test_investigate_bad_mode_and_bad_scenario(runner, tmp_path, write_scenario):
    result = invoke(runner, "investigate", XID79_SCENARIO, "--state-dir", tmp_path, "--mode", "yolo")
    assert result.exit_code == 2 and "mode 'yolo'" in result.output
    bad = write_scenario("typo.yaml", GOOD_SCENARIO.replace("  state: idle", "  stat: idle", 1))
    result = invoke(runner, "investigate", bad, "--state-dir", tmp_path / "s")
    assert result.exit_code == 2
    assert f"error: {bad}: cluster.nodes[0:gpu-a01].stat: unknown field" in result.output


def test_a_live_cluster_is_named_by_its_cluster_file_not_with_a_scenario(runner, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: gpu-prod\nbackend: slurm\n")
    for command in ("investigate", "watch"):
        both = invoke(runner, command, XID79_SCENARIO, "--cluster", cluster, "--state-dir", tmp_path)
        assert both.exit_code == 2 and "either a scenario file" in both.output
        neither = invoke(runner, command, "--state-dir", tmp_path)
        assert neither.exit_code == 2 and "either a scenario file" in neither.output
    missing = invoke(runner, "watch", "--cluster", tmp_path / "nope.yaml", "--state-dir", tmp_path)
    assert missing.exit_code == 2 and "nope.yaml: no such file" in missing.output


def test_a_broken_cluster_file_names_the_file_and_the_field(runner, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: gpu-prod\nbackend: slurm\nslurm:\n  conection: {method: local}\n")
    for command in (("watch", "--polls", "1"), ("investigate", "--job", "42")):
        result = invoke(runner, *command, "--cluster", cluster, "--state-dir", tmp_path)
        assert result.exit_code == 2, result.output
        assert f"error: {cluster}: slurm.conection" in result.output


def test_investigate_on_a_live_cluster_needs_something_to_look_at(runner, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("name: gpu-prod\nbackend: slurm\n")
    result = invoke(runner, "investigate", "--cluster", cluster, "--state-dir", tmp_path)
    assert result.exit_code == 2 and "--job, --node or --text" in result.output
    result = invoke(runner, "investigate", "--cluster", cluster, "--job", "42", "--kind", "job_exploded", "--state-dir", tmp_path)
    assert result.exit_code == 2 and "--kind 'job_exploded'" in result.output
    result = invoke(runner, "investigate", XID79_SCENARIO, "--job", "42", "--state-dir", tmp_path)
    assert result.exit_code == 2 and "go with --cluster" in result.output


# --- guard check ---

def test_guard_check_good_file(runner, tmp_path):
    good = tmp_path / "guard.yaml"
    good.write_text("mode: dry_run\npermissions:\n  - tool: resubmit\n    partitions: [h100]\n  - tool: escalate\n")
    result = invoke(runner, "guard", "check", good)
    assert result.exit_code == 0, result.output
    assert f"{good}: ok (mode dry_run, 2 permission rules)" in result.output


def test_guard_check_bundled_eval_guard(runner):
    path = BUNDLED_DIR.parent / "guard.yaml"
    result = invoke(runner, "guard", "check", path)
    assert result.exit_code == 0, result.output
    assert "ok (mode autonomous" in result.output


@pytest.mark.parametrize("text, message", [
    ("mode: dry_run\npermisions: []\n", "permisions: unknown field"),
    ("mode: yolo\n", "mode: Input should be 'observe', 'dry_run' or 'autonomous'"),
    ("mode: [\n", "line 2, column 1: not valid YAML"),
])
def test_guard_check_broken_file(runner, tmp_path, text, message):
    bad = tmp_path / "guard.yaml"
    bad.write_text(text)
    result = invoke(runner, "guard", "check", bad)
    assert result.exit_code == 2
    assert f"error: {bad}: " in result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_guard_check_missing_file(runner, tmp_path):
    result = invoke(runner, "guard", "check", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert "cannot read" in result.output


# --- the installed console script, as a person runs it ---

def console_script() -> list[str]:
    script = Path(sys.executable).parent / "crashcart"
    return [str(script)] if script.exists() else [sys.executable, "-m", "crashcart.agent.interfaces.cli"]


def test_console_script_help():
    out = subprocess.run(console_script() + ["--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for command in ("eval", "diagnose", "investigate", "approve", "incidents", "guard"):
        assert command in out.stdout


def test_console_script_diagnose_from_a_pipe(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    out = subprocess.run(console_script() + ["diagnose", "--json", "-", str(empty)], input=NCCL_LOG.encode(),
                         capture_output=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert b"Traceback" not in out.stderr
    first, second = [json.loads(l) for l in out.stdout.decode().splitlines() if l.strip()]
    assert first["diagnosis"] == "nccl_socket_interface" and first["source"] == "-"
    assert CONTRACT_3_KEYS <= set(first)
    assert second == {"source": str(empty), "error": f"{empty}: the log is empty"}
