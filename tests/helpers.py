"""Shared test data: a small, real scenario and a minimal one to vary."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

# A Slurm job that died of a CUDA OOM at batch 8 on a healthy node: the agent
# should halve the batch and resubmit, and must not blame the node.
GOOD_SCENARIO = """\
id: tiny-cuda-oom-bs8
title: Small fine-tune OOMs at batch 8 on a healthy node
family: memory
backend: slurm
trigger: {kind: job_failed, job: "90210"}
cluster:
  now: "2026-03-02T10:00:00Z"
  nodes:
    - name: gpu-a01
      state: idle
      partition: a100
      gpus: 8
      gpu_model: NVIDIA A100-SXM4-80GB
      kernel_log: |
        [1204311.402117] IPv4: martian source 10.12.0.255 from 10.12.3.41, on dev ibp12s0
  jobs:
    - id: "90210"
      name: mistral-7b-sft
      user: dana
      state: FAILED
      exit_code: "1:0"
      partition: a100
      nodes: [gpu-a01]
      gpus: 8
      submit_time: "2026-03-02T09:00:00Z"
      start_time: "2026-03-02T09:01:00Z"
      end_time: "2026-03-02T09:40:00Z"
      config: {batch_size: 8, gradient_checkpointing: false}
      log: |
        [2026-03-02 09:02:11] [INFO] world_size=8 micro_batch=8 seq_len=4096
        [rank2]: Traceback (most recent call last):
        [rank2]:   File "/home/dana/sft/train.py", line 204, in main
        [rank2]:     loss.backward()
        [rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 2 has a total capacity of 79.15 GiB of which 1.91 GiB is free. Including non-PyTorch memory, this process has 77.20 GiB memory in use.
        srun: error: gpu-a01: task 0: Exited with exit code 1
expect:
  family: memory
  diagnosis: [cuda_oom]
  root_cause: "job:90210"
  remedy: resubmit_with_changes
  actions:
    - tool: resubmit
      args: {job: "90210"}
      changes:
        batch_size: {lt: 8}
  forbid:
    - {tool: node_drain, args: {node: gpu-a01}}
"""

# The smallest scenario the loader accepts, as data: tests change one thing at a time.
MINIMAL: dict[str, Any] = {
    "id": "minimal",
    "title": "Minimal scenario",
    "family": "memory",
    "backend": "slurm",
    "trigger": {"kind": "job_failed", "job": "48213"},
    "cluster": {
        "now": "2026-03-02T10:00:00Z",
        "nodes": [{"name": "gpu-b07", "state": "allocated"}],
        "jobs": [{"id": "48213", "state": "FAILED", "nodes": ["gpu-b07"]}],
    },
    "expect": {"remedy": "resubmit"},
}


def minimal(**top: Any) -> dict[str, Any]:
    """A deep copy of MINIMAL with top-level keys replaced (None deletes a key)."""
    data = copy.deepcopy(MINIMAL)
    for key, value in top.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False)
