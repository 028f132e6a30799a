"""A cluster that cannot be investigated is an outcome, not a clean bill of health (issue 8, item 5).

Each case is a real way for a live Slurm cluster to be out of reach, through the real backend:
slurm.conf empty (the real `sacct`/`scontrol` fail, or are absent), and the login node down
(SSH to a port nobody listens on). Before the fix each came out "healthy: no fault found",
status closed, exit 0.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app
from crashcart.agent.store import IncidentStore

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
GUARD = {"mode": "autonomous", "permissions": [{"tool": "escalate"}, {"tool": "notify"}]}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster(tmp_path: Path, how: str) -> Path:
    if how == "no-slurm-conf":
        # An empty slurm.conf fails at once; a missing one makes the real client retry for 60 s first.
        conf = tmp_path / "slurm.conf"
        conf.write_text("")
        slurm = {"connection": {"method": "local"}, "env": {"SLURM_CONF": str(conf)}}
    elif how == "no-slurm-commands":
        slurm = {"connection": {"method": "local"}, "env": {"PATH": str(tmp_path / "empty-bin")}}
    else:
        key = tmp_path / "id_ed25519"
        key.write_text("not used: nobody answers\n")
        slurm = {"connection": {"method": "ssh", "ssh": {
            "hosts": ["127.0.0.1"], "port": _closed_port(), "user": "crashcart", "key_file": str(key),
            "connect_timeout": 2, "retries": 0, "backoff_seconds": 0}}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"name": "unreachable", "backend": "slurm", "slurm": slurm, "guard": GUARD}))
    return path


@pytest.mark.parametrize("how", ["no-slurm-conf", "no-slurm-commands", "login-node-down"])
def test_an_unreachable_cluster_ends_investigation_failed_and_is_escalated(tmp_path, how):
    if how == "login-node-down":
        pytest.importorskip("paramiko")
    state = tmp_path / "state"
    out = CliRunner().invoke(app, ["investigate", "--cluster", str(_cluster(tmp_path, how)), "--job", "48213",
                                   "--state-dir", str(state)], env=ENV)
    assert out.exit_code == 3, out.output
    assert "Traceback" not in out.output
    assert "investigation_failed" in out.output
    assert "healthy" not in out.output
    with IncidentStore(state / "incidents.duckdb") as store:
        [inc] = store.list_incidents()
        detail = store.get_incident(inc.id)
    assert inc.status == "investigation_failed"
    assert inc.diagnosis["family"] == "unknown" and inc.diagnosis["confidence"] == 0.0
    assert inc.diagnosis["evidence"], "the errors are the evidence"
    assert all(not t.ok for t in detail.tool_calls)
    [escalation] = [d for d in detail.decisions if d.tool == "escalate"]
    assert escalation.decision == "allow" and escalation.args["team"] == "infra"
    assert any(a.tool == "escalate" for a in detail.actions)
