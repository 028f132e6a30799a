"""The slurm backend's tools against the real cluster, without the agent: typed outputs,
clear errors, both JSON and text readers, node commands through srun, resubmit variants."""

from __future__ import annotations

import yaml
import pytest

from crashcart.tools import REGISTRY, ToolCall, ToolError
from crashcart.tools.backends.base import acting_for
from crashcart.tools.catalog import GpuOutput, JobsOutput, LogOutput, NodeLogOutput, NodesOutput
from slurmlab import FINAL, SlurmLab

FAILING = """#!/bin/bash
echo "$(date -u +%Y-%m-%dT%H:%M:%S) starting $SLURM_JOB_NAME"
echo "Traceback (most recent call last):" >&2
echo "ModuleNotFoundError: No module named 'peft'" >&2
exit 3
"""


def tool(backend, name: str, **args):
    return backend.run(REGISTRY.get(name), args)


@pytest.fixture(scope="module")
def failed(slurm_lab: SlurmLab) -> str:
    """A job that wrote stdout and stderr to separate, patterned files and exited 3."""
    script = slurm_lab.script("peft.sh", FAILING)
    job = slurm_lab.sbatch(script, "-J", "lora ft", "-w", "n2", "-o", "out-%x-%u-%j.log", "-e", "err-%j.log")
    slurm_lab.wait_state(job, "FAILED")
    return job


def test_read_tools_return_typed_rows(lab: SlurmLab, failed: str):
    backend = lab.backend()
    acct = tool(backend, "sacct", job=failed)
    assert isinstance(acct, JobsOutput)
    row = acct.rows[0]
    assert (row.job, row.name, row.state, row.exit_code, row.nodes, row.user) == (
        failed, "lora ft", "FAILED", "3:0", ["n2"], "root")
    assert acct.text.splitlines()[0].startswith("JobID|JobName|Partition|User|State|ExitCode")
    nodes = tool(backend, "sinfo")
    assert isinstance(nodes, NodesOutput)
    assert {(r.node, r.gpus) for r in nodes.rows} >= {("n1", 4), ("n5", 4)}
    listed = tool(backend, "list_jobs", node="n2", state=["F"])
    assert failed in [r.job for r in listed.rows] and all(r.state == "FAILED" for r in listed.rows)


def test_get_logs_reads_both_files_from_the_patterns(lab: SlurmLab, failed: str):
    out = tool(lab.backend(), "get_logs", job=failed)
    assert isinstance(out, LogOutput)
    assert f"out-lora ft-root-{failed}.log" in out.text and f"err-{failed}.log" in out.text
    assert "starting lora ft" in out.text and "No module named 'peft'" in out.text
    only = tool(lab.backend(), "get_logs", job=failed, grep="ModuleNotFound")
    assert only.truncated and "No module named" in only.text and "starting" not in only.text


def test_json_and_text_readers_agree(lab: SlurmLab):
    # The two readers run one after the other, so every node must hold still between them: the
    # session's time-limit job on n1 is killed 60-100 s into the session, and a node it leaves
    # reads allocated (completing) to one reader and idle to the next.
    lab.background_ended()
    script = lab.script("wait.sh", "#!/bin/bash\nsleep 30\n")
    job = lab.sbatch(script, "-J", "waiter", "--gres=gpu:2", "-w", "n2")
    try:
        lab.wait_state(job, "RUNNING")
        as_json, as_text = lab.backend(), lab.backend(json_output="never")
        assert as_json.cli.json_ok and not as_text.cli.json_ok
        assert tool(as_json, "sinfo").rows == tool(as_text, "sinfo").rows
        mine = [r for r in tool(as_json, "squeue").rows if r.job == job]
        assert mine == [r for r in tool(as_text, "squeue").rows if r.job == job]
        assert mine[0].gpus == 2 and mine[0].nodes == ["n2"] and mine[0].state == "RUNNING"
    finally:
        lab.cancel(job)


