"""`crashcart guard reset` and `guard check` as a person runs them (issue 8, items 2 and 3)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from crashcart.agent.guard import Guard, policy_from_dict, scenario_breaker
from crashcart.agent.interfaces.cli import app
from crashcart.agent.interfaces.os_user import current_os_user
from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def tripped_store(state_dir: Path, breaker: str = "gpu-prod", **policy) -> Path:
    """A store where the breaker record `breaker` (gpu-prod: the live cluster's) tripped during an
    incident of cluster gpu-prod under `policy`: a live incident, or a scenario's run under that name."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        store.open_incident("gpu-prod", "watch", {"kind": "node_alert", "node": "gpu-1"},
                            incident_id="inc-000000000001", at=T0)
        g = Guard(policy_from_dict({"mode": "autonomous", "permissions": [{"tool": "*"}], **policy}),
                  store, "gpu-prod", lambda: T0)
        g.bind("inc-000000000001")
        store.trip_breaker(breaker, "three drains in an hour", T0, incident_id="inc-000000000001")
    return state_dir


def cluster_yaml(tmp_path: Path, **guard) -> Path:
    """Live cluster gpu-prod's cluster.yaml, its own guard naming `guard`'s approvers."""
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump({"name": "gpu-prod", "backend": "slurm",
                                    "guard": {"mode": "dry_run", "permissions": [{"tool": "*"}], **guard}}))
    return path


def breaker_tripped(state_dir: Path, breaker: str = "gpu-prod") -> bool:
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        return store.breaker_state(breaker).tripped


def refusal_line(result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and all(w in line for w in words), line


@pytest.mark.parametrize("person, message", [
    ("", "the name of the person"),
    ("mallory", "mallory may not reset the circuit breaker"),
])
def test_guard_reset_refuses(tmp_path, person, message):
    state_dir = tripped_store(tmp_path / "st", approvers=["alice"])
    cluster = cluster_yaml(tmp_path, approvers=["alice"])
    result = invoke("guard", "reset", "--cluster", cluster, "--person", person, "--state-dir", state_dir)
    refusal_line(result, 1, message)
    assert breaker_tripped(state_dir)


def test_guard_reset_by_nobody_when_the_clusters_policy_names_nobody(tmp_path):
    state_dir = tripped_store(tmp_path / "st", approvers=["alice"])
    result = invoke("guard", "reset", "--cluster", cluster_yaml(tmp_path), "--person", "alice",
                    "--state-dir", state_dir)
    refusal_line(result, 1, "nobody may reset the circuit breaker of gpu-prod")
    assert breaker_tripped(state_dir)


def test_guard_reset_by_a_person_the_clusters_policy_names(tmp_path):
    """The incident that tripped it (a scenario's, say) named nobody; the live cluster's own guard names alice."""
    state_dir = tripped_store(tmp_path / "st")
    cluster = cluster_yaml(tmp_path, approvers=["alice"])
    result = invoke("guard", "reset", "--cluster", cluster, "--person", "alice", "--state-dir", state_dir)
    assert result.exit_code == 0, result.output
    assert "breaker for gpu-prod: tripped=False (reset by alice)" in result.output
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        state = store.breaker_state("gpu-prod")
    assert (state.tripped, state.reset_by) == (False, "alice")


def test_a_person_only_a_scenarios_policy_names_may_not_reset_the_live_breaker(tmp_path):
    """A scenario run under gpu-prod's name with a wider --guard (naming mallory) tripped the breaker
    record the live cluster reads; mallory resetting it would have been judged by that policy."""
    state_dir = tripped_store(tmp_path / "st", approvers=["mallory"])
    cluster = cluster_yaml(tmp_path, approvers=["alice"])
    result = invoke("guard", "reset", "--cluster", cluster, "--person", "mallory", "--state-dir", state_dir)
    refusal_line(result, 1, "mallory may not reset the circuit breaker; allowed: alice.")
    assert breaker_tripped(state_dir)
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        [attempt] = store.approval_attempts("inc-000000000001")
    assert (attempt.approver, attempt.tool, attempt.outcome) == ("mallory", "breaker_reset", "refused")
    assert attempt.os_user == current_os_user()

    # Nor by the live cluster's bare name, which the scenario's policy would have judged.
    by_name = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "mallory", "--state-dir", state_dir)
    refusal_line(by_name, 2, "--cluster gpu-prod", "live cluster's", "cluster.yaml")
    assert breaker_tripped(state_dir)


