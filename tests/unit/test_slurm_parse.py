"""Reading what the Slurm CLI prints, from text recorded on a real Slurm 22.05 cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from crashcart.tools import ToolError
from crashcart.tools.backends.slurm import _parse as parse
from crashcart.tools.backends.slurm._submit import (
    args_config, expand_pattern, export_env, export_option, parse_submit_line, set_args,
)

HEADER = "|".join(parse.SACCT_FIELDS)
# `sacct -P -D -j 8` after `scontrol requeue 8`: the first run, its step, the current run.
REQUEUED = f"""{HEADER}
8|sleep.sh|debug|root|REQUEUED|0:0|2026-11-21T22:13:24|2026-11-21T22:13:24|00:00:00|n2|None|2026-11-21T22:13:22|billing=1,cpu=1,gres/gpu=2,mem=200M,node=1
8.batch|batch|||CANCELLED|0:15|2026-11-21T22:13:24|2026-11-21T22:13:25|00:00:01|n2||2026-11-21T22:13:24|cpu=1,gres/gpu=2,mem=200M,node=1
8|sleep.sh|debug|root|PENDING|0:0|Unknown|Unknown|00:00:00|None assigned|BeginTime|2026-11-21T22:13:26|
"""


def test_sacct_rows_number_the_earlier_runs_of_a_requeued_job():
    rows = parse.sacct_jobs(parse.sacct_records(REQUEUED))
    assert [(r.job, r.state, r.attempt) for r in rows] == [("8", "REQUEUED", 1), ("8", "PENDING", None)]
    first, now = rows
    assert first.gpus == 2 and first.nodes == ["n2"]
    assert first.start_time == datetime(2026, 11, 21, 22, 13, 24, tzinfo=UTC)
    assert now.start_time is None and now.nodes == [] and now.reason == "BeginTime"


@pytest.mark.parametrize("line", [
    "8|sleep.sh|debug|root|FAILED|1:0|2026-11-21T22:13:24",  # truncated (a cut pipe)
    "sacct: error: Problem talking to the database: Connection refused",
    "8|sleep.sh|debug|root||1:0|2026|2026|00:00:00|n2|None|2026|",  # no state
])
def test_a_line_sacct_should_not_print_is_an_error_naming_it(line):
    with pytest.raises(ToolError) as e:
        parse.sacct_records(f"{HEADER}\n{line}\n")
    assert line[:40] in str(e.value) and "cannot read" in str(e.value)


def test_an_unexpected_sacct_header_is_an_error():
    with pytest.raises(ToolError, match="unexpected header"):
        parse.sacct_records("JobID|State\n1|FAILED\n")


def test_scontrol_values_keep_their_spaces():
    rec = parse.scontrol_record(
        "JobId=3 JobName=my job UserId=root(0) JobState=RUNNING Reason=None Dependency=(null) "
        "NodeList=n[2-3] TRES=cpu=2,mem=400M,node=2,billing=2,gres/gpu=4 "
        "Command=/tmp/t/ok.sh --batch_size=8 --lr 0.1 WorkDir=/tmp/t Comment=crashcart: resubmit of 1 (inc-9)  "
        "StdOut=/tmp/t/log-my job-3-root.out SubmitTime=2026-11-21T22:12:28 StartTime=2026-11-21T22:12:29 "
        "EndTime=2026-11-21T23:12:29")
    assert rec["JobName"] == "my job" and rec["Comment"] == "crashcart: resubmit of 1 (inc-9)"
    assert rec["Command"] == "/tmp/t/ok.sh --batch_size=8 --lr 0.1"
    row = parse.scontrol_job(rec)
    assert (row.user, row.nodes, row.gpus, row.end_time) == ("root", ["n2", "n3"], 4, None)


@pytest.mark.parametrize("tres, gpus", [
    ("billing=1,cpu=1,gres/gpu=2,mem=200M,node=1", 2), ("gres/gpu=8,gres/gpu:h100=8", 8),
    ("gres:gpu:2", 2), ("gres/gpu:a100=4", 4), ("cpu=4", 0), ("", 0), (None, 0),
])
def test_gpus_in_tres(tres, gpus):
    assert parse.gpus_in(tres) == gpus


@pytest.mark.parametrize("base, flags, state", [
    ("idle", set(), "idle"), ("mixed", set(), "mixed"), ("allocated", set(), "allocated"),
    ("idle", {"DRAIN"}, "drained"), ("mixed", {"DRAIN"}, "draining"), ("down", set(), "down"),
    ("down", {"DRAIN"}, "drained"), ("idle*", set(), "not_ready"), ("idle", {"NOT_RESPONDING"}, "not_ready"),
    ("drained", set(), "drained"), ("draining", set(), "draining"), ("unknown", set(), "not_ready"),
])
def test_node_states_in_crashcarts_words(base, flags, state):
    assert parse.crashcart_state(base, flags) == state


def test_sinfo_text_merges_a_nodes_partitions():
    nodes = parse.sinfo_text("n4|debug*|idle|gpu:4|none|127.0.0.1|localhost\n"
                             "n5|debug*|drained|gpu:a100:4(S:0-1)|crashcart inc-1: xid 79|127.0.0.1|localhost\n"
                             "n5|urgent|drained|gpu:a100:4(S:0-1)|crashcart inc-1: xid 79|127.0.0.1|localhost\n")
    n5 = nodes[1]
    assert (n5.partitions, n5.state, n5.gpus, n5.gpu_model, n5.reason) == (
        ["debug", "urgent"], "drained", 4, "a100", "crashcart inc-1: xid 79")
    assert nodes[0].reason is None


def test_squeue_text():
    rows = parse.squeue_text("5|debug|ok.sh|root|PENDING|PartitionTimeLimit||2026-11-21T22:12:54|N/A|(null)|N/A|1\n"
                             "4|debug|train|dana|RUNNING|None|n[3-4]|2026-11-21T22:12:54|2026-11-21T22:12:55|afterok:3|gres:gpu:2|2\n")
    assert (rows[0].state, rows[0].reason, rows[0].nodes, rows[0].start_time) == ("PENDING", "PartitionTimeLimit", [], None)
    assert (rows[1].nodes, rows[1].gpus, rows[1].depends_on) == (["n3", "n4"], 4, ["3"])


def test_nvidia_smi_csv():
    text = ("index, name, temperature.gpu, power.draw [W], clocks.sm [MHz], utilization.gpu [%], memory.used [MiB], "
            "memory.total [MiB], ecc.errors.uncorrected.volatile.total, remapped_rows.pending, "
            "clocks_throttle_reasons.active, clocks_throttle_reasons.hw_slowdown, clocks_throttle_reasons.hw_thermal_slowdown\n"
            "0, NVIDIA H100 80GB HBM3, 93, 512.40 W, 1290 MHz, 100 %, 71234 MiB, 81559 MiB, 0, No, 0x0000000000000048, Not Active, Active\n"
            "1, NVIDIA H100 80GB HBM3, 41, [N/A], 1980 MHz, 99 %, 70011 MiB, 81559 MiB, 2, Yes, 0x0000000000000000, Not Active, Not Active\n")
    now = datetime(2026, 3, 2, tzinfo=UTC)
    samples, model = parse.nvidia_smi_samples(text, now)
    assert model == "NVIDIA H100 80GB HBM3"
    hot, bad = samples
    assert (hot.temperature_c, hot.power_w, hot.throttle_reasons, hot.time) == (93, 512.4, ["hw_thermal_slowdown"], now)
    assert (bad.power_w, bad.ecc_uncorrected, bad.remapped_rows_pending) == (None, 2, 1)
    with pytest.raises(ToolError, match="cannot read"):
        parse.nvidia_smi_samples(text.splitlines()[0] + "\n0, NVIDIA H100\n", now)


def test_submit_line_options_script_and_arguments():
    line = ("sbatch --parsable -J my job --comment=crashcart: resubmit of 1 (inc-1) --export=ALL,FOO=bar "
            "-x n1 --gpus=2 -t1 -o log-%x-%j.out train.sh --batch_size=8 --lr 0.1")
    sub = parse_submit_line(line, {"job-name": "my job", "comment": "crashcart: resubmit of 1 (inc-1)"})
    assert sub.options == [("parsable", None), ("job-name", "my job"), ("comment", "crashcart: resubmit of 1 (inc-1)"),
                           ("export", "ALL,FOO=bar"), ("exclude", "n1"), ("gpus", "2"), ("time", "1"),
                           ("output", "log-%x-%j.out")]
    assert (sub.script, sub.args) == ("train.sh", ["--batch_size=8", "--lr", "0.1"])
    assert args_config(sub.args) == {"batch_size": 8, "lr": 0.1}
    assert args_config(["--model.lr=0.1", "--fp16", "--name", "x"]) == {"model": {"lr": 0.1}, "fp16": True, "name": "x"}


def test_script_arguments_are_set_in_place_or_appended():
    assert set_args(["--batch_size=8", "--lr", "0.1"], {"batch_size": 4, "lr": 0.05, "gradient_checkpointing": True}) == [
        "--batch_size=4", "--lr", "0.05", "--gradient_checkpointing=true"]


def test_export_carries_values_slurm_cannot_quote():
    value, carried = export_option(None, {"NCCL_SOCKET_IFNAME": "^lo,docker", "NCCL_DEBUG": "INFO"})
    assert value == "ALL,NCCL_SOCKET_IFNAME,NCCL_DEBUG=INFO" and carried == {"NCCL_SOCKET_IFNAME": "^lo,docker"}
    value, carried = export_option("NONE,FOO=1,NCCL_DEBUG=WARN", {"NCCL_DEBUG": "INFO"})
    assert value == "NONE,FOO=1,NCCL_DEBUG=INFO" and carried == {}
    assert export_env("ALL,FOO=1,BAR") == {"FOO": 1}


def test_output_patterns():
    assert expand_pattern("out-%x-%u-%j.%5j.log", "42", "my job", "dana", "n3") == "out-my job-dana-42.00042.log"
    assert expand_pattern("slurm-%A_%a-%N-%%.out", "42", None, None, "n3") == "slurm-42_4294967294-n3-%.out"


def test_a_node_list_that_is_not_a_hostlist_is_a_tool_error_naming_it():
    # Found by tests/reliability/test_fuzz.py: each was a ValueError traceback, or a memory bomb.
    for text in ("gpu[a-b]", "gpu[3-1]", "n[1-2,x]", "gpu[0-99999999]"):
        with pytest.raises(ToolError, match="node list"):
            parse.nodes_of(text)
    assert parse.nodes_of("gpu-b[05-06],gpu-a1") == ["gpu-b05", "gpu-b06", "gpu-a1"]


def test_a_json_time_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="seconds since the epoch"):
        parse.epoch(10**20)
    assert parse.epoch({"set": True, "number": 1772442000}).year == 2026
