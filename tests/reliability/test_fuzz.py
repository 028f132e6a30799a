"""A fuzzer over everything crashcart reads from outside: sacct/squeue/sinfo/scontrol text,
nvidia-smi CSV, scenario files and logs (`crashcart diagnose`). Each input is either read or
refused with crashcart's own error naming what is wrong (ToolError, ScenarioError, LogError);
any other exception is a traceback a user would see, and fails the test.

Inputs start from what the real tools print and are bent: cells swapped for odd values
(unicode, separators, huge numbers, markup), lines cut, fields added or dropped.
CRASHCART_FUZZ_EXAMPLES sets the cases per test (CI runs the default)."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import UTC, datetime

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crashcart.agent.verdict import LogError, diagnose_text, read_log_bytes
from crashcart.evals.scenario import BUNDLED_DIR, ScenarioError, load_scenario
from crashcart.tools import ToolError
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.backends.slurm import _parse as parse
from crashcart.tools.render.gpu import NVIDIA_SMI_QUERY

import procs

EXAMPLES = int(os.environ.get("CRASHCART_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CASES: Counter[str] = Counter()
NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)

# What real Slurm and nvidia-smi put in a cell, and what a broken pipe or another version might.
ODD = st.sampled_from([
    "", " ", "|", ",", "[", "]", "gpu[", "gpu[1-", "gpu[a-b]", "gpu[3-1]", "gpu[0-99999999]", "n[1-2,x]",
    "Unknown", "None", "N/A", "(null)", "[N/A]", "-1", "0", "99999999999999999999", "1e308", "nan", "-0.0",
    "2026-13-45T99:99:99", "2026-03-02T10:00:00", "0x0000000000000048", "Active", "Not Active", "Yes", "No",
    "gres/gpu=-4", "gres/gpu:h100=8", "gres:gpu:2", "gpu:a100:9999999999", "[/red]", "[bold]x", "\x1b[31m",
    "ÿ\u202e", "\t", "🙂", "²", "1²", "٣", "a=b c=d", "JobId=", "CANCELLED by 0", "NODE_FAIL", "OUT_OF_MEMORY", "1:0", "0:9",
])
CELL = st.one_of(ODD, st.text(max_size=20))


def _mutate(lines: list[str], sep: str, data) -> str:
    """Real lines with some cells replaced, some lines cut or doubled, cells added or dropped."""
    out = []
    for line in lines:
        cells = line.split(sep)
        for i in range(len(cells)):
            if data.draw(st.integers(0, 4)) == 0:
                cells[i] = data.draw(CELL)
        choice = data.draw(st.integers(0, 9))
        if choice == 0 and cells:
            cells.pop(data.draw(st.integers(0, len(cells) - 1)))
        elif choice == 1:
            cells.append(data.draw(CELL))
        text = sep.join(cells)
        if data.draw(st.integers(0, 9)) == 0:
            text = text[: data.draw(st.integers(0, len(text)))]
        out.append(text)
    if data.draw(st.booleans()) and out:
        out.insert(data.draw(st.integers(0, len(out))), data.draw(st.text(max_size=40)))
    return "\n".join(out) + "\n"


def _refused_or_read(fn, *args):
    try:
        return fn(*args)
    except ToolError as e:
        assert str(e), "an error with no message"
        return None


SACCT = [
    "|".join(parse.SACCT_FIELDS),
    "48213|llama-7b|a100|dana|OUT_OF_MEMORY|0:125|2026-03-02T09:01:00|2026-03-02T09:40:00|00:39:00|gpu-a[01-02]|None|2026-03-02T09:00:00|billing=16,cpu=16,gres/gpu=16,mem=200G,node=2",
    "48213.batch|batch||dana|OUT_OF_MEMORY|0:125|2026-03-02T09:01:00|2026-03-02T09:40:00|00:39:00|gpu-a01||2026-03-02T09:01:00|cpu=8,gres/gpu=8,mem=100G,node=1",
    "48214_[1-3%2]|sweep|a100|eli|PENDING|0:0|Unknown|Unknown|00:00:00|None assigned|Priority|2026-03-02T09:05:00|billing=8,cpu=8,gres/gpu:a100=8,node=1",
]
SQUEUE = ["5|debug|ok.sh|root|PENDING|PartitionTimeLimit||2026-11-21T22:12:54|N/A|(null)|N/A|1",
          "4|debug|train|dana|RUNNING|None|n[3-4]|2026-11-21T22:12:54|2026-11-21T22:12:55|afterok:3|gres:gpu:2|2"]
SINFO = ["n1|debug*|idle|gpu:a100:4|none|10.0.0.1|n1", "n2|debug*|drained+DRAIN|gpu:4(S:0)|Xid 79|10.0.0.2|n2",
         "n2|long|drained+DRAIN|gpu:4(S:0)|Xid 79|10.0.0.2|n2", "n3|debug*|down*|(null)|Not responding|n3|n3"]
SCONTROL = ["JobId=48213 JobName=my job UserId=dana(1001) JobState=FAILED Reason=NonZeroExitCode Dependency=afterok:3 "
            "ExitCode=1:0 NodeList=gpu-a[01-02] TRES=cpu=16,gres/gpu=16 SubmitTime=2026-03-02T09:00:00 "
            "StartTime=2026-03-02T09:01:00 EndTime=2026-03-02T09:40:00 Partition=a100 Comment=crashcart: x"]
SMI = [", ".join(NVIDIA_SMI_QUERY.split(",")),
       "0, NVIDIA H100 80GB HBM3, 93, 512.40 W, 1290 MHz, 100 %, 71234 MiB, 81559 MiB, 0, No, 0x48, "
       + ", ".join(["Not Active"] * (len(NVIDIA_SMI_QUERY.split(",")) - 12)),
       "1, NVIDIA H100 80GB HBM3, 41, [N/A], 1980 MHz, 99 %, 70011 MiB, 81559 MiB, 2, Yes, 0x0, "
       + ", ".join(["Active"] * (len(NVIDIA_SMI_QUERY.split(",")) - 12))]


@FUZZ
@given(st.data())
def test_sacct_text(data):
    CASES["sacct"] += 1
    records = _refused_or_read(parse.sacct_records, _mutate(SACCT, "|", data))
    if records is not None:
        _refused_or_read(parse.sacct_jobs, records)


@FUZZ
@given(st.data())
def test_squeue_text(data):
    CASES["squeue"] += 1
    _refused_or_read(parse.squeue_text, _mutate(SQUEUE, "|", data))


@FUZZ
@given(st.data())
def test_sinfo_text(data):
    CASES["sinfo"] += 1
    _refused_or_read(parse.sinfo_text, _mutate(SINFO, "|", data))


@FUZZ
@given(st.data())
def test_scontrol_line(data):
    CASES["scontrol"] += 1
    for line in _mutate(SCONTROL, " ", data).splitlines():
        record = _refused_or_read(parse.scontrol_record, line)
        if record and "JobId" in record:
            _refused_or_read(parse.scontrol_job, record)


@FUZZ
@given(st.data())
def test_nvidia_smi_csv(data):
    CASES["nvidia-smi"] += 1
    _refused_or_read(parse.nvidia_smi_samples, _mutate(SMI, ",", data), NOW)


SQUEUE_JSON = {"jobs": [
    {"job_id": 48213, "name": "llama", "user_name": "dana", "partition": "a100", "job_state": ["RUNNING"],
     "state_reason": "None", "nodes": "gpu-a[01-02]", "tres_alloc_str": "cpu=16,gres/gpu=16",
     "submit_time": {"set": True, "number": 1772442000}, "start_time": 1772442060, "end_time": 0,
     "dependency": "afterok:48212"}]}
SINFO_JSON = {"nodes": [{"name": "gpu-a01", "state": ["IDLE", "DRAIN"], "state_flags": [], "gres": "gpu:h100:8",
                         "partitions": ["a100"], "reason": "Xid 79", "address": "10.0.0.1", "hostname": "gpu-a01"}]}
JSON_VALUES = st.one_of(SCALARS := st.one_of(ODD, st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                                             st.booleans(), st.none()),
                        st.lists(ODD, max_size=3), st.dictionaries(st.sampled_from(["set", "number", "x"]), SCALARS, max_size=2))


def _bend_json(value, data):
    if isinstance(value, dict):
        return {k: (data.draw(JSON_VALUES) if data.draw(st.integers(0, 3)) == 0 else _bend_json(v, data))
                for k, v in value.items() if data.draw(st.integers(0, 14))}
    if isinstance(value, list):
        return [_bend_json(v, data) for v in value]
    return value


class _Cli:
    def __init__(self, text: str):
        self.text = text

    def out(self, argv):
        return self.text


@FUZZ
@given(data=st.data())
def test_squeue_and_sinfo_json(data):
    """Through the backend's own JSON reader: what it cannot read must come out a ToolError."""
    from types import SimpleNamespace

    from crashcart.tools.backends.slurm._backend import SlurmBackend

    CASES["squeue/sinfo --json"] += 1
    for command, sample, read in (("squeue", SQUEUE_JSON, parse.squeue_json), ("sinfo", SINFO_JSON, parse.sinfo_json)):
        text = json.dumps(_bend_json(sample, data))
        if data.draw(st.integers(0, 9)) == 0:
            text = text[: data.draw(st.integers(0, len(text)))]
        _refused_or_read(SlurmBackend._json, SimpleNamespace(cli=_Cli(text)), command, read)