def test_a_scenarios_breaker_is_reset_by_its_id_under_its_incidents_policy(tmp_path):
    state_dir = tripped_store(tmp_path / "st", breaker=scenario_breaker("gpu-prod"), approvers=["bob"])
    refused = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "alice", "--state-dir", state_dir)
    refusal_line(refused, 1, "alice may not reset the circuit breaker; allowed: bob.")
    result = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "bob", "--state-dir", state_dir)
    assert result.exit_code == 0, result.output
    assert "breaker for scenario gpu-prod: tripped=False (reset by bob)" in result.output
    assert not breaker_tripped(state_dir, scenario_breaker("gpu-prod"))


def test_a_scenario_run_under_a_live_name_trips_its_own_breaker_not_the_live_one(tmp_path):
    """A scenario whose own --guard drains nothing before tripping (max_drains 0) and names mallory."""
    scenario = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"
    name = load_scenario(scenario).id
    guard = tmp_path / "wide.yaml"
    guard.write_text(yaml.safe_dump({"mode": "autonomous", "permissions": [{"tool": "*"}], "approvers": ["mallory"],
                                     "breaker": {"max_drains": 0}}))
    state_dir = tmp_path / "st"
    result = invoke("investigate", scenario, "--guard", guard, "--state-dir", state_dir)
    assert result.exit_code == 0, result.output
    assert breaker_tripped(state_dir, scenario_breaker(name))
    assert not breaker_tripped(state_dir, name), "the live cluster of that name keeps its own breaker record"
    reset = invoke("guard", "reset", "--cluster", name, "--person", "mallory", "--state-dir", state_dir)
    assert reset.exit_code == 0, reset.output
    assert not breaker_tripped(state_dir, scenario_breaker(name))


@pytest.mark.parametrize("given, words", [
    ("does-not-exist", ("--cluster does-not-exist", "no cluster.yaml of that name", "scenario breakers: none")),
    ("missing.yaml", ("--cluster missing.yaml: no such file",)),
    ("{tmp}", ("is a folder",)),
    ("{tmp}/bad.yaml", ("bad.yaml", "backend")),
])
def test_guard_reset_bad_cluster_is_a_clear_error(tmp_path, given, words):
    state_dir = tripped_store(tmp_path / "st", approvers=["alice"])
    (tmp_path / "bad.yaml").write_text("name: gpu-prod\nbackend: pbs\n")
    result = invoke("guard", "reset", "--cluster", given.format(tmp=tmp_path), "--person", "alice",
                    "--state-dir", state_dir)
    refusal_line(result, 2, *words)
    assert breaker_tripped(state_dir)


def test_guard_reset_without_a_store_is_a_clear_error(tmp_path):
    result = invoke("guard", "reset", "--cluster", "gpu-prod", "--person", "alice", "--state-dir", tmp_path)
    assert result.exit_code == 2 and "no incident store yet" in result.output
    result = invoke("guard", "reset", "--cluster", cluster_yaml(tmp_path, approvers=["alice"]), "--person", "alice",
                    "--state-dir", tmp_path)
    assert result.exit_code == 2 and "no incident store yet" in result.output


def test_guard_check_catches_a_misspelt_tool(tmp_path):
    bad = tmp_path / "guard.yaml"
    bad.write_text("mode: autonomous\npermissions:\n  - tool: '*'\napproval:\n  - tool: node_drian\n")
    result = invoke("guard", "check", bad)
    assert result.exit_code == 2
    assert f"error: {bad}: approval[0].tool: 'node_drian' matches no write tool" in result.output
    assert "(line 5)" in result.output
