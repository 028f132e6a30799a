"""`where: xid` signals: a GPU's last Xid as its telemetry carries it (the DCGM exporter's
DCGM_FI_DEV_XID_ERRORS), matched against the codes the playbook lists."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.matching import signal_hits
from crashcart.playbooks._model import Signal
from crashcart.tools.cluster import GpuSample


def test_an_xid_signal_needs_its_codes_as_digits():
    with pytest.raises(ValidationError, match="an xid signal needs values"):
        Signal(where="xid")
    with pytest.raises(ValidationError, match="an xid signal needs values"):
        Signal(where="xid", values=["Xid 79"])
    assert Signal(where="xid", values=["79"]).values == ["79"]


def test_only_a_listed_code_on_some_gpu_hits_and_zero_is_none():
    sig = Signal(where="xid", values=["79"])
    ev = Evidence(now=None, trigger={"kind": "job_failed", "job": "j"})
    ev.telemetry = {"gpu-a01": [GpuSample(index=0, xid=0), GpuSample(index=3, xid=79)],
                    "gpu-a02": [GpuSample(index=0, xid=0), GpuSample(index=1)],
                    "gpu-a03": [GpuSample(index=2, xid=13)]}
    hits = signal_hits(0, sig, None, ev)
    assert [(h.entity, h.line) for h in hits] == [("node:gpu-a01", "gpu-a01 GPU 3: last Xid 79 (DCGM_FI_DEV_XID_ERRORS)")]
