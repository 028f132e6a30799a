"""A live cluster's own guard (cluster.yaml) is the ceiling: no command-line flag widens it.

The cluster is the loopback Kubernetes API server with a job that the playbooks fix with a
resubmit; its cluster.yaml's guard is dry_run. Before the fix `--mode autonomous` and
`--guard allow-all.yaml` both made crashcart resubmit on it, and a scenario run under
`--guard` in the same state dir could be approved onto it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app
from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario
from test_k8s_agent import ALLOW_ALL, oom_job

import kubeseed as k

ENV = {"COLUMNS": "1000", "NO_COLOR": "1", "TERM": "dumb"}
JOB = "biencoder-idx-k2l9v"
DRY_RUN = {**ALLOW_ALL, "mode": "dry_run"}
"""The cluster's own guard: every write permitted, nothing runs."""


def invoke(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], env=ENV)


def cluster_file(lab, tmp_path: Path, guard: dict, name: str = "loopback") -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "backend": "kubernetes",
        "kubernetes": {"connection": {"kubeconfig": str(lab.kubeconfig), "context": "loopback"}, "namespaces": ["train"]},
        "guard": guard}))
    return path


@pytest.fixture
def permissive(tmp_path: Path) -> Path:
    path = tmp_path / "allow-all.yaml"
    path.write_text(yaml.safe_dump(ALLOW_ALL))
    return path


def one_line_refusal(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: ") and all(w in line for w in words), line


def stored_modes(state: Path) -> list[str]:
    with IncidentStore(state / "incidents.duckdb") as store:
        return [store.incident_policy(i.id).mode for i in store.list_incidents()]


@pytest.mark.parametrize("command", [
    ("investigate", "--job", JOB),
    ("watch", "--polls", "1", "--interval", "0", "--lookback-minutes", "10"),
])
def test_a_wider_mode_is_refused_and_a_narrower_one_runs(lab, tmp_path, command):
    oom_job(lab)
    cluster, state = cluster_file(lab, tmp_path, DRY_RUN), tmp_path / "state"
    wider = invoke(*command, "--cluster", cluster, "--mode", "autonomous", "--state-dir", state)
    one_line_refusal(wider, "--mode autonomous", "guard, mode dry_run)", str(cluster))
    assert not state.exists(), "nothing is written, not even the state dir"
    assert lab.writes() == []

    narrower = invoke(*command, "--cluster", cluster, "--mode", "observe", "--state-dir", state)
    assert narrower.exit_code == 0, narrower.output
    assert "host_oom" in narrower.output
    assert stored_modes(state) == ["observe"]
    assert lab.writes() == []


@pytest.mark.parametrize("command", [
    ("investigate", "--job", JOB),
    ("watch", "--polls", "1", "--interval", "0", "--lookback-minutes", "10"),
])
def test_a_guard_file_does_not_replace_the_clusters_own(lab, tmp_path, permissive, command):
    oom_job(lab)
    cluster, state = cluster_file(lab, tmp_path, DRY_RUN), tmp_path / "state"
    for extra in ((), ("--mode", "autonomous"), ("--mode", "observe")):
        result = invoke(*command, "--cluster", cluster, "--guard", permissive, *extra, "--state-dir", state)
        one_line_refusal(result, f"--guard {permissive}", "--cluster", "guard, mode dry_run)")
    assert not state.exists()
    assert lab.writes() == []


def test_the_clusters_own_autonomous_mode_still_acts(lab, tmp_path):
    """The ceiling is the cluster's: a cluster.yaml that says autonomous is obeyed, with or without --mode."""
    oom_job(lab)
    cluster, state = cluster_file(lab, tmp_path, ALLOW_ALL), tmp_path / "state"
    result = invoke("investigate", "--cluster", cluster, "--job", JOB, "--mode", "autonomous", "--state-dir", state)
    assert result.exit_code == 0, result.output
    assert stored_modes(state) == ["autonomous"]
    assert [j["metadata"]["name"] for j in lab.all("batch/v1", "Job")] == ["biencoder-idx", "biencoder-idx-r1"]


SCENARIO = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"
BAD_NODE = "sxm-h100-33"


def test_a_scenario_incident_under_another_guard_is_not_approved_onto_the_live_cluster(lab, tmp_path):
    """A recorded incident run with --guard (allowed: it touches no cluster) shares the state dir and
    the name of a live cluster; approving it with --cluster would have drained the live node."""
    lab.add(k.node(BAD_NODE))
    scenario = load_scenario(SCENARIO)
    guard = tmp_path / "guard.yaml"
    # The scenario's clock is months before the live cluster's: its own guard file says how long a request keeps.
    guard.write_text(yaml.safe_dump({**scenario.guard, "approval": [{"tool": "node_drain", "approvers": ["alice"]}],
                                     "approval_settings": {"expires_minutes": 10**7}}))
    state = tmp_path / "state"
    started = invoke("investigate", SCENARIO, "--mode", "autonomous", "--guard", guard, "--state-dir", state)
    assert started.exit_code == 0 and "waits for approval" in started.output, started.output
    incident = started.output.split("incident ", 1)[1].split()[0]

    # The live cluster's own guard: dry_run, and alice may approve there too.
    cluster = cluster_file(lab, tmp_path, {**DRY_RUN, "approvers": ["alice"]}, name=scenario.id)
    approved = invoke("approve", incident, "--cluster", cluster, "--approver", "alice", "--state-dir", state)
    assert approved.exit_code == 1, approved.output
    assert f"Incident {incident} runs under a guard policy (mode autonomous" in approved.output
    assert "nothing it asks for runs on this cluster" in approved.output
    assert lab.writes() == []
    assert not lab.get("v1", "Node", None, BAD_NODE)["spec"].get("unschedulable")
    with IncidentStore(state / "incidents.duckdb") as store:
        [attempt] = store.approval_attempts(incident)
        detail = store.get_incident(incident)
    assert (attempt.approver, attempt.outcome) == ("alice", "refused") and "is not" in attempt.reason
    assert detail.approvals == [] and detail.incident.status == "awaiting_approval"

    # The scenario's own approval path is unchanged: the recorded cluster drains.
    on_scenario = invoke("approve", incident, "--scenario", SCENARIO, "--approver", "alice", "--state-dir", state)
    assert on_scenario.exit_code == 0, on_scenario.output
    assert lab.writes() == []
