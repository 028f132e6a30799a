"""A verdict from a log alone (Contract 3)."""

from __future__ import annotations

import pytest

from crashcart.agent.verdict import LogError, Verdict, diagnose_text, read_log_bytes

CUDA_OOM = """\
[2026-03-02 09:02:11] [INFO] world_size=8 micro_batch=8 seq_len=4096
[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/dana/sft/train.py", line 204, in main
[rank0]:     loss.backward()
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use.
srun: error: gpu-a01: task 0: Exited with exit code 1
"""

# The pre-2.4 wording, as torch.cuda.OutOfMemoryError.
CUDA_OOM_OLD = """\
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    outputs = model(**batch)
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB (GPU 3; 39.39 GiB total capacity; 36.10 GiB already allocated; 1.12 GiB free; 37.02 GiB reserved in total by PyTorch)
"""

XID79 = """\
[1843.101] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 00000, NVSwitch fabric manager link training complete
[1843.113] NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus.
[1843.114] NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus.
"""

NCCL_LOOPBACK = """\
node-1:1234:1234 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>
node-1:1234:1234 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so), using internal implementation
node-1:1234:1234 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
node-1:1234:1250 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 127.0.0.1<46321> failed : Software caused connection abort
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
"""

DEVICE_ASSERT = """\
../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [32,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.
Traceback (most recent call last):
  File "train.py", line 88, in <module>
    logits = model(input_ids)
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
"""

UNRECOGNISED = """\
step 100 loss 2.31
step 200 loss 2.29
Traceback (most recent call last):
  File "train.py", line 42, in <module>
    frobnicate(widget)
WidgetError: the widget could not be frobnicated
"""

CLEAN = """\
step 100 loss 2.31 lr 3.0e-4
step 200 loss 2.29 lr 3.0e-4
step 300 loss 2.25 lr 3.0e-4
saved checkpoint to /ckpt/step_300
training finished in 00:41:12
"""


@pytest.mark.parametrize("log", [CUDA_OOM, CUDA_OOM_OLD], ids=["torch2.4", "torch.cuda"])
def test_cuda_oom(log):
    v = diagnose_text(log, source="job.out")
    assert (v.family, v.diagnosis, v.remedy) == ("memory", "cuda_oom", "resubmit_with_changes")
    assert v.retriable is True
    assert "batch_size" in v.changes
    assert v.changes.get("gradient_checkpointing") is True
    assert v.confidence >= 0.6
    assert any("out of memory" in e for e in v.evidence)
    assert v.source == "job.out"
    assert v.summary


def test_xid79_fell_off_the_bus():
    v = diagnose_text(XID79, source="dmesg")
    assert (v.family, v.diagnosis, v.remedy) == ("hardware", "gpu_fallen_off_bus", "exclude_node")
    assert v.retriable is False
    assert v.changes == {}
    assert any("Xid" in e and "79" in e for e in v.evidence)
    assert not any("SXid" in e for e in v.evidence)  # the benign NVSwitch line is not evidence
    assert v.confidence >= 0.6


def test_nccl_bound_to_loopback():
    v = diagnose_text(NCCL_LOOPBACK)
    assert (v.family, v.diagnosis, v.remedy) == ("distributed", "nccl_socket_interface", "resubmit_with_changes")
    assert "env.NCCL_SOCKET_IFNAME" in v.changes
    assert "lo" in str(v.changes["env.NCCL_SOCKET_IFNAME"])  # loopback is what gets excluded
    assert any("lo:127.0.0.1" in e for e in v.evidence)


def test_device_side_assert_is_user_code_and_not_retriable():
    v = diagnose_text(DEVICE_ASSERT)
    assert v.family == "user_code"
    assert v.diagnosis == "device_side_assert"
    assert v.retriable is False
    assert v.remedy == "escalate_user"
    assert any("device-side assert" in e for e in v.evidence)


def test_unrecognised_failure_is_low_confidence_with_suspicious_lines():
    v = diagnose_text(UNRECOGNISED)
    assert v.diagnosis == "unrecognized"
    assert v.confidence < 0.5
    assert "Traceback (most recent call last):" in v.evidence
    assert "WidgetError: the widget could not be frobnicated" in v.evidence  # the line that says what broke
    assert not any(e.startswith("step ") for e in v.evidence)  # healthy lines are not evidence
    assert v.retriable is False


