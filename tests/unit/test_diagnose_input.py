"""`crashcart diagnose` on what people really paste: text it cannot classify, big logs, gzip,
several files read as one incident (issue 8, items 5 and 8)."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc

import pytest
from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app
from crashcart.agent.verdict import HEAD_LINES, MIDDLE_LINES, TAIL_LINES, diagnose_text, read_log_lines

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}

# `sacct -P` as a person pastes it: a header and one row, no log at all.
SACCT_ROW = """\
JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode
48213|gpt-13b|h100|ml|64|COMPLETED|0:0
"""
SACCT_FAILED = "48213|gpt-13b|h100|dana|FAILED|1:0|2026-03-01T20:02:00|2026-03-02T09:52:00|13:50:00|gpu-b[05-08]\n"
GARBAGE = "qwlkej 2398 zxcmn ,./;' asdlkj\n\t~~~ 0x7f3a 0x7f3b\nlorem ipsum dolor sit amet\n"
CONFIG_DUMP = "model:\n  hidden: 4096\n  layers: 32\noptimizer: adamw\nlr: 3.0e-4\n"
XID = "[1843.113] NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus.\n"
NCCL_TIMEOUT = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=1022, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                "ran for 600009 milliseconds before timing out.\n")
STEP = "2026-03-02 09:{m:02d}:{s:02d} | INFO | train | step {n} | loss 2.31 | 3512 tokens/s\n"


@pytest.mark.parametrize("text", [SACCT_ROW, SACCT_FAILED, GARBAGE, CONFIG_DUMP],
                         ids=["sacct-row", "sacct-failed-row", "garbage", "config"])
def test_text_it_cannot_classify_is_unknown_never_healthy(text):
    v = diagnose_text(text)
    assert v.family == "unknown"
    assert v.diagnosis != "healthy"
    assert v.confidence <= 0.2


def test_a_run_making_progress_is_still_healthy():
    log = "".join(STEP.format(m=i // 60, s=i % 60, n=i) for i in range(20)) + "saved checkpoint to /ckpt/step_19\n"
    v = diagnose_text(log)
    assert (v.family, v.diagnosis) == ("none", "healthy")


def _stream(text: str) -> io.BytesIO:
    return io.BytesIO(text.encode())


def test_a_big_log_is_read_as_a_bounded_window_that_keeps_the_evidence():
    n = 200_000
    lines = [STEP.format(m=i // 60 % 60, s=i % 60, n=i) for i in range(n)]
    lines.insert(n // 2, XID)
    tracemalloc.start()
    kept = read_log_lines(_stream("".join(lines)), "big.log")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(kept) <= HEAD_LINES + MIDDLE_LINES + TAIL_LINES
    assert XID.strip() in kept
    assert kept[0] == lines[0].rstrip("\n") and kept[-1] == lines[-1].rstrip("\n")
    # Order is kept: the Xid line sits between the head and the tail.
    assert kept.index(lines[HEAD_LINES - 1].rstrip("\n")) < kept.index(XID.strip()) < kept.index(lines[-1].rstrip("\n"))
    assert peak < 60 * 2**20  # the ~14 MB log itself is around once, the window is small


def test_a_small_log_is_kept_whole():
    text = "".join(STEP.format(m=0, s=i % 60, n=i) for i in range(100))
    assert read_log_lines(_stream(text), "x") == text.splitlines()


def test_a_log_without_a_final_newline_keeps_its_last_line():
    assert read_log_lines(_stream("a\nb\nlast line"), "x") == ["a", "b", "last line"]


@pytest.fixture
def runner():
    return CliRunner()


def test_diagnose_reads_a_gzipped_log(runner, tmp_path):
    path = tmp_path / "job.out.gz"
    path.write_bytes(gzip.compress(XID.encode()))
    out = runner.invoke(app, ["diagnose", "--json", str(path)], env=ENV)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["diagnosis"] == "gpu_fallen_off_bus"


def test_diagnose_a_broken_gzip_is_a_clear_error(runner, tmp_path):
    path = tmp_path / "job.out.gz"
    path.write_bytes(gzip.compress(XID.encode())[:20])
    out = runner.invoke(app, ["diagnose", str(path)], env=ENV)
    assert out.exit_code == 1
    assert str(path) in out.output and "cannot read" in out.output
    assert "Traceback" not in out.output


def test_diagnose_together_reads_a_job_log_and_dmesg_as_one_incident(runner, tmp_path):
    job, dmesg = tmp_path / "job.out", tmp_path / "dmesg.txt"
    job.write_text(NCCL_TIMEOUT)
    dmesg.write_text(XID)
    apart = [json.loads(l) for l in runner.invoke(app, ["diagnose", "--json", str(job), str(dmesg)], env=ENV).output.splitlines()]
    assert len(apart) == 2
    out = runner.invoke(app, ["diagnose", "--json", "--together", str(job), str(dmesg)], env=ENV)
    assert out.exit_code == 0, out.output
    (one,) = [json.loads(l) for l in out.output.splitlines()]
    # The collective timeout is the symptom; the GPU that fell off the bus is the cause.
    assert (one["family"], one["diagnosis"]) == ("hardware", "gpu_fallen_off_bus")
    assert one["source"] == f"{job} + {dmesg}"
