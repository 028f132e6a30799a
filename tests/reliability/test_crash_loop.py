"""kill -9 of `crashcart watch` at every crash point, again and again: after each kill a new
watch process finishes the work, every failure has exactly one incident and exactly one
action on the cluster, and no incident is lost or left half done."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from crashcart.agent.crashpoints import CRASH_POINTS, ENV
from crashcart.agent.store import IncidentStore
from crashcart.agent.watch import UNFINISHED
from crashcart.evals.runner import EVAL_GUARD
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario

import procs

KILLS_PER_POINT = int(os.environ.get("CRASHCART_KILLS_PER_POINT", "50"))
WORKERS = 4
# Each fails in a way the agent fixes with one write the eval guard allows: a resubmit with a
# smaller batch, a resubmit away from a bad node, a drain.
SCENARIOS = [
    BUNDLED_DIR / "memory" / "cuda-oom-llama7b-bs32-after-bs64.yaml",
    BUNDLED_DIR / "memory" / "activation-oom-mistral-32k-fp32.yaml",
    BUNDLED_DIR / "stuck" / "shared-node-crash-five-jobs-node-fail.yaml",
]


def _watch(scenario: Path, state: Path, guard: Path, out: Path, crash_at: str | None):
    env = {ENV: crash_at} if crash_at else {}
    return procs.run(["watch", scenario, "--guard", guard, "--polls", "1", "--interval", "0",
                      "--state-dir", state], out, env=env, lasting_in=state)


def _outcome(state: Path) -> dict:
    """What the store and the cluster say happened."""
    with IncidentStore(state / "incidents.duckdb") as store:
        incidents = store.list_incidents(limit=1000)
        details = [store.get_incident(i.id) for i in incidents]
    cluster = procs.load_cluster(state)
    executed = sorted((a.tool, a.action_id) for d in details for a in d.actions)
    return {
        "incidents": sorted((i.trigger["kind"], i.trigger.get("job"), i.trigger.get("node")) for i in incidents),
        "statuses": sorted(i.status for i in incidents),
        "executed": [tool for tool, _ in executed],
        "action_ids": [aid for _, aid in executed],
        "resubmits": sorted(j["id"] for j in cluster["cluster"]["jobs"] if "-r" in j["id"]),
        "drained": sorted(n["name"] for n in cluster["cluster"]["nodes"] if n["state"] == "drained"),
    }


@pytest.fixture(scope="module")
def baselines(tmp_path_factory) -> dict[Path, dict]:
    """Each scenario watched once with no crash: what a clean run does."""
    out = {}
    root = tmp_path_factory.mktemp("baseline")
    for i, scenario in enumerate(SCENARIOS):
        state = root / str(i)
        code, text = _watch(scenario, state, EVAL_GUARD, root / f"{i}.out", None)
        assert code == 0, text
        outcome = _outcome(state)
        assert outcome["executed"], f"{scenario.name}: a clean run acted on nothing; the loop would prove nothing"
        out[scenario] = outcome
    return out


def _kill_and_restart(point: str, i: int, tmp_path: Path, baselines: dict[Path, dict]) -> None:
    scenario = SCENARIOS[i % len(SCENARIOS)]
    state = tmp_path / f"run{i}"
    code, text = _watch(scenario, state, EVAL_GUARD, tmp_path / f"{i}-killed.out", point)
    assert code == -signal.SIGKILL, f"run {i} ({scenario.name}) never reached {point} (rc {code}):\n{text}"
    code, text = _watch(scenario, state, EVAL_GUARD, tmp_path / f"{i}-after.out", None)
    assert code == 0, f"run {i}: the watch after the kill failed:\n{text}"
    got, want = _outcome(state), baselines[scenario]
    assert not set(got["statuses"]) & set(UNFINISHED), f"run {i}: an incident was left unfinished: {got}"
    assert len(got["action_ids"]) == len(set(got["action_ids"])), f"run {i}: an action ran twice: {got}"
    for key in ("incidents", "statuses", "executed", "resubmits", "drained"):
        assert got[key] == want[key], f"run {i} ({scenario.name}, killed at {point}): {key} {got[key]} != {want[key]}"


@pytest.mark.parametrize("point", sorted(CRASH_POINTS))
def test_kill_9_at_a_crash_point_loses_nothing_and_acts_once(point, baselines, tmp_path):
    # Each kill and restart has a state dir of its own; a few run side by side, since a run
    # mostly waits on its files.
    with ThreadPoolExecutor(WORKERS) as pool:
        for done in [pool.submit(_kill_and_restart, point, i, tmp_path, baselines) for i in range(KILLS_PER_POINT)]:
            done.result()
    procs.REPORT.append(f"kill -9 at {point}: {KILLS_PER_POINT} kills, each followed by a restart; "
                        f"0 incidents lost, 0 actions repeated")
