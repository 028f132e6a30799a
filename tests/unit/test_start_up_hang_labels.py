"""Start-up hangs told by where a job's log stops: only a log that has gone quiet is a hang.

The log-only verdict has no clock beyond the text; the agent has one, and a job that printed its
last start-up line minutes ago is still starting (a slow rendezvous, a first build).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from crashcart.agent.policies.evidence import Evidence, TextDoc
from crashcart.agent.policies.matching import match_label
from crashcart.playbooks import load_playbooks

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)

ENDS_IN_INIT = [
    "[2026-03-01 11:00:02,118] [INFO] [comm.py:652:init_distributed] cdb=None",
    "[2026-03-01 11:00:02,118] [INFO] [comm.py:683:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl",
]
ENDS_AT_EXTENSIONS_ROOT = [
    "[2026-03-01 11:00:02,118] [INFO] [real_accelerator.py:219:get_accelerator] Setting ds_accelerator to cuda",
    "Using /home/ana/.cache/torch_extensions/py311_cu124 as PyTorch extensions root...",
]


def _evidence(lines: list[str], quiet_minutes: float) -> Evidence:
    ev = Evidence(now=NOW, trigger={"kind": "job_stalled", "job": "j7"})
    ev.docs = [TextDoc("log", "job:j7", lines, "get_logs:j7", last_time=NOW - timedelta(minutes=quiet_minutes))]
    return ev


@pytest.mark.parametrize("label, lines", [
    ("hang_in_distributed_init", ENDS_IN_INIT),
    ("jit_build_lock_wait", ENDS_AT_EXTENSIONS_ROOT),
])
def test_a_log_quiet_for_an_hour_at_start_up_is_a_hang(label, lines):
    assert match_label(load_playbooks()[label], _evidence(lines, 60)) is not None


@pytest.mark.parametrize("label, lines", [
    ("hang_in_distributed_init", ENDS_IN_INIT),
    ("jit_build_lock_wait", ENDS_AT_EXTENSIONS_ROOT),
])
def test_a_log_that_printed_its_start_up_line_minutes_ago_is_still_starting(label, lines):
    assert match_label(load_playbooks()[label], _evidence(lines, 3)) is None
