"""Text renderers and the bounding helper: formats as the real commands print them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from crashcart.tools import ToolError
from crashcart.tools import render as r
from crashcart.tools.catalog import MAX_TEXT_CHARS
from crashcart.tools.cluster import Checkpoint, Event, GpuSample, Job, Node, ProgressPoint

NOW = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def job(**kw) -> Job:
    return Job.model_validate({"id": "48213", "state": "RUNNING", **kw})


# --- bound_lines ----------------------------------------------------------------------


def test_bound_nothing_cut_has_no_note():
    text, truncated, total = r.bound_lines(["a", "b"], tail=10)
    assert (text, truncated, total) == ("a\nb", False, 2)


def test_bound_empty_input():
    assert r.bound_lines([], tail=5, grep="x") == ("", False, 0)


def test_bound_tail_says_how_much():
    lines = [f"line {i}" for i in range(1843)]
    text, truncated, total = r.bound_lines(lines, tail=200)
    out = text.splitlines()
    assert out[0] == "[crashcart: showing last 200 of 1843 lines]"
    assert out[1] == "line 1643" and out[-1] == "line 1842"
    assert truncated and total == 1843


def test_bound_grep_is_case_insensitive_and_counts_matches():
    lines = ["NVRM: Xid 79", "ok", "nvrm: xid 48", "ok"]
    text, truncated, _ = r.bound_lines(lines, tail=200, grep="Xid")
    out = text.splitlines()
    assert out[0] == "[crashcart: 2 of 4 lines match 'Xid']"
    assert out[1:] == ["NVRM: Xid 79", "nvrm: xid 48"]
    assert truncated


def test_bound_grep_then_tail():
    lines = [f"Xid {i}" if i % 2 else "ok" for i in range(100)]
    text, _, _ = r.bound_lines(lines, tail=3, grep="xid")
    out = text.splitlines()
    assert out[0] == "[crashcart: 50 of 100 lines match 'xid'; showing the last 3]"
    assert out[1:] == ["Xid 95", "Xid 97", "Xid 99"]


def test_bound_grep_no_match_still_says_so():
    text, truncated, _ = r.bound_lines(["a", "b"], grep="zzz")
    assert text == "[crashcart: 0 of 2 lines match 'zzz']" and truncated


def test_bound_invalid_regex_names_the_pattern():
    with pytest.raises(ToolError, match=r"invalid grep pattern 'Xid\(79'"):
        r.bound_lines(["x"], grep="Xid(79")


def test_bound_since_keeps_unstamped_continuation_lines():
    lines = [
        "2026-03-02T09:00:00 starting",
        "Traceback (most recent call last):",  # follows a dropped line: dropped
        "2026-03-02T09:41:03 RuntimeError: NCCL error",
        "  File train.py, line 3",  # follows a kept line: kept
        "2026-03-02T09:42:00 exiting",
    ]
    text, truncated, total = r.bound_lines(lines, since=datetime(2026, 3, 2, 9, 41), stamp_of=r.job_log_stamp(NOW))
    out = text.splitlines()
    assert out[0].startswith("[crashcart: 3 of 5 lines are stamped at or after 2026-03-02T09:41:00")
    assert out[1:] == lines[2:]
    assert truncated and total == 5


def test_bound_since_naive_time_is_utc():
    lines = ["2026-03-02T09:00:00Z a", "2026-03-02T10:30:00+01:00 b"]  # b is 09:30 UTC
    text, _, _ = r.bound_lines(lines, since=datetime(2026, 3, 2, 9, 15), stamp_of=r.job_log_stamp(NOW))
    assert text.splitlines()[1:] == ["2026-03-02T10:30:00+01:00 b"]


def test_bound_since_without_any_stamp_is_not_applied():
    lines = ["[1843.113] NVRM: Xid 79", "[1844.000] more"]
    text, truncated, _ = r.bound_lines(lines, since=NOW, stamp_of=r.kernel_log_stamp(NOW))
    out = text.splitlines()
    assert "'since' was not applied" in out[0]
    assert out[1:] == lines and not truncated


def test_bound_since_and_grep_together():
    lines = ["Mar  2 09:00:00 host kernel: Xid 13", "Mar  2 09:45:00 host kernel: Xid 79", "Mar  2 09:46:00 ok"]
    text, _, _ = r.bound_lines(lines, grep="xid", since=datetime(2026, 3, 2, 9, 30, tzinfo=UTC),
                               stamp_of=r.kernel_log_stamp(NOW))
    out = text.splitlines()
    assert out[0] == ("[crashcart: 1 of 3 lines match 'xid' and are stamped at or after "
                      "2026-03-02T09:30:00]")
    assert out[1:] == [lines[1]]


def test_bound_cap_keeps_the_end():
    lines = [f"{i:05d} " + "x" * 94 for i in range(500)]  # 100 chars each: 50 KB
    text, truncated, total = r.bound_lines(lines, tail=5000)
    assert len(text) <= MAX_TEXT_CHARS
    out = text.splitlines()
    assert out[0].startswith("[crashcart: showing last ") and "character" in out[0]
    assert out[-1] == lines[-1]
    assert truncated and total == 500


def test_bound_cap_single_huge_line_keeps_its_end():
    text, truncated, _ = r.bound_lines(["a" * 50_000 + "THE END"])
    assert text.endswith("THE END") and len(text) <= MAX_TEXT_CHARS and truncated


def test_bound_pinned_header_survives_the_cap():
    lines = ["HEADER"] + ["y" * 200 for _ in range(200)]
    text, truncated, total = r.bound_lines(lines, pinned=1)
    out = text.splitlines()
    assert out[1] == "HEADER" and out[0].startswith("[crashcart:")
    assert total == 200 and truncated


# --- timestamps --------------------------------------------------------------------------


@pytest.mark.parametrize("line, expected", [
    ("2026-03-02T09:41:03 x", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("2026-03-02T09:41:03.123456789Z x", datetime(2026, 3, 2, 9, 41, 3, 123456, tzinfo=UTC)),
    ("[2026-03-02 09:41:03,123] INFO x", datetime(2026, 3, 2, 9, 41, 3, 123000, tzinfo=UTC)),
    ("2026-03-02 09:41:03 x", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("0: 2026-03-02 09:41:03 rank-prefixed", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("I0302 09:41:03.123456 1 main.go:1] x", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("E0302 09:41:03.5 x", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("step 41000 loss 2.3", None),
])
def test_job_log_stamps(line, expected):
    assert r.job_log_stamp(NOW)(line) == expected


def test_glog_stamp_from_last_year_in_january():
    stamp = r.job_log_stamp(datetime(2026, 1, 2, tzinfo=UTC))("I1231 23:59:00.0 x")
    assert stamp == datetime(2025, 12, 31, 23, 59, tzinfo=UTC)


@pytest.mark.parametrize("line, expected", [
    ("2026-03-02T09:41:03,123456+00:00 host kernel: x", datetime(2026, 3, 2, 9, 41, 3, 123456, tzinfo=UTC)),
    ("Mar  2 09:41:03 gpu-b07 kernel: NVRM: Xid", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("[Mon Mar  2 09:41:03 2026] NVRM: Xid", datetime(2026, 3, 2, 9, 41, 3, tzinfo=UTC)),
    ("[12345.678901] NVRM: Xid", None),
])
def test_kernel_log_stamps(line, expected):
    assert r.kernel_log_stamp(NOW)(line) == expected


# --- small formats ------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds, expected", [
    (5, "5s"), (119, "119s"), (330, "5m30s"), (600, "10m"), (179 * 60, "179m"),
    (3 * 3600 + 15 * 60, "3h15m"), (20 * 3600, "20h"), (76 * 3600, "3d4h"), (30 * 86400, "30d"),
])
def test_k8s_age(seconds, expected):
    assert r.k8s_age(timedelta(seconds=seconds)) == expected


def test_slurm_and_squeue_durations():
    assert r.slurm_elapsed(13 * 3600 + 39 * 60) == "13:39:00"
    assert r.slurm_elapsed(86400 + 61) == "1-00:01:01"
    assert r.squeue_time(65) == "1:05" and r.squeue_time(3661) == "1:01:01"


# --- host lists ---------------------------------------------------------------------------------


def test_compress_hostlist():
    assert r.compress_hostlist(["gpu-b05", "gpu-b06", "gpu-b07", "gpu-b08"]) == "gpu-b[05-08]"
    assert r.compress_hostlist(["gpu-b08", "gpu-b05", "gpu-b10", "gpu-a1"]) == "gpu-a1,gpu-b[05,08,10]"
    assert r.compress_hostlist(["login"]) == "login"
    assert r.compress_hostlist([]) == ""


@pytest.mark.parametrize("names", [
    ["gpu-b05", "gpu-b06", "gpu-b07", "gpu-b08"],
    ["n1", "n2", "n3", "n7", "n9", "n10", "login", "gpu-a001", "gpu-a002"],
    ["node-1-gpu3", "node-1-gpu4", "node-2-gpu1"],
    ["solo"],
])
def test_hostlist_round_trips(names):
    compressed = r.compress_hostlist(names)
    assert sorted(r.expand_hostlist(compressed)) == sorted(names)
    assert r.compress_hostlist(r.expand_hostlist(compressed)) == compressed


def test_expand_hostlist():
    assert r.expand_hostlist("gpu-b[05-06,09],cpu1") == ["gpu-b05", "gpu-b06", "gpu-b09", "cpu1"]


# --- Slurm ----------------------------------------------------------------------------------


def test_sacct_lines_header_row_and_batch_step():
    j = job(name="gpt", user="dana", partition="h100", state="NODE_FAIL", exit_code="0:0",
            nodes=["gpu-b05", "gpu-b06"], start_time="2026-03-01T20:02:00Z", end_time="2026-03-02T09:41:00Z")
    lines = r.sacct_lines([j], NOW)
    assert lines[0] == "JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NodeList|Reason"
    assert lines[1] == ("48213|gpt|h100|dana|NODE_FAIL|0:0|2026-03-01T20:02:00|2026-03-02T09:41:00|"
                        "13:39:00|gpu-b[05-06]|None")
    assert lines[2].startswith("48213.batch|batch|||NODE_FAIL|0:0|")


def test_sacct_pending_and_timeout():
    pending = job(state="PENDING", reason="Resources")
    timeout = job(id="9", state="TIMEOUT", exit_code="0:15", start_time="2026-03-02T08:00:00Z",
                  end_time="2026-03-02T09:00:00Z", nodes=["n1"])
    lines = r.sacct_lines([pending, timeout], NOW)
    assert lines[1].split("|")[4:] == ["PENDING", "0:0", "Unknown", "Unknown", "00:00:00", "None assigned", "Resources"]
    assert lines[3].split("|")[4] == "CANCELLED"  # the batch step of a timed-out job


def test_squeue_lines():
    lines = r.squeue_lines([
        job(id="1", name="llama-70b-sft", user="eve", partition="h100", state="PENDING", reason="Priority"),
        job(id="2", name="bert", user="dana", partition="a100", nodes=["gpu-a01", "gpu-a02"],
            start_time="2026-03-02T08:59:00Z"),
    ], NOW)
    assert lines[0] == "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    assert lines[1] == "                 1      h100 llama-70      eve PD       0:00      1 (Priority)"
    assert lines[2].endswith(" R    1:01:00      2 gpu-a[01-02]")


def test_sinfo_states_abbreviate():
    def n(state, reason=None):
        return Node(name="x", state=state, reason=reason)
    assert [r.sinfo_state(n(s)) for s in ("idle", "allocated", "mixed", "drained", "draining", "not_ready")] == [
        "idle", "alloc", "mix", "drain", "drng", "down*"]
    assert r.sinfo_state(n("down")) == "down*"
    assert r.sinfo_state(n("down", "admin maintenance")) == "down"
    lines = r.sinfo_lines([Node(name="gpu-b07", state="drained", partition="h100", gpus=8, reason="Xid 79")])
    assert lines[0].split() == ["NODELIST", "NODES", "PARTITION", "STATE", "GRES", "REASON"]
    assert lines[1].split(None, 5) == ["gpu-b07", "1", "h100", "drain", "gpu:8", "Xid 79"]


# --- nvidia-smi -----------------------------------------------------------------------------


def test_nvidia_smi_csv_header_units_and_values():
    lines = r.nvidia_smi_csv([
        GpuSample(index=0, temperature_c=34, power_w=70.123, sm_clock_mhz=1980, util_pct=0,
                  memory_used_mib=0, memory_total_mib=81559, ecc_uncorrected=0, remapped_rows_pending=0),
        GpuSample(index=3, temperature_c=91, throttle_reasons=["HW Slowdown", "sw_thermal"]),
    ], "NVIDIA H100 80GB HBM3")
    header = lines[0].split(", ")
    assert header[:8] == ["index", "name", "temperature.gpu", "power.draw [W]", "clocks.sm [MHz]",
                          "utilization.gpu [%]", "memory.used [MiB]", "memory.total [MiB]"]
    assert lines[1].startswith("0, NVIDIA H100 80GB HBM3, 34, 70.12 W, 1980 MHz, 0 %, 0 MiB, 81559 MiB, 0, 0, 0x0000000000000000")
    row = dict(zip(header, lines[2].split(", ")))
    assert row["power.draw [W]"] == "[N/A]"
    assert row["clocks_throttle_reasons.active"] == "0x0000000000000028"  # hw_slowdown | sw_thermal
    assert row["clocks_throttle_reasons.hw_slowdown"] == "Active"
    assert row["clocks_throttle_reasons.sw_thermal_slowdown"] == "Active"
    assert row["clocks_throttle_reasons.sw_power_cap"] == "Not Active"


# --- Kubernetes ----------------------------------------------------------------------------


def test_kubectl_nodes_status_roles_and_taints():
    nodes = [
        Node.model_validate({"name": "a", "state": "allocated", "gpus": 8, "partition": "pool-h100",
                             "labels": {"node-role.kubernetes.io/gpu": ""}}),
        Node.model_validate({"name": "b", "state": "cordoned", "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "maint", "effect": "NoExecute"}]}),
        Node.model_validate({"name": "c", "state": "not_ready"}),
    ]
    lines = r.kubectl_nodes_lines(nodes)
    assert lines[0].split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert lines[1].split()[:3] == ["a", "Ready", "gpu"]
    assert lines[2].split()[1] == "Ready,SchedulingDisabled"
    assert lines[2].split()[-1] == "nvidia.com/gpu=present:NoSchedule,maint:NoExecute"
    assert lines[3].split()[1] == "NotReady"


def _oom_pod() -> Job:
    return job(id="llama-0", name="trainer", partition="train", state="Failed", reason="OOMKilled",
               nodes=["gpu-a01"], gpus=8, start_time="2026-03-02T09:00:00Z", end_time="2026-03-02T09:41:00Z",
               config={"image": "nvcr.io/nvidia/pytorch:24.05-py3", "batch_size": 64,
                       "env": {"NCCL_SOCKET_IFNAME": "eth0"}},
               attempts=[{"id": "llama-0", "state": "Failed", "reason": "OOMKilled", "exit_code": "137"}])


def test_describe_pod_oomkilled():
    events = [Event(time="2026-03-02T09:41:00Z", type="Warning", reason="BackOff", object="pod/train/llama-0",
                    message="Back-off restarting failed container", count=5)]
    text = "\n".join(r.describe_pod_lines(_oom_pod(), events, NOW))
    assert "Name:             llama-0\nNamespace:        train\n" in text
    assert "Status:           Failed" in text
    assert "    Image:          nvcr.io/nvidia/pytorch:24.05-py3" in text
    assert "    State:          Terminated\n      Reason:       OOMKilled\n      Exit Code:    137" in text
    assert "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137" in text
    assert "    Restart Count:  1" in text
    assert "      --batch_size=64" in text and "      NCCL_SOCKET_IFNAME:  eth0" in text
    assert "nvidia.com/gpu:  8" in text
    lines = text.splitlines()
    cond = lines.index("Conditions:")
    assert lines[cond + 1].split() == ["Type", "Status"]
    events_at = lines.index("Events:")
    assert lines[events_at + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert lines[events_at + 3].split()[:4] == ["Warning", "BackOff", "19m", "(x5)"]
    assert "kubelet" in lines[events_at + 3]


def test_describe_unscheduled_pod_has_no_container_state():
    pending = job(id="p", partition="train", state="Pending", reason="Unschedulable")
    text = "\n".join(r.describe_pod_lines(pending, [], NOW))
    assert "State:" not in text and "PodScheduled   False" in text
    assert text.endswith("Events:  <none>")


def test_describe_node_conditions_from_state():
    down = Node(name="gpu-b07", state="down", gpus=8, taints=[{"key": "k", "effect": "NoSchedule"}])
    text = "\n".join(r.describe_node_lines(down, [], [], NOW))
    assert "Taints:             k:NoSchedule" in text
    ready_row = next(line for line in text.splitlines() if line.strip().startswith("Ready "))
    assert ready_row.split()[:3] == ["Ready", "Unknown", "NodeStatusUnknown"]
    assert "Allocatable:\n  nvidia.com/gpu:  8" in text
    notready = Node(name="n", state="not_ready", reason="PLEG is not healthy")
    row = next(x for x in r.describe_node_lines(notready, [], [], NOW) if x.strip().startswith("Ready "))
    assert row.split()[:3] == ["Ready", "False", "KubeletNotReady"] and "PLEG is not healthy" in row


def test_events_lines_columns_and_empty():
    ev = Event(time="2026-03-02T09:55:00Z", type="Warning", reason="FailedScheduling",
               object="pod/train/llama-0", message="0/4 nodes are available")
    lines = r.events_lines([ev], NOW, lambda e: "train", all_namespaces=False)
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split()[:4] == ["5m", "Warning", "FailedScheduling", "pod/llama-0"]
    assert r.events_lines([ev], NOW, lambda e: "train", all_namespaces=True)[1].startswith("train ")
    assert r.events_lines([], NOW, lambda e: None, False, "train") == ["No resources found in train namespace."]


# --- Ray -----------------------------------------------------------------------------------


def test_ray_job_status_lines():
    failed = job(id="raysubmit_abc", state="FAILED", reason="Job entrypoint command failed with exit code 1")
    assert r.ray_job_status_lines(failed) == [
        "Status for job 'raysubmit_abc': FAILED",
        "Status message: Job entrypoint command failed with exit code 1",
    ]
    assert r.ray_job_status_lines(job(id="x", state="SUCCEEDED")) == ["Status for job 'x': SUCCEEDED"]
    assert r.ray_status(job(state="CANCELLED")) == "STOPPED"


def test_ray_nodes_lines():
    lines = r.ray_nodes_lines([Node(name="head-0", gpus=0), Node(name="w1", state="down", gpus=8,
                                                                reason="health check failed")], NOW)
    assert lines[0] == "======== List: 2026-03-02 10:00:00.000000 ========"
    assert "Total: 2" in lines
    header = lines[7].split()
    assert header[:4] == ["NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE"]
    assert lines[8].split()[3:5] == ["True", "ALIVE"]
    assert "DEAD" in lines[9] and "health check failed" in lines[9] and "GPU: 8.0" in lines[9]
    assert len(r.ray_node_id("w1")) == 56


# --- crashcart views --------------------------------------------------------------------------


def test_progress_lines_report_the_stall():
    points = [ProgressPoint(time=f"2026-03-02T09:{m:02d}:00Z", step=s) for m, s in
              [(0, 100), (10, 200), (20, 300), (30, 300), (50, 300)]]
    cps = [Checkpoint(step=200, time="2026-03-02T09:12:00Z", path="s3://ckpt/200")]
    text = "\n".join(r.progress_lines(job(), points, cps, NOW))
    assert "Last step change: step 300 at 2026-03-02T09:20:00, 40 min ago" in text
    assert "Last checkpoint: step 200 at 2026-03-02T09:12:00, 48 min ago" in text
    assert "s3://ckpt/200" in text


def test_history_lines_gpu_hours():
    j = job(gpus=16, start_time="2026-03-02T08:00:00Z", end_time="2026-03-02T09:30:00Z", state="COMPLETED")
    lines = r.history_lines([(j, None)], NOW)
    assert "GPU_HOURS" in lines[0].split()
    assert "24.0" in lines[1].split()
    assert lines[-1] == "Total: 1 rows, 24.0 GPU-hours"
