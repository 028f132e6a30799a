"""`watch` keeps polling while other processes use the same state dir: `incidents`, `approve`,
`replay` and `export` all work at the same time (no DuckDB lock traceback), and nothing any of
them wrote is lost."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import yaml

from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario

import procs

SCENARIO = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"
BAD_NODE = "sxm-h100-33"
CRASHED = re.compile(r"^Traceback \(most recent call last\)|Could not set lock", re.M)
"""Python's own traceback starts a line; a job log's is quoted inside a table."""


def _guard(tmp_path: Path) -> Path:
    """The scenario's own guard with alice named as the drain's approver."""
    guard = load_scenario(SCENARIO).guard
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump({**guard, "approval": [{"tool": "node_drain", "approvers": ["alice"]}]}))
    return path


def _waiting(state: Path, tmp_path: Path, n: int) -> str | None:
    code, text = procs.run(["incidents", "--state-dir", state], tmp_path / f"incidents-{n}.out")
    assert code == 0 and not CRASHED.search(text), text
    for line in text.splitlines():
        if "awaiting_approval" in line:
            return line.split("│")[1].strip()
    return None


def _polls(tmp_path: Path) -> int:
    return (tmp_path / "watch.out").read_text().count("poll: nothing new")


def test_watch_approve_incidents_replay_export_at_once(tmp_path: Path):
    state, guard = tmp_path / "state", _guard(tmp_path)
    state.mkdir()
    watch = procs.start(["watch", SCENARIO, "--mode", "autonomous", "--guard", guard, "--interval", "0.02",
                         "--state-dir", state], tmp_path / "watch.out", lasting_in=state)
    incident, listed = None, 0
    deadline = time.monotonic() + 60
    while incident is None and time.monotonic() < deadline:
        if (state / "incidents.duckdb").exists():
            incident = _waiting(state, tmp_path, listed)
            listed += 1
        else:
            time.sleep(0.05)
    assert incident, (tmp_path / "watch.out").read_text()

    approver = procs.start(["approve", incident, "--scenario", SCENARIO, "--mode", "autonomous", "--guard", guard,
                            "--approver", "alice", "--state-dir", state], tmp_path / "approve.out", lasting_in=state)
    readers = [procs.start(["incidents", "--state-dir", state, "--history", incident], tmp_path / "history.out"),
               procs.start(["export", incident, "--state-dir", state], tmp_path / "export.out"),
               procs.start(["replay", incident, "--state-dir", state], tmp_path / "replay.out")]
    approver.join(120)
    for r in readers:
        r.join(120)
    assert watch.is_alive(), f"the watch died:\n{(tmp_path / 'watch.out').read_text()}"
    # It goes on polling after the others are done; then it is stopped, as a person stops it.
    polled = _polls(tmp_path)
    while _polls(tmp_path) < polled + 5 and time.monotonic() < deadline + 60:
        time.sleep(0.05)
    watch.terminate()
    watch.join(30)

    outputs = {name: (tmp_path / f"{name}.out").read_text() for name in ("watch", "approve", "history", "export", "replay")}
    for name, text in outputs.items():
        assert not CRASHED.search(text), f"{name}:\n{text}"
    assert watch.exitcode == -signal.SIGTERM and approver.exitcode == 0, outputs
    assert readers[0].exitcode == 0 and "awaiting_approval" in outputs["history"], outputs["history"]
    assert readers[1].exitcode == 0 and yaml.safe_load(outputs["export"])["cluster"], outputs["export"]
    assert readers[2].exitcode in (0, 1) and incident in outputs["replay"], outputs["replay"]
    polls = _polls(tmp_path)
    assert polls >= polled + 5, outputs["watch"]

    with IncidentStore(state / "incidents.duckdb") as store:
        (only,) = store.list_incidents()
        detail = store.get_incident(incident)
        history = [s for s, _ in store.incident_history(incident)]
    assert only.id == incident
    [approval] = detail.approvals
    assert (approval.approver, approval.approved, approval.used) == ("alice", True, True)
    [drain] = [a for a in detail.actions if a.tool == "node_drain"]
    assert drain.args["node"] == BAD_NODE and drain.result["ok"]
    assert [d.decision for d in detail.decisions if d.tool == "node_drain"] == ["needs_approval", "allow"]
    assert [c.seq for c in detail.tool_calls] == list(range(1, len(detail.tool_calls) + 1))
    assert history[:4] == ["detected", "investigating", "diagnosed", "awaiting_approval"]
    assert history[-1] == detail.incident.status and detail.incident.status in {"remediated", "escalated"}
    drained = {n["name"]: n["state"] for n in procs.load_cluster(state)["cluster"]["nodes"]}
    assert drained[BAD_NODE] == "drained"
    procs.REPORT.append(f"concurrency: watch polled {polls} times while approve, incidents x{listed + 1}, export and "
          "replay ran in their own processes; 0 lock errors, 0 rows lost")