def test_unknown_names_are_tool_errors_naming_them(lab: SlurmLab):
    backend = lab.backend()
    for name, args, word in [("sinfo", {"node": "gpu-x99"}, "gpu-x99"), ("kernel_log", {"node": "gpu-x99"}, "gpu-x99"),
                             ("sacct", {"job": "999999"}, "999999"), ("get_logs", {"job": "999999"}, "999999"),
                             ("squeue", {"partition": "nope"}, "nope")]:
        with pytest.raises(ToolError, match=word):
            tool(backend, name, **args)
    with pytest.raises(ToolError, match="999999"):
        backend.target(ToolCall(tool="resubmit", args={"job": "999999", "reason": "x"}))
    with pytest.raises(ToolError, match="gpu-x99"):
        backend.target(ToolCall(tool="node_drain", args={"node": "gpu-x99", "reason": "x"}))


def test_node_commands_through_srun(lab: SlurmLab):
    before = set(lab.cli("squeue", "-h", "-t", "all", "-o", "%i").split())
    backend = lab.backend(node_access="srun")
    smi = tool(backend, "nvidia_smi_query", node="n2")
    assert isinstance(smi, GpuOutput) and smi.gpus == []
    assert smi.text == "nvidia-smi is not available on node n2 (not installed or not on PATH)"
    kernel = tool(backend, "kernel_log", node="n2", tail=5)
    assert isinstance(kernel, NodeLogOutput) and kernel.total_lines > 0
    # Each probe job (one per command, this test's only jobs) is accounted as what it was: a
    # completed crashcart probe, not a failure. Read once accounting has their ends.
    probes = dict(line.split("|", 1) for line in lab.cli("squeue", "-h", "-t", "all", "-o", "%i|%j").splitlines())
    probes = {job: name for job, name in probes.items() if job not in before}
    assert sorted(probes.values()) == ["crashcart-probe", "crashcart-probe"], probes
    ended = lab.wait_for("accounting to record the probes' ends", lambda: all(
        lab.state(j) in FINAL for j in probes) and {lab.state(j) for j in probes})
    assert ended == {"COMPLETED"}
    off = tool(lab.backend(node_access="none"), "kernel_log", node="n2")
    assert "switched off" in off.text


def test_node_targets_count_the_partition(lab: SlurmLab):
    facts = lab.backend().target(ToolCall(tool="node_drain", args={"node": "n5", "reason": "x"}))
    # n5 is in debug (5 nodes) and urgent (1 node): judged where a drain weighs most.
    assert (facts.partition, facts.partition_nodes, facts.gpus) == ("urgent", 1, 4)
    assert not facts.node_unavailable


def test_resubmit_through_a_config_file_and_only_once_per_request(lab: SlurmLab):
    (lab.jobs / "cfg.yaml").write_text("batch_size: 16\noptim: {lr: 0.001}\n")
    script = lab.script("cfgjob.sh", '#!/bin/bash\ncfg=cfg.yaml\nfor a in "$@"; do case $a in --config=*) cfg=${a#*=};; esac; done\ncat "$cfg"\nexit 1\n')
    old = lab.sbatch(script, "-J", "cfgjob", "-w", "n2", "-o", "cfg-%j.out")
    lab.wait_state(old, "FAILED")
    backend = lab.backend(resubmit={"config": "file", "config_file": {"path": "{workdir}/cfg.yaml", "pass_as_arg": "--config"}})
    assert tool(backend, "job_config", job=old).config == {"batch_size": 16, "optim": {"lr": 0.001}}
    args = {"job": old, "reason": "test", "changes": {"batch_size": 8, "optim.lr": 0.0005}, "request_id": "req-1"}
    new = None
    try:
        with acting_for("inc-test"):
            first = tool(backend, "resubmit", **args)
            again = tool(backend, "resubmit", **args)
        new = first.new_job
        assert again.new_job == new and "Already submitted" in again.message
        command = lab.job(new)["Command"]
        copy = command.split("--config=")[1].split()[0]
        assert yaml.safe_load(open(copy)) == {"batch_size": 8, "optim": {"lr": 0.0005}}
        assert yaml.safe_load((lab.jobs / "cfg.yaml").read_text())["batch_size"] == 16  # never edited
        assert "inc-test; request req-1" in lab.job(new)["Comment"]
        assert len([line for line in lab.cli("squeue", "-h", "-o", "%k").splitlines() if "req-1" in line]) <= 1
    finally:
        lab.cancel(new)