LOG_LINES = [
    "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 2 has a total capacity of 79.15 GiB",
    "NCCL WARN Timeout: watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "slurmstepd: error: *** JOB 48213 ON gpu-a01 CANCELLED AT 2026-03-02T09:40:00 DUE TO TIME LIMIT ***",
    "step 1200 loss 2.31 tokens/s 81234", "saved checkpoint step 1200 to /ckpt/step1200.pt",
    "Traceback (most recent call last):", "OSError: [Errno 28] No space left on device",
    "srun: error: gpu-a01: task 0: Exited with exit code 1", "48213|train|a100|dana|FAILED|1:0",
]


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(LOG_LINES), st.text(max_size=200), ODD), max_size=30), st.binary(max_size=64))
def test_diagnose_logs(lines, raw):
    CASES["logs"] += 1
    for data in ("\n".join(lines).encode("utf-8", "surrogatepass"), raw):
        try:
            text = read_log_bytes(data, "fuzz.log")
        except LogError as e:
            assert "fuzz.log" in str(e)
            continue
        verdict = diagnose_text(text, source="fuzz.log")
        assert verdict.diagnosis and verdict.family
        assert verdict.diagnosis != "healthy" or verdict.confidence is not None


SCENARIO_DATA = yaml.safe_load((BUNDLED_DIR / "memory" / "cuda-oom-llama7b-bs32-after-bs64.yaml").read_text())
SCALARS = st.one_of(ODD, st.integers(-10**12, 10**12), st.floats(allow_nan=True), st.booleans(), st.none(),
                    st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))


