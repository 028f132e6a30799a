"""The fixture backend: every tool on every backend kind it belongs to, and write effects."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from crashcart.tools import REGISTRY, ActionTarget, ToolCall, ToolError
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.catalog import MAX_TEXT_CHARS
from crashcart.tools.cluster import Cluster

NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)

XID_LOG = """\
Mar  2 09:00:01 gpu-b07 kernel: nvidia-peermem loaded
Mar  2 09:41:00 gpu-b07 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus.
Mar  2 09:41:00 gpu-b07 kernel: NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus.
"""

TRAIN_LOG = """\
2026-03-02T09:00:00 step 41000 loss 2.40
2026-03-02T09:30:00 saved checkpoint step 41000
2026-03-02T09:40:00 step 41210 loss 2.31
2026-03-02T09:41:00 RuntimeError: CUDA error: unspecified launch failure
Traceback (most recent call last):
  File "train.py", line 12, in <module>
"""


def gpus(n: int, **extra) -> list[dict]:
    return [{"index": i, "temperature_c": 40, "power_w": 300.0, "sm_clock_mhz": 1980, "util_pct": 99,
             "memory_used_mib": 70000, "memory_total_mib": 81559, "ecc_uncorrected": 0,
             "remapped_rows_pending": 0, **extra} for i in range(n)]


def slurm_cluster() -> Cluster:
    node = {"state": "allocated", "partition": "h100", "gpus": 8, "gpu_model": "NVIDIA H100 80GB HBM3"}
    return Cluster.model_validate({
        "now": "2026-03-02T10:00:00Z",
        "nodes": [
            {"name": "gpu-b05", **node, "gpu_telemetry": gpus(8)},
            {"name": "gpu-b06", **node, "kernel_log": ""},
            {"name": "gpu-b07", **node, "kernel_log": XID_LOG, "gpu_telemetry": [
                # GPU 0 fell off the bus: present at 09:00, absent since
                *gpus(8, time="2026-03-02T09:00:00Z"),
                *[g for g in gpus(8, time="2026-03-02T09:50:00Z", temperature_c=45) if g["index"] != 0],
                {"index": 1, "time": "2026-03-02T11:00:00Z", "temperature_c": 99},  # after now: unseen
            ]},
            {"name": "gpu-b08", **node, "nvidia_smi": "index, name\n0, NVIDIA H100 80GB HBM3\n"},
            {"name": "gpu-b09", **node, "state": "drained", "reason": "IB link flaps"},
            {"name": "gpu-a01", "state": "idle", "partition": "a100", "gpus": 8},
        ],
        "jobs": [
            {"id": 48213, "name": "gpt-13b-pretrain", "user": "dana", "state": "NODE_FAIL", "exit_code": "0:0",
             "partition": "h100", "nodes": ["gpu-b05", "gpu-b06", "gpu-b07", "gpu-b08"], "gpus": 32,
             "submit_time": "2026-03-01T20:00:00Z", "start_time": "2026-03-01T20:02:00Z",
             "end_time": "2026-03-02T09:41:00Z", "config": {"batch_size": 16, "env": {"NCCL_DEBUG": "INFO"}},
             "log": TRAIN_LOG,
             "checkpoints": [{"step": 41000, "time": "2026-03-02T09:30:00Z", "path": "/ckpt/41000"}],
             "progress": [{"time": "2026-03-02T09:00:00Z", "step": 41000, "loss": 2.4},
                          {"time": "2026-03-02T09:40:00Z", "step": 41210, "loss": 2.31}],
             "attempts": [
                 {"id": "48213", "state": "NODE_FAIL", "exit_code": "0:0", "nodes": ["gpu-b07"],
                  "start_time": "2026-03-01T08:00:00Z", "end_time": "2026-03-01T12:00:00Z",
                  "log": "2026-03-01T12:00:00 attempt one died\n"},
                 {"id": "48100", "state": "FAILED", "exit_code": "1:0",
                  "start_time": "2026-03-01T13:00:00Z", "end_time": "2026-03-01T19:00:00Z"},
             ]},
            {"id": "48300", "name": "llama-sft", "user": "eve", "state": "PENDING", "reason": "Resources",
             "partition": "h100", "gpus": 8, "submit_time": "2026-03-02T09:50:00Z"},
            {"id": "48301", "name": "bert", "user": "eve", "state": "RUNNING", "partition": "h100",
             "nodes": ["gpu-b05"], "gpus": 8, "submit_time": "2026-02-01T09:00:00Z",
             "start_time": "2026-03-02T09:00:00Z"},
            {"id": "40000", "name": "old", "user": "dana", "state": "COMPLETED", "exit_code": "0:0",
             "partition": "a100", "nodes": ["gpu-a01"], "gpus": 8, "submit_time": "2026-01-01T00:00:00Z",
             "start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T10:00:00Z"},
        ],
    })


def k8s_cluster() -> Cluster:
    return Cluster.model_validate({
        "now": "2026-03-02T10:00:00Z",
        "nodes": [
            {"name": "gpu-a01", "state": "allocated", "partition": "h100-pool", "gpus": 8,
             "labels": {"nvidia.com/gpu.product": "H100"},
             "kernel_log": "[Mon Mar  2 09:41:00 2026] Memory cgroup out of memory: Killed process 4242 (python)\n",
             "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            {"name": "gpu-a02", "state": "not_ready", "partition": "h100-pool", "gpus": 8,
             "reason": "PLEG is not healthy"},
            {"name": "gpu-a03", "state": "cordoned", "partition": "h100-pool", "gpus": 8},
            {"name": "cpu-01", "state": "idle", "partition": "system"},
        ],
        "jobs": [
            {"id": "llama-0", "name": "trainer", "user": "dana", "state": "Failed", "reason": "OOMKilled",
             "exit_code": "137", "partition": "train", "nodes": ["gpu-a01"], "gpus": 8,
             "submit_time": "2026-03-02T08:00:00Z", "start_time": "2026-03-02T08:01:00Z",
             "end_time": "2026-03-02T09:41:00Z", "log": "I0302 09:40:59.000000 1 train.py] step 900\n",
             "config": {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "batch_size": 64}},
            {"id": "rm-7", "name": "reward", "state": "Pending", "reason": "Unschedulable",
             "partition": "rlhf", "gpus": 8, "submit_time": "2026-03-02T09:30:00Z"},
            {"id": "ft-1", "name": "finetune", "state": "Running", "partition": "train", "gpus": 16,
             "nodes": ["gpu-a01", "gpu-a03"]},
        ],
        "events": [
            {"time": "2026-03-02T09:41:00Z", "type": "Warning", "reason": "OOMKilling",
             "object": "pod/train/llama-0", "message": "Memory cgroup out of memory"},
            {"time": "2026-03-02T09:30:00Z", "type": "Warning", "reason": "FailedScheduling",
             "object": "pod/rm-7", "message": "0/4 nodes are available: 1 node(s) were unschedulable"},
            {"time": "2026-03-02T09:20:00Z", "type": "Warning", "reason": "NodeNotReady",
             "object": "node/gpu-a02", "message": "Node is not ready"},
            {"time": "2026-03-02T08:01:00Z", "type": "Normal", "reason": "Scheduled",
             "object": "pod/train/llama-0", "message": "Successfully assigned train/llama-0 to gpu-a01"},
        ],
    })


def ray_cluster() -> Cluster:
    return Cluster.model_validate({
        "now": "2026-03-02T10:00:00Z",
        "nodes": [
            {"name": "ray-head", "state": "idle", "partition": "ray", "labels": {"ray.io/node-type": "head"}},
            {"name": "ray-worker-1", "state": "allocated", "partition": "ray", "gpus": 8,
             "kernel_log": "[  812.5] mlx5_core 0000:3b:00.0: Port module event: module 0, Cable unplugged\n"},
            {"name": "ray-worker-2", "state": "down", "partition": "ray", "gpus": 8,
             "reason": "health check failed"},
        ],
        "jobs": [
            {"id": "raysubmit_abc", "name": "ppo", "state": "FAILED", "partition": "default",
             "reason": "Job entrypoint command failed with exit code 1", "nodes": ["ray-worker-2"],
             "gpus": 8, "start_time": "2026-03-02T09:00:00Z", "end_time": "2026-03-02T09:50:00Z",
             "log": "2026-03-02 09:49:59,123\tERROR worker.py:1 -- ActorDiedError\n"},
            {"id": "raysubmit_def", "name": "eval", "state": "RUNNING", "partition": "default",
             "nodes": ["ray-worker-1"], "gpus": 8, "start_time": "2026-03-02T09:10:00Z"},
        ],
    })


CLUSTERS = {"slurm": slurm_cluster, "kubernetes": k8s_cluster, "ray": ray_cluster}
A_JOB = {"slurm": "48213", "kubernetes": "llama-0", "ray": "raysubmit_abc"}
A_NODE = {"slurm": "gpu-b07", "kubernetes": "gpu-a01", "ray": "ray-worker-1"}


def backend(kind: str) -> FixtureBackend:
    return FixtureBackend(CLUSTERS[kind](), kind)


def run(b: FixtureBackend, tool: str, **args) -> BaseModel:
    return b.run(REGISTRY.get(tool), REGISTRY.get(tool).parse_args(args))


# --- every tool, every backend it belongs to ---------------------------------------------

READ_ARGS = {
    "get_logs": lambda k: {"job": A_JOB[k]},
    "kubectl_describe": lambda k: {"kind": "pod", "name": A_JOB[k]},
    "ray_job_status": lambda k: {"job": A_JOB[k]},
    "nvidia_smi_query": lambda k: {"node": A_NODE[k]},
    "gpu_metrics": lambda k: {"node": A_NODE[k]},
    "kernel_log": lambda k: {"node": A_NODE[k]},
    "training_progress": lambda k: {"job": A_JOB[k]},
    "job_config": lambda k: {"job": A_JOB[k]},
    "partition_info": lambda k: {"partition": "h100"},
    "disk_usage": lambda k: {"node": A_NODE[k]},

    "sacctmgr_show": lambda k: {"entity": "qos"},
}
WRITE_ARGS = {
    "node_drain": lambda k: {"node": A_NODE[k], "reason": "test"},
    "node_resume": lambda k: {"node": A_NODE[k], "reason": "test"},
    "resubmit": lambda k: {"job": A_JOB[k], "reason": "test"},
    "cancel_job": lambda k: {"job": {"slurm": "48300", "kubernetes": "rm-7", "ray": "raysubmit_def"}[k],
                             "reason": "test"},
    "escalate": lambda k: {"team": "hardware", "summary": "s", "reason": "test"},
    "notify": lambda k: {"to": "#oncall", "message": "m", "reason": "test"},
}
PAIRS = [(kind, spec.name) for kind in CLUSTERS for spec in REGISTRY.for_backend(kind)]


@pytest.mark.parametrize("kind, tool", PAIRS)
def test_every_tool_runs_on_its_backends(kind, tool):
    b = backend(kind)
    spec = REGISTRY.get(tool)
    args = (READ_ARGS.get(tool) or WRITE_ARGS.get(tool) or (lambda k: {}))(kind)
    out = b.run(spec, args)  # plain dicts are parsed as the spec says
    assert isinstance(out, spec.output)
    if spec.effect == "write":
        assert out.ok and out.message
    else:
        assert out.text.strip(), f"{tool} on {kind} printed nothing"


def test_every_catalog_tool_is_offered_somewhere():
    assert {t for _, t in PAIRS} == set(REGISTRY.specs)


@pytest.mark.parametrize("kind, tool", [("kubernetes", "sacct"), ("ray", "squeue"), ("slurm", "ray_job_status"),
                                        ("slurm", "kubectl_describe"), ("kubernetes", "ray_list_nodes")])
def test_tool_not_offered_on_backend(kind, tool):
    with pytest.raises(ToolError, match=rf"{tool} is not available on a {kind} cluster"):
        backend(kind).run(REGISTRY.get(tool), {})


def test_unknown_backend_kind():
    with pytest.raises(ValueError, match="unknown backend kind"):
        FixtureBackend(slurm_cluster(), "lsf")


def test_bad_arguments_are_a_tool_error():
    with pytest.raises(ToolError, match="unknown argument"):
        backend("slurm").run(REGISTRY.get("sinfo"), {"nodes": "x"})


# --- unknown names --------------------------------------------------------------------------


def test_unknown_node_names_known_ones():
    with pytest.raises(ToolError) as e:
        run(backend("slurm"), "kernel_log", node="gpu-z99")
    assert str(e.value).startswith("node 'gpu-z99' is not in this cluster (known: gpu-b05, gpu-b06")


def test_unknown_job_names_known_ones():
    with pytest.raises(ToolError, match=r"job '999' is not in this cluster \(known: 48213, 48300"):
        run(backend("slurm"), "get_logs", job="999")


@pytest.mark.parametrize("tool, args", [
    ("sacct", {"node": "nope"}), ("sacct", {"job": "nope"}), ("sinfo", {"node": "nope"}),
    ("list_jobs", {"node": "nope"}), ("job_history", {"job": "nope"}), ("nvidia_smi_query", {"node": "nope"}),
    ("training_progress", {"job": "nope"}), ("job_config", {"job": "nope"}),
])
def test_unknown_entities_raise(tool, args):
    with pytest.raises(ToolError, match="'nope' is not in this cluster"):
        run(backend("slurm"), tool, **args)


# --- get_logs and kernel_log --------------------------------------------------------------------


def test_get_logs_tail_grep_since():
    b = backend("slurm")
    out = run(b, "get_logs", job="48213", tail=2)
    assert out.total_lines == 6 and out.truncated
    assert out.text.splitlines() == ["[crashcart: showing last 2 of 6 lines]", "Traceback (most recent call last):",
                                     '  File "train.py", line 12, in <module>']
    out = run(b, "get_logs", job="48213", grep="cuda error")
    assert out.text.splitlines()[1:] == ["2026-03-02T09:41:00 RuntimeError: CUDA error: unspecified launch failure"]
    out = run(b, "get_logs", job="48213", since="2026-03-02T09:40:00Z")
    assert out.text.splitlines()[0] == "[crashcart: 4 of 6 lines are stamped at or after 2026-03-02T09:40:00]"
    assert out.text.splitlines()[-1] == '  File "train.py", line 12, in <module>'


def test_get_logs_invalid_regex():
    with pytest.raises(ToolError, match=r"invalid grep pattern '\[unclosed'"):
        run(backend("slurm"), "get_logs", job="48213", grep="[unclosed")


def test_get_logs_earlier_attempt_and_bad_attempt():
    b = backend("slurm")
    assert run(b, "get_logs", job="48213", attempt=1).text == "2026-03-01T12:00:00 attempt one died"
    assert run(b, "get_logs", job="48213", attempt=2).text == ""  # no log recorded: empty, not an error
    with pytest.raises(ToolError, match="has 2 earlier attempt"):
        run(b, "get_logs", job="48213", attempt=3)


def test_get_logs_glog_since_on_kubernetes():
    b = backend("kubernetes")
    assert run(b, "get_logs", job="llama-0", since="2026-03-02T09:40:00Z").text.endswith("step 900")
    out = run(b, "get_logs", job="llama-0", since="2026-03-02T09:45:00Z")
    assert out.truncated and "0 of 1 lines" in out.text


def test_get_logs_ray_python_logging_stamp():
    out = run(backend("ray"), "get_logs", job="raysubmit_abc", since="2026-03-02T09:50:00Z")
    assert "0 of 1 lines are stamped at or after" in out.text


def test_kernel_log_grep_since_and_empty():
    b = backend("slurm")
    out = run(b, "kernel_log", node="gpu-b07", grep=r"Xid \(", since="2026-03-02T09:30:00Z")
    assert out.node == "gpu-b07" and out.total_lines == 3
    assert out.text.splitlines()[0] == ("[crashcart: 1 of 3 lines match 'Xid \\(' and are stamped at or after "
                                        "2026-03-02T09:30:00]")
    assert "79, pid=41235" in out.text.splitlines()[1]
    empty = run(b, "kernel_log", node="gpu-b06")
    assert (empty.text, empty.truncated, empty.total_lines) == ("", False, 0)
    assert run(b, "kernel_log", node="gpu-a01").text == ""  # never recorded


# --- Slurm accounting and queue ------------------------------------------------------------------


def test_sacct_job_includes_attempts():
    out = run(backend("slurm"), "sacct", job="48213")
    lines = out.text.splitlines()
    assert lines[0] == "JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NodeList|Reason"
    assert [(r.job, r.attempt, r.state) for r in out.rows] == [
        ("48213", 1, "NODE_FAIL"), ("48100", 2, "FAILED"), ("48213", None, "NODE_FAIL")]
    assert out.rows[0].user == "dana" and out.rows[0].partition == "h100"  # inherited from the job
    final = [l for l in lines if l.startswith("48213|")][-1].split("|")
    assert final[4:6] == ["NODE_FAIL", "0:0"] and final[9] == "gpu-b[05-08]"
    assert "48100|gpt-13b-pretrain|h100|dana|FAILED|1:0|" in out.text
    assert "48213.batch|batch|||NODE_FAIL|0:0|" in out.text


def test_sacct_filters():
    b = backend("slurm")
    assert [r.job for r in run(b, "sacct", node="gpu-b05").rows] == ["48213", "48301"]
    assert [r.job for r in run(b, "sacct", user="eve").rows] == ["48300", "48301"]
    assert [r.job for r in run(b, "sacct", state=["NF", "cd"]).rows] == ["48213", "40000"]
    assert [r.job for r in run(b, "sacct", starttime="2026-02-01T00:00:00Z").rows] == ["48213", "48300", "48301"]


def test_squeue_pending_reason_and_running_nodes():
    out = run(backend("slurm"), "squeue")
    assert [r.job for r in out.rows] == ["48300", "48301"]
    lines = out.text.splitlines()
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
    assert lines[1].split()[-3:] == ["0:00", "1", "(Resources)"] and " PD " in lines[1]
    assert lines[2].split()[-4:] == ["R", "1:00:00", "1", "gpu-b05"]
    assert [r.job for r in run(backend("slurm"), "squeue", state=["PD"]).rows] == ["48300"]


def test_sinfo_states_and_filters():
    b = backend("slurm")
    out = run(b, "sinfo", partition="h100")
    assert len(out.rows) == 5 and {r.partition for r in out.rows} == {"h100"}
    row = next(l for l in out.text.splitlines() if l.startswith("gpu-b09"))
    assert row.split(None, 5)[3:] == ["drain", "gpu:8", "IB link flaps"]
    assert out.rows[4].state == "drained"  # typed rows keep the cluster's vocabulary
    assert [r.node for r in run(b, "sinfo", node="gpu-a01").rows] == ["gpu-a01"]
    with pytest.raises(ToolError, match=r"partition 'v100' is not in this cluster \(known: a100, h100\)"):
        run(b, "sinfo", partition="v100")


def test_list_jobs_filters_and_sacct_text():
    b = backend("slurm")
    out = run(b, "list_jobs", node="gpu-b05")
    assert [r.job for r in out.rows] == ["48213", "48301"]
    assert all(r.attempt is None for r in out.rows)
    assert out.text.startswith("JobID|JobName|")
    assert [r.job for r in run(b, "list_jobs", partition="a100").rows] == ["40000"]
    assert [r.job for r in run(b, "list_jobs", user="dana", state=["completed"]).rows] == ["40000"]


def test_job_history_of_one_job():
    out = run(backend("slurm"), "job_history", job="48213")
    assert [(r.job, r.attempt) for r in out.rows] == [("48213", 1), ("48100", 2), ("48213", None)]
    lines = out.text.splitlines()
    assert "GPU_HOURS" in lines[0]
    assert lines[1].split()[:2] == ["48213", "1"] and "128.0" in lines[1].split()  # 32 GPUs x 4 h
    assert lines[-1].startswith("Total: 3 rows")


def test_job_history_window_and_user():
    b = backend("slurm")
    rows = run(b, "job_history", user="dana", days=30).rows
    assert [(r.job, r.attempt) for r in rows] == [("48213", 1), ("48100", 2), ("48213", None)]  # 40000 too old
    rows = run(b, "job_history", user="dana", days=90).rows
    assert "40000" in [r.job for r in rows]
    assert [r.job for r in run(b, "job_history", partition="a100", days=365).rows] == ["40000"]


def test_training_progress():
    out = run(backend("slurm"), "training_progress", job="48213")
    assert [p.step for p in out.points] == [41000, 41210] and out.checkpoints[0].step == 41000
    assert "Last step change: step 41210 at 2026-03-02T09:40:00, 20 min ago" in out.text
    assert "Last checkpoint: step 41000 at 2026-03-02T09:30:00, 30 min ago" in out.text
    empty = run(backend("slurm"), "training_progress", job="48300")
    assert "No progress recorded." in empty.text and "No checkpoints recorded." in empty.text


def test_job_config():
    out = run(backend("slurm"), "job_config", job="48213")
    assert out.config == {"batch_size": 16, "env": {"NCCL_DEBUG": "INFO"}}
    assert "batch_size: 16" in out.text and "  NCCL_DEBUG: INFO" in out.text


# --- nvidia-smi -----------------------------------------------------------------------------


def test_nvidia_smi_renders_latest_samples():
    out = run(backend("slurm"), "nvidia_smi_query", node="gpu-b05")
    lines = out.text.splitlines()
    assert lines[0].startswith("index, name, temperature.gpu, power.draw [W], clocks.sm [MHz], utilization.gpu [%]")
    assert len(lines) == 9 and len(out.gpus) == 8
    assert lines[1].startswith("0, NVIDIA H100 80GB HBM3, 40, 300.00 W, 1980 MHz, 99 %, 70000 MiB, 81559 MiB")


def test_nvidia_smi_missing_gpu_and_future_sample():
    out = run(backend("slurm"), "nvidia_smi_query", node="gpu-b07")
    assert [g.index for g in out.gpus] == [0, 1, 2, 3, 4, 5, 6, 7]  # GPU 0's last sample is 09:00
    assert out.gpus[0].time == datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert out.gpus[1].temperature_c == 45  # the 11:00 sample is after now


def test_nvidia_smi_gpu_absent_from_telemetry():
    cluster = slurm_cluster()
    cluster.node("gpu-b07").gpu_telemetry = [g for g in cluster.node("gpu-b07").gpu_telemetry
                                             if g.index != 0 and g.time and g.time.hour == 9 and g.time.minute == 50]
    out = run(FixtureBackend(cluster, "slurm"), "nvidia_smi_query", node="gpu-b07")
    rows = out.text.splitlines()[1:]
    assert len(rows) == 7 and [r.split(",")[0] for r in rows] == ["1", "2", "3", "4", "5", "6", "7"]


def test_nvidia_smi_untimed_sample_counts_as_latest():
    cluster = Cluster.model_validate({"now": NOW, "nodes": [{"name": "n", "gpus": 1, "gpu_telemetry": [
        {"index": 0, "temperature_c": 50},
        {"index": 0, "time": "2026-03-02T09:59:00Z", "temperature_c": 30},
    ]}]})
    out = run(FixtureBackend(cluster, "slurm"), "nvidia_smi_query", node="n")
    assert out.gpus[0].temperature_c == 50


def test_nvidia_smi_raw_text_and_no_telemetry():
    b = backend("slurm")
    assert run(b, "nvidia_smi_query", node="gpu-b08").text == "index, name\n0, NVIDIA H100 80GB HBM3"
    out = run(b, "nvidia_smi_query", node="gpu-b06")
    assert out.text == "No telemetry recorded for node gpu-b06" and out.gpus == []


# --- Kubernetes -----------------------------------------------------------------------------


def test_kubectl_get_nodes():
    out = run(backend("kubernetes"), "kubectl_get_nodes", partition="h100-pool")
    lines = out.text.splitlines()
    assert lines[0].split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    status = {l.split()[0]: l.split()[1] for l in lines[1:]}
    assert status == {"gpu-a01": "Ready", "gpu-a02": "NotReady", "gpu-a03": "Ready,SchedulingDisabled"}
    assert out.rows[0].taints == ["nvidia.com/gpu=present:NoSchedule"]
    assert "nvidia.com/gpu=present:NoSchedule" in lines[1]
    with pytest.raises(ToolError, match="node pool 'nope'"):
        run(backend("kubernetes"), "kubectl_get_nodes", partition="nope")


def test_describe_pod_oomkilled_with_events():
    out = run(backend("kubernetes"), "kubectl_describe", kind="pod", name="llama-0", namespace="train")
    text = out.text
    assert "Namespace:        train" in text and "Node:             gpu-a01" in text
    assert "    State:          Terminated\n      Reason:       OOMKilled\n      Exit Code:    137" in text
    assert "Image:          nvcr.io/nvidia/pytorch:24.05-py3" in text and "--batch_size=64" in text
    events = text[text.index("Events:"):].splitlines()
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert events[3].split()[:3] == ["Normal", "Scheduled", "119m"]
    assert events[4].split()[:3] == ["Warning", "OOMKilling", "19m"]
    assert out.job.state == "Failed" and out.job.reason == "OOMKilled"


def test_describe_wrong_namespace_and_unknown_pod():
    b = backend("kubernetes")
    with pytest.raises(ToolError, match='pods "llama-0" not found in namespace "prod"'):
        run(b, "kubectl_describe", kind="pod", name="llama-0", namespace="prod")
    with pytest.raises(ToolError, match="pod 'ghost' is not in this cluster"):
        run(b, "kubectl_describe", kind="pod", name="ghost")


def test_describe_pending_pod_shows_scheduling_event():
    out = run(backend("kubernetes"), "kubectl_describe", kind="pod", name="rm-7")
    assert "Status:           Pending" in out.text and "PodScheduled   False" in out.text
    assert "FailedScheduling" in out.text and "default-scheduler" in out.text


def test_describe_node():
    out = run(backend("kubernetes"), "kubectl_describe", kind="node", name="gpu-a02")
    text = out.text
    ready = next(l for l in text.splitlines() if l.strip().startswith("Ready "))
    assert ready.split()[:3] == ["Ready", "False", "KubeletNotReady"] and "PLEG is not healthy" in ready
    assert "Allocatable:\n  nvidia.com/gpu:  8" in text
    assert "NodeNotReady" in text and out.node.state == "not_ready"
    busy = run(backend("kubernetes"), "kubectl_describe", kind="node", name="gpu-a01").text
    assert "Taints:             nvidia.com/gpu=present:NoSchedule" in busy
    assert "Non-terminated Pods:          (1 in total)" in busy and "ft-1" in busy
    assert "nvidia.com/gpu.product=H100" in busy


def test_describe_pytorchjob():
    out = run(backend("kubernetes"), "kubectl_describe", kind="pytorchjob", name="llama-0")
    assert "API Version:  kubeflow.org/v1\nKind:         PyTorchJob" in out.text
    assert "    Type:                   Failed" in out.text and "batch_size:  64" in out.text


def test_kubectl_events_filters():
    b = backend("kubernetes")
    out = run(b, "kubectl_events")
    assert [e.reason for e in out.events] == ["Scheduled", "NodeNotReady", "FailedScheduling", "OOMKilling"]
    assert out.text.splitlines()[0].split()[:3] == ["NAMESPACE", "LAST", "SEEN"]
    train = run(b, "kubectl_events", namespace="train")
    assert [e.reason for e in train.events] == ["Scheduled", "OOMKilling"]
    assert train.text.splitlines()[0].split()[:2] == ["LAST", "SEEN"]
    # a two-part object takes its namespace from the job of that name
    assert [e.reason for e in run(b, "kubectl_events", namespace="rlhf").events] == ["FailedScheduling"]
    assert [e.reason for e in run(b, "kubectl_events", object="pod/llama-0").events] == ["Scheduled", "OOMKilling"]
    assert [e.reason for e in run(b, "kubectl_events", object="gpu-a02").events] == ["NodeNotReady"]
    warnings = run(b, "kubectl_events", warnings_only=True, since="2026-03-02T09:25:00Z")
    assert [e.reason for e in warnings.events] == ["FailedScheduling", "OOMKilling"]
    none = run(b, "kubectl_events", namespace="nowhere")
    assert none.text == "No resources found in nowhere namespace." and none.events == []


def test_list_jobs_kubernetes_pod_status():
    out = run(backend("kubernetes"), "list_jobs", state=["OOMKilled"])
    assert [r.job for r in out.rows] == ["llama-0"]
    assert out.text.splitlines()[1].split()[:4] == ["train", "llama-0", "0/1", "OOMKilled"]


# --- Ray ---------------------------------------------------------------------------------------


def test_ray_job_status():
    out = run(backend("ray"), "ray_job_status", job="raysubmit_abc")
    assert out.status == "FAILED" and out.message == "Job entrypoint command failed with exit code 1"
    assert out.text == ("Status for job 'raysubmit_abc': FAILED\n"
                        "Status message: Job entrypoint command failed with exit code 1")
    assert out.row.nodes == ["ray-worker-2"]


def test_ray_list_nodes():
    out = run(backend("ray"), "ray_list_nodes")
    lines = out.text.splitlines()
    assert lines[0].startswith("======== List: 2026-03-02 10:00:00") and "Total: 3" in lines
    head = next(l for l in lines[8:] if " ray-head " in l).split()
    assert head[3:5] == ["True", "ALIVE"]
    dead = next(l for l in lines[8:] if " ray-worker-2 " in l)
    assert dead.split()[4] == "DEAD" and "health check failed" in dead
    assert [r.state for r in out.rows] == ["idle", "allocated", "down"]


def test_list_jobs_ray():
    out = run(backend("ray"), "list_jobs", node="ray-worker-1")
    assert [r.job for r in out.rows] == ["raysubmit_def"]
    assert "SUBMISSION_ID" in out.text and "RUNNING" in out.text


# --- writes ---------------------------------------------------------------------------------


def test_drain_and_resume_slurm():
    b = backend("slurm")
    out = run(b, "node_drain", node="gpu-b07", reason="Xid 79")
    assert out.ok and "State=DRAIN" in out.message
    node = b.cluster.node("gpu-b07")
    assert (node.state, node.reason) == ("drained", "Xid 79")
    assert "drain" in run(b, "sinfo", node="gpu-b07").text
    run(b, "node_resume", node="gpu-b07", reason="fixed")
    assert (node.state, node.reason) == ("idle", None)


def test_drain_kubernetes_cordons():
    b = backend("kubernetes")
    out = run(b, "node_drain", node="gpu-a01", reason="Xid 79")
    assert "node/gpu-a01 cordoned" in out.message and "evicting pod train/ft-1" in out.message
    node = b.cluster.node("gpu-a01")
    assert node.state == "cordoned" and any(t.key == "node.kubernetes.io/unschedulable" for t in node.taints)
    assert "Ready,SchedulingDisabled" in run(b, "kubectl_get_nodes", node="gpu-a01").text
    run(b, "node_resume", node="gpu-a01", reason="ok")
    assert node.state == "idle" and all(t.key != "node.kubernetes.io/unschedulable" for t in node.taints)


def test_drain_ray():
    b = backend("ray")
    assert "drained" in run(b, "node_drain", node="ray-worker-1", reason="x").message
    assert b.cluster.node("ray-worker-1").state == "drained"


def test_cancel_job():
    b = backend("slurm")
    out = run(b, "cancel_job", job="48301", reason="hung")
    assert out.ok and "48301" in out.message
    job = b.cluster.job("48301")
    assert job.state == "CANCELLED" and job.end_time == NOW
    with pytest.raises(ToolError, match="job '48213' is NODE_FAIL; only pending or running jobs can be cancelled"):
        run(b, "cancel_job", job="48213", reason="x")


def test_resubmit_applies_changes_and_builds_history():
    b = backend("slurm")
    out = run(b, "resubmit", job="48213", reason="bad node",
              changes={"batch_size": 8, "env.NCCL_SOCKET_IFNAME": "ib0", "optim.lr.warmup": 100},
              exclude_nodes=["gpu-b07"])
    assert out.ok and out.new_job == "48213-r1" and out.message.startswith("Submitted batch job 48213-r1")
    new = b.cluster.job("48213-r1")
    assert new.state == "PENDING" and new.submit_time == NOW and new.nodes == []
    assert new.config == {"batch_size": 8, "env": {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ib0"},
                          "optim": {"lr": {"warmup": 100}}, "exclude_nodes": ["gpu-b07"]}
    assert b.cluster.job("48213").config == {"batch_size": 16, "env": {"NCCL_DEBUG": "INFO"}}  # old untouched
    assert [a.id for a in new.attempts] == ["48213", "48100", "48213"]
    assert new.attempts[-1].attempts == [] and new.attempts[-1].log == TRAIN_LOG
    assert new.user == "dana" and new.gpus == 32
    assert [r.job for r in run(b, "squeue").rows][0] == "48300" and "48213-r1" in run(b, "squeue").text
    # a second resubmit (of the resubmit) counts on: -r2, and keeps the exclusion
    again = run(b, "resubmit", job="48213-r1", reason="again", exclude_nodes=["gpu-b06"])
    assert again.new_job == "48213-r2"
    assert b.cluster.job("48213-r2").config["exclude_nodes"] == ["gpu-b07", "gpu-b06"]


def test_resubmit_running_job_is_allowed():
    b = backend("kubernetes")
    out = run(b, "resubmit", job="ft-1", reason="move")
    assert out.new_job == "ft-1-r1" and b.cluster.job("ft-1").state == "Running"


def test_resubmit_errors():
    b = backend("slurm")
    with pytest.raises(ToolError, match="node 'gpu-x' is not in this cluster"):
        run(b, "resubmit", job="48213", reason="x", exclude_nodes=["gpu-x"])
    with pytest.raises(ToolError, match="config key 'batch_size' is 16, not a mapping"):
        run(b, "resubmit", job="48213", reason="x", changes={"batch_size.micro": 2})
    assert len(b.cluster.jobs) == 4  # nothing was submitted


def test_escalate_and_notify_are_recorded():
    b = backend("ray")
    out = run(b, "escalate", team="hardware", summary="GPU fell off the bus", severity="critical",
              evidence=["Xid 79"], reason="hardware fault")
    assert out.ok and out.message == "Escalated to hardware (critical): GPU fell off the bus"
    assert b.escalations == [{"team": "hardware", "summary": "GPU fell off the bus", "severity": "critical",
                              "evidence": ["Xid 79"], "reason": "hardware fault", "time": NOW}]
    run(b, "notify", to="dana", message="resubmitted", reason="fyi")
    assert b.notifications[0]["to"] == "dana" and b.notifications[0]["message"] == "resubmitted"


def test_scenario_cluster_is_not_mutated():
    cluster = slurm_cluster()
    b = FixtureBackend(cluster, "slurm")
    run(b, "node_drain", node="gpu-b05", reason="x")
    run(b, "resubmit", job="48213", reason="x", changes={"env.A": "1"})
    assert cluster.node("gpu-b05").state == "allocated" and len(cluster.jobs) == 4
    assert cluster.job("48213").config["env"] == {"NCCL_DEBUG": "INFO"}
    assert b.now() == NOW


# --- target() --------------------------------------------------------------------------------


def test_target_node_facts():
    b = backend("slurm")
    t = b.target(ToolCall(tool="node_drain", args={"node": "gpu-b07", "reason": "x"}))
    assert t == ActionTarget(tool="node_drain", node="gpu-b07", partition="h100", gpus=8,
                             partition_nodes=5, partition_unavailable=1)
    k = backend("kubernetes").target(ToolCall(tool="node_drain", args={"node": "gpu-a01"}))
    assert (k.partition, k.partition_nodes, k.partition_unavailable) == ("h100-pool", 3, 2)


def test_target_job_restarts_since_checkpoint():
    b = backend("slurm")
    t = b.target(ToolCall(tool="resubmit", args={"job": "48213", "reason": "x"}))
    # both attempts ended (12:00, 19:00 on Mar 1) before the 09:30 Mar 2 checkpoint
    assert (t.job, t.partition, t.user, t.gpus) == ("48213", "h100", "dana", 32)
    assert t.restarts_without_progress == 0
    assert t.last_checkpoint == datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
    run(b, "resubmit", job="48213", reason="x")
    t2 = b.target(ToolCall(tool="resubmit", args={"job": "48213-r1"}))
    # the resubmitted job's history now holds the attempt that outlived the checkpoint
    assert t2.restarts_without_progress == 1 and t2.last_checkpoint == t.last_checkpoint


def test_target_job_without_checkpoint_counts_all_attempts():
    cluster = slurm_cluster()
    cluster.job("48213").checkpoints = []
    t = FixtureBackend(cluster, "slurm").target(ToolCall(tool="cancel_job", args={"job": "48213"}))
    assert t.restarts_without_progress == 2 and t.last_checkpoint is None


def test_target_unknown_and_plain():
    b = backend("slurm")
    with pytest.raises(ToolError, match="node 'zz' is not in this cluster"):
        b.target(ToolCall(tool="node_drain", args={"node": "zz"}))
    with pytest.raises(ToolError, match="job 'zz' is not in this cluster"):
        b.target(ToolCall(tool="resubmit", args={"job": "zz"}))
    assert b.target(ToolCall(tool="escalate", args={"team": "hardware"})) == ActionTarget(tool="escalate")


def test_kernel_log_dmesg_T_since():
    b = backend("kubernetes")
    assert "Killed process 4242" in run(b, "kernel_log", node="gpu-a01", since="2026-03-02T09:40:00Z").text
    later = run(b, "kernel_log", node="gpu-a01", since="2026-03-02T09:45:00Z")
    assert later.truncated and later.text == "[crashcart: 0 of 1 lines are stamped at or after 2026-03-02T09:45:00]"


def test_get_logs_size_cap_keeps_the_end():
    cluster = slurm_cluster()
    cluster.job("48213").log = "\n".join(f"2026-03-02T09:{i % 60:02d}:00 rank {i} " + "x" * 120
                                         for i in range(3000)) + "\nFINAL LINE"
    out = run(FixtureBackend(cluster, "slurm"), "get_logs", job="48213", tail=5000)
    assert out.truncated and out.total_lines == 3001
    assert len(out.text) <= MAX_TEXT_CHARS and out.text.endswith("FINAL LINE")
    assert out.text.startswith("[crashcart: showing last ") and "12000 characters" in out.text.splitlines()[0]


def test_gpu_metrics_serves_the_window_and_hides_the_future():
    b = backend("slurm")
    out = run(b, "gpu_metrics", node="gpu-b07", since="2026-03-02T08:30:00Z", until="2026-03-02T09:30:00Z")
    assert [g.time.hour for g in out.gpus] == [9] * 8  # only the 09:00 samples
    assert out.text.splitlines()[0].split()[:4] == ["TIME", "GPU", "GPU_TEMP", "POWER_USAGE"]
    default = run(b, "gpu_metrics", node="gpu-b07")  # the last hour before now
    assert {g.time.minute for g in default.gpus} == {0, 50} and len(default.gpus) == 15  # 09:00-10:00
    assert all(g.temperature_c != 99 for g in default.gpus)  # 11:00 is after now
    empty = run(b, "gpu_metrics", node="gpu-a01")
    assert empty.gpus == [] and "No GPU samples for node gpu-a01" in empty.text


def test_partition_info_prints_the_recorded_limits_and_invents_none():
    data = CLUSTERS["slurm"]().model_dump()
    data["partitions"] = [{"name": "h100", "max_time": "2-00:00:00", "default_time": "04:00:00"}]
    out = run(FixtureBackend(Cluster.model_validate(data), "slurm"), "partition_info", partition="h100")
    assert out.max_time == "2-00:00:00"
    assert out.text.startswith("PartitionName=h100 ") and "MaxTime=2-00:00:00" in out.text
    assert "TotalNodes=5" in out.text and "Nodes=gpu-b[05-09]" in out.text
    bare = run(backend("slurm"), "partition_info", partition="h100")
    assert bare.max_time is None and "MaxTime" not in bare.text
    with pytest.raises(ToolError, match="not known"):
        run(backend("slurm"), "partition_info", partition="v100")


def test_target_job_does_not_count_an_earlier_run_that_finished_as_a_restart():
    cluster = slurm_cluster()
    job = cluster.job("48213")
    job.checkpoints = []
    before = FixtureBackend(cluster, "slurm").target(ToolCall(tool="resubmit", args={"job": "48213"}))
    done = job.attempts[0].model_copy(update={"id": "47001", "state": "COMPLETED"})
    job.attempts = [done, *job.attempts]
    after = FixtureBackend(cluster, "slurm").target(ToolCall(tool="resubmit", args={"job": "48213"}))
    assert after.restarts_without_progress == before.restarts_without_progress == 2