def test_clean_log_is_healthy():
    v = diagnose_text(CLEAN)
    assert (v.family, v.diagnosis, v.remedy) == ("none", "healthy", "none")
    assert v.evidence == []
    assert v.changes == {}


@pytest.mark.parametrize("warning", [
    "[W pipeline.py:212] stage 3 stalled: no activations from stage 2 for 600 s",
    "WARNING deadlock detector: worker 5 is hung in recv()",
])
def test_a_log_that_says_it_stalled_is_never_healthy(warning):
    # Steps before it, no rule for the component: the component's own word still rules out health.
    v = diagnose_text(CLEAN + "\n" + warning + "\n")
    assert v.diagnosis == "unrecognized"
    assert warning in v.evidence


def test_verdict_has_the_contract_3_keys():
    data = diagnose_text(NCCL_LOOPBACK).model_dump()
    assert {"family", "diagnosis", "remedy", "retriable", "changes", "confidence", "evidence", "summary"} <= set(data)
    assert 0.0 <= data["confidence"] <= 1.0
    assert isinstance(Verdict.model_validate(data), Verdict)


def test_evidence_is_bounded_and_deduplicated():
    noisy = "\n".join(["RuntimeError: widget exploded"] * 50 + [f"fatal: thing {i}" for i in range(40)])
    v = diagnose_text(noisy)
    assert len(v.evidence) <= 10
    assert len(v.evidence) == len(set(v.evidence))


# --- read_log_bytes ---

@pytest.mark.parametrize("data", [b"", b"   \n\n\t  \n"])
def test_empty_log_names_the_source(data):
    with pytest.raises(LogError) as info:
        read_log_bytes(data, "/var/log/job-48213.out")
    assert "/var/log/job-48213.out" in str(info.value)
    assert "empty" in str(info.value)


def test_binary_log_is_refused():
    with pytest.raises(LogError) as info:
        read_log_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)), "a.out")
    assert "a.out" in str(info.value)
    assert "binary" in str(info.value)


def test_text_log_is_decoded_and_bad_bytes_replaced():
    assert read_log_bytes(b"step 1 loss 2.0\n", "x") == "step 1 loss 2.0\n"
    text = read_log_bytes("loss \u2192 nan\n".encode() + b"\xff\n", "x")
    assert text.startswith("loss \u2192 nan")
    assert "\ufffd" in text


STALLED = """\
2025-03-02 06:41:12 | INFO | train | step 41180 | loss 2.3127
2025-03-02 06:41:51 | INFO | train | step 41200 | loss 2.3119
2025-03-02 06:42:09 | INFO | train | step 41210 | loss 2.3104
2025-03-02 07:12:09 | INFO | heartbeat | rank 0 alive | last_step 41210
2025-03-02 07:42:09 | INFO | heartbeat | rank 0 alive | last_step 41210
"""

STILL_STEPPING = "\n".join(STALLED.splitlines()[:3]) + "\n2025-03-02 07:42:09 | INFO | train | step 41220 | loss 2.3101\n"


def test_a_step_counter_that_stopped_while_the_log_went_on_is_a_stall():
    v = diagnose_text(STALLED)
    assert (v.family, v.remedy) == ("stuck", "resubmit")
    assert v.confidence <= 0.5
    assert any("step 41210" in e for e in v.evidence)


def test_a_log_whose_steps_keep_advancing_is_not_a_stall():
    assert diagnose_text(STILL_STEPPING).family == "none"


def test_a_plain_scancel_with_no_failure_is_not_a_fault():
    v = diagnose_text("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
                      "slurmstepd: error: *** JOB 77 ON n1 CANCELLED AT 2025-02-13T15:47:35 ***\n")
    assert (v.family, v.remedy) == ("none", "none")
    assert v.confidence < 0.6


def test_a_cancel_after_a_task_failed_is_not_called_deliberate():
    v = diagnose_text("srun: error: n1: task 0: Exited with exit code 1\n"
                      "slurmstepd: error: *** STEP 77.0 ON n1 CANCELLED AT 2025-02-13T15:47:35 ***\n")
    assert v.remedy != "none"


def test_an_impossible_allocation_size_is_not_a_memory_verdict():
    v = diagnose_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n")
    assert v.family != "memory"