def _bend(value, data, depth=0):
    """The scenario with some values replaced, keys dropped or added, lists emptied."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            roll = data.draw(st.integers(0, 19))
            if roll == 0:
                continue
            out[k] = data.draw(SCALARS) if roll == 1 else _bend(v, data, depth + 1)
        if data.draw(st.integers(0, 19)) == 0:
            out[data.draw(st.text(max_size=8))] = data.draw(SCALARS)
        return out
    if isinstance(value, list):
        return [_bend(v, data, depth + 1) for v in value if data.draw(st.integers(0, 9))]
    return data.draw(SCALARS) if data.draw(st.integers(0, 9)) == 0 else value


@FUZZ
@given(data=st.data())
def test_scenario_files(data, tmp_path_factory):
    CASES["scenario files"] += 1
    path = tmp_path_factory.mktemp("fuzz") / "scenario.yaml"
    text = yaml.safe_dump(_bend(SCENARIO_DATA, data), allow_unicode=True)
    if data.draw(st.integers(0, 9)) == 0:
        text = text[: data.draw(st.integers(0, len(text)))]
    path.write_text(text, encoding="utf-8")
    try:
        sc = load_scenario(path)
    except ScenarioError as e:
        assert str(path) in str(e) or "scenario" in str(e).lower(), str(e)
        return
    # A scenario that loads is served: every read tool renders what it holds.
    backend = FixtureBackend(sc.cluster, sc.backend)
    for spec in backend.tools():
        if spec.effect != "read":
            continue
        args = {k: v for k, v in {"job": sc.trigger.job, "node": sc.trigger.node}.items() if v}
        try:
            backend.run(spec, spec.parse_args({k: v for k, v in args.items() if k in spec.input.model_fields}))
        except ToolError:
            pass


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    failed_before = request.session.testsfailed
    yield
    total = sum(CASES.values())
    procs.REPORT.append(f"fuzz: {total} cases, {request.session.testsfailed - failed_before} failing tests ("
          + ", ".join(f"{k} {v}" for k, v in sorted(CASES.items())) + ")")
