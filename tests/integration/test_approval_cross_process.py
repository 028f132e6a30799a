"""An approval answered from a second process: `crashcart investigate` stops and exits, and
`crashcart approve` (a new process, the same state dir) resumes the incident from its SQLite
checkpoint and runs the approved drain, journaled in the DuckDB store.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crashcart.agent.interfaces.os_user import current_os_user
from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario

SCENARIO = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"
BAD_NODE = "sxm-h100-33"
INCIDENT_ID = re.compile(r"incident (inc-[0-9a-f]{12}) waits for approval")


def crashcart(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # A wide console so rich never folds a table cell across lines.
    env = {**os.environ, "COLUMNS": "1000", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "crashcart.agent.interfaces.cli", *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
    )


def table_row(output: str, tool: str) -> str:
    """The last row of the actions table for `tool`, with its wrapped continuation lines."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(rf"^│ {tool} +│", line)]
    assert starts, f"no {tool} row in:\n{output}"
    row = [lines[starts[-1]]]
    for line in lines[starts[-1] + 1:]:
        if not re.match(r"^│ +│", line):  # the next row, or the table's border
            break
        row.append(line)
    return "\n".join(row)


@pytest.fixture
def guard_file(tmp_path: Path) -> Path:
    """The scenario's own guard names no approvers, so nobody could approve; this one names alice."""
    scenario_guard = load_scenario(SCENARIO).guard
    assert scenario_guard["approval"] == [{"tool": "node_drain"}] and not scenario_guard.get("approvers")
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump({
        **scenario_guard,
        "approval": [{"tool": "node_drain", "approvers": ["alice"]}],
    }))
    return path


def investigate(tmp_path: Path, state_dir: Path, guard_file: Path) -> str:
    first = crashcart("investigate", SCENARIO, "--mode", "autonomous", "--guard", guard_file,
                      "--state-dir", state_dir, cwd=tmp_path)
    assert first.returncode == 0, first.stderr + first.stdout
    assert "needs_approval" in table_row(first.stdout, "node_drain")
    assert "status awaiting_approval" in first.stdout
    found = INCIDENT_ID.search(first.stdout)
    assert found, first.stdout
    assert (state_dir / "checkpoints.sqlite").exists() and (state_dir / "incidents.duckdb").exists()
    return found.group(1)


def approve(tmp_path: Path, state_dir: Path, guard_file: Path, incident: str, approver: str, *extra: str):
    return crashcart("approve", incident, "--scenario", SCENARIO, "--approver", approver,
                     "--guard", guard_file, "--state-dir", state_dir, *extra, cwd=tmp_path)


