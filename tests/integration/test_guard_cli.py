"""`crashcart guard reset` and `guard check` as a person runs them (issue 8, items 2 and 3)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crashcart.agent.guard import Guard, policy_from_dict
from crashcart.agent.interfaces.cli import app
from crashcart.agent.interfaces.os_user import current_os_user
from crashcart.agent.store import IncidentStore

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def tripped_store(state_dir: Path, **policy) -> Path:
    """A store where cluster gpu-prod's breaker tripped during an incident under `policy`."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        store.open_incident("gpu-prod", "watch", {"kind": "node_alert", "node": "gpu-1"},
                            incident_id="inc-000000000001", at=T0)
        g = Guard(policy_from_dict({"mode": "autonomous", "permissions": [{"tool": "*"}], **policy}),
                  store, "gpu-prod", lambda: T0)
        g.bind("inc-000000000001")
        store.trip_breaker("gpu-prod", "three drains in an hour", T0, incident_id="inc-000000000001")
    return state_dir


def breaker_tripped(state_dir: Path) -> bool:
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        return store.breaker_state("gpu-prod").tripped


@pytest.mark.parametrize("cluster, person, message", [
    ("does-not-exist", "alice", "unknown cluster 'does-not-exist' (the store knows: gpu-prod)"),
    ("gpu-prod", "", "the name of the person"),
    ("gpu-prod", "mallory", "mallory may not reset the circuit breaker"),
])
def test_guard_reset_refuses(tmp_path, cluster, person, message):
    state_dir = tripped_store(tmp_path / "st", approvers=["alice"])
    result = invoke("guard", "reset", "--cluster", cluster, "--person", person, "--state-dir", state_dir)
    assert result.exit_code != 0, result.output
    assert message in result.output and "Traceback" not in result.output
    assert breaker_tripped(state_dir)


def test_guard_reset_by_nobody_when_the_policy_names_nobody(tmp_path):
    state_dir = tripped_store(tmp_path / "st")
    result = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "alice", "--state-dir", state_dir)
    assert result.exit_code != 0 and "nobody may reset" in result.output
    assert breaker_tripped(state_dir)


def test_guard_reset_by_a_named_person_is_journaled(tmp_path):
    state_dir = tripped_store(tmp_path / "st", approvers=["alice"])
    result = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "alice", "--state-dir", state_dir)
    assert result.exit_code == 0, result.output
    assert not breaker_tripped(state_dir)
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        state = store.breaker_state("gpu-prod")
    assert state.reset_by == "alice"


def test_guard_reset_refusal_is_journaled_with_the_os_user(tmp_path):
    state_dir = tripped_store(tmp_path / "st", approvers=["alice"])
    invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "mallory", "--state-dir", state_dir)
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        [attempt] = store.approval_attempts("inc-000000000001")
    assert (attempt.approver, attempt.tool, attempt.outcome) == ("mallory", "breaker_reset", "refused")
    assert attempt.os_user == current_os_user()


def test_guard_reset_without_a_store_is_a_clear_error(tmp_path):
    result = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "alice", "--state-dir", tmp_path)
    assert result.exit_code == 2 and "no incident store yet" in result.output


def test_guard_check_catches_a_misspelt_tool(tmp_path):
    bad = tmp_path / "guard.yaml"
    bad.write_text("mode: autonomous\npermissions:\n  - tool: '*'\napproval:\n  - tool: node_drian\n")
    result = invoke("guard", "check", bad)
    assert result.exit_code == 2
    assert f"error: {bad}: approval[0].tool: 'node_drian' matches no write tool" in result.output
    assert "(line 5)" in result.output