def test_a_drain_approved_from_another_process_runs(tmp_path: Path, guard_file: Path):
    state_dir = tmp_path / "state"
    incident = investigate(tmp_path, state_dir, guard_file)

    # Between the two processes the store says the incident waits, and nothing ran.
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        waiting = store.get_incident(incident)
        assert waiting.incident.status == "awaiting_approval"
        assert [d.decision for d in waiting.decisions if d.tool == "node_drain"] == ["needs_approval"]
        assert waiting.approvals == [] and not [a for a in waiting.actions if a.tool == "node_drain"]

    second = approve(tmp_path, state_dir, guard_file, incident, "alice")
    assert second.returncode == 0, second.stderr + second.stdout
    row = table_row(second.stdout, "node_drain")
    assert BAD_NODE in row and " allow " in row and "Approved by alice." in row
    assert f"executed: scontrol update NodeName={BAD_NODE} State=DRAIN" in row and "now drained" in row
    assert "needs_approval" not in second.stdout

    with IncidentStore(state_dir / "incidents.duckdb") as store:
        detail = store.get_incident(incident)
    [approval] = detail.approvals
    assert (approval.approver, approval.approved, approval.used) == ("alice", True, True)
    drain_decisions = [d for d in detail.decisions if d.tool == "node_drain"]
    assert [d.decision for d in drain_decisions] == ["needs_approval", "allow"]
    allow = drain_decisions[1]
    assert allow.action_id == approval.action_id and allow.node == BAD_NODE
    assert allow.reason == "Approved by alice."
    [drained] = [a for a in detail.actions if a.tool == "node_drain"]
    assert drained.action_id == allow.action_id and drained.args["node"] == BAD_NODE
    assert drained.result["ok"] and "drained" in drained.result["message"]
    # Journaled before it ran: the allow is in the store, stamped no later than the action.
    assert allow.at <= drained.at
    assert approval.at <= allow.at
    # Every executed action rests on an 'allow' decision for that very action.
    allowed = {d.action_id for d in detail.decisions if d.decision == "allow"}
    assert {a.action_id for a in detail.actions} <= allowed
    assert {a.tool for a in detail.actions} == {"node_drain", "resubmit", "escalate"}
    assert detail.incident.status in {"remediated", "escalated"}

    again = approve(tmp_path, state_dir, guard_file, incident, "alice")
    assert again.returncode != 0
    assert f"incident {incident} is not waiting for an approval" in again.stdout + again.stderr
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        after = store.get_incident(incident)
    assert len(after.approvals) == 1 and len(after.actions) == len(detail.actions)

    # After the fact: the approval with the OS account it came from, the refused second try with why.
    shown = crashcart("incidents", "show", incident, "--state-dir", str(state_dir), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr + shown.stdout
    assert f"alice approved (OS user {approval.os_user})" in table_row(shown.stdout, "node_drain")
    assert approval.os_user
    refused = shown.stdout.split("refused approval attempts", 1)[1]
    assert " alice " in refused and f"incident {incident} is not waiting for an approval" in refused


def test_a_wrong_approver_in_another_process_leaves_it_waiting(tmp_path: Path, guard_file: Path):
    state_dir = tmp_path / "state"
    incident = investigate(tmp_path, state_dir, guard_file)

    refused = approve(tmp_path, state_dir, guard_file, incident, "mallory")
    # A refused approval is an error for whoever ran it, and says why.
    assert refused.returncode == 1, refused.stderr + refused.stdout
    row = table_row(refused.stdout, "node_drain")
    assert "needs_approval" in row and "mallory may not approve" in row
    assert "executed:" not in row
    assert "approval refused" in refused.stdout
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        detail = store.get_incident(incident)
        [attempt] = store.approval_attempts(incident)
    assert detail.approvals == [] and not [a for a in detail.actions if a.tool == "node_drain"]
    assert detail.incident.status == "awaiting_approval"
    assert (attempt.approver, attempt.os_user, attempt.outcome, attempt.tool) == (
        "mallory", current_os_user(), "refused", "node_drain")
    assert detail.approval_attempts == [attempt]  # part of the incident's record

    # Still waiting: a third process, the right person, and the drain runs.
    approved = approve(tmp_path, state_dir, guard_file, incident, "alice")
    assert approved.returncode == 0, approved.stderr + approved.stdout
    assert "executed: scontrol update" in table_row(approved.stdout, "node_drain")


def test_a_rejection_from_another_process_denies_the_drain(tmp_path: Path, guard_file: Path):
    state_dir = tmp_path / "state"
    incident = investigate(tmp_path, state_dir, guard_file)
    rejected = approve(tmp_path, state_dir, guard_file, incident, "alice", "--reject")
    assert rejected.returncode == 0, rejected.stderr + rejected.stdout
    row = table_row(rejected.stdout, "node_drain")
    assert " deny " in row and "Rejected by alice." in row and "executed:" not in row
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        detail = store.get_incident(incident)
    assert [d.decision for d in detail.decisions if d.tool == "node_drain"] == ["needs_approval", "deny"]
    assert not [a for a in detail.actions if a.tool == "node_drain"]
    [approval] = detail.approvals
    assert (approval.approver, approval.approved, approval.used) == ("alice", False, True)


# --- an incident owns its policy (issue 8) -------------------------------------------------


@pytest.fixture
def dry_run_scenario(tmp_path: Path) -> Path:
    """The guarded-drain scenario with the built-in policy's shape: dry_run unless told otherwise,
    node drains need a person, and alice is that person."""
    data = yaml.safe_load(SCENARIO.read_text())
    data["guard"] = {"mode": "dry_run", "permissions": [{"tool": "*"}],
                     "approval": [{"tool": "node_drain"}], "approvers": ["alice"]}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def watch_once(tmp_path: Path, state_dir: Path, scenario: Path) -> str:
    run = crashcart("watch", scenario, "--mode", "autonomous", "--polls", "1", "--state-dir", state_dir, cwd=tmp_path)
    assert run.returncode == 0, run.stderr + run.stdout
    found = re.search(r"(inc-[0-9a-f]{12}) +awaiting_approval", run.stdout)
    assert found, run.stdout
    return found.group(1)


def test_the_readme_flow_runs_the_approved_drain(tmp_path: Path, dry_run_scenario: Path):
    """`watch S --mode autonomous`, then `approve INC --scenario S --approver alice`: the incident
    ran autonomous, so the approved drain runs (it used to become a dry run under the file's mode)."""
    state_dir = tmp_path / "state"
    incident = watch_once(tmp_path, state_dir, dry_run_scenario)
    approved = crashcart("approve", incident, "--scenario", dry_run_scenario, "--approver", "alice",
                         "--state-dir", state_dir, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr + approved.stdout
    row = table_row(approved.stdout, "node_drain")
    assert " allow " in row and f"executed: scontrol update NodeName={BAD_NODE} State=DRAIN" in row
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        stored = store.incident_policy(incident)
        detail = store.get_incident(incident)
    assert stored.mode == "autonomous"
    assert [a.args["node"] for a in detail.actions if a.tool == "node_drain"] == [BAD_NODE]
    [approval] = detail.approvals
    assert (approval.approver, approval.os_user, approval.policy_sha256) == ("alice", current_os_user(), stored.sha256)


def test_approve_with_another_guard_or_mode_is_refused_and_journaled(tmp_path: Path, dry_run_scenario: Path):
    state_dir = tmp_path / "state"
    incident = watch_once(tmp_path, state_dir, dry_run_scenario)
    evil = tmp_path / "evil.yaml"
    evil.write_text(yaml.safe_dump({"mode": "autonomous", "permissions": [{"tool": "*"}],
                                    "approval": [{"tool": "node_drain", "approvers": ["mallory"]}]}))
    talked = crashcart("approve", incident, "--scenario", dry_run_scenario, "--approver", "mallory",
                       "--guard", evil, "--state-dir", state_dir, cwd=tmp_path)
    assert talked.returncode == 1, talked.stderr + talked.stdout
    assert f"incident {incident} runs under its own guard policy" in talked.stdout
    assert "executed:" not in talked.stdout and "Traceback" not in talked.stdout + talked.stderr
    other_mode = crashcart("approve", incident, "--scenario", dry_run_scenario, "--approver", "alice",
                           "--mode", "dry_run", "--state-dir", state_dir, cwd=tmp_path)
    assert other_mode.returncode == 1, other_mode.stderr + other_mode.stdout
    assert "mode dry_run" in other_mode.stdout and "mode autonomous" in other_mode.stdout
    with IncidentStore(state_dir / "incidents.duckdb") as store:
        attempts = store.approval_attempts(incident)
        detail = store.get_incident(incident)
    assert [(a.approver, a.outcome) for a in attempts] == [("mallory", "refused"), ("alice", "refused")]
    assert "--guard" in attempts[0].reason and "--mode" in attempts[1].reason
    assert detail.approvals == [] and not [a for a in detail.actions if a.tool == "node_drain"]
    assert detail.incident.status == "awaiting_approval"

    # The same flags as the incident's own are no refusal, and the drain runs.
    same = crashcart("approve", incident, "--scenario", dry_run_scenario, "--approver", "alice",
                     "--mode", "autonomous", "--state-dir", state_dir, cwd=tmp_path)
    assert same.returncode == 0, same.stderr + same.stdout
    assert "executed: scontrol update" in table_row(same.stdout, "node_drain")
