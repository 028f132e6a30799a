"""What a test session killed before its teardown left running is stopped by the next one, by
the pids recorded in a directory whose owner has died (tests/harness/owner.py), and nothing
else: not a live session's processes, not a process that got a recorded pid later.

The Ray side runs on stand-in sessions (a shell and its child in a session of their own, as
`ray start --block` and its daemons are), since `ray_local.reap` signals sessions and never
asks Ray anything. The Slurm side, with real daemons, is tests/integration/slurm/test_slurm_reaping.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "harness"))

import owner  # noqa: E402
import ray_local  # noqa: E402


def _dead_pid() -> int:
    """A pid whose process ran (so it had a start time) and has exited."""
    proc = subprocess.Popen(["sleep", "60"])
    started = owner.start_time(proc.pid)
    proc.kill()
    proc.wait()
    assert started is not None
    return proc.pid


def _claim_dead(directory: Path) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    owner.claim(directory, proc.pid)
    proc.kill()
    proc.wait()


def _session(procs: list[subprocess.Popen]) -> tuple[int, int]:
    """A stand-in head: a shell leading a session of its own, with a child in it. (leader, child)."""
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    procs.append(proc)
    return proc.pid, int(proc.stdout.readline())


def _running(pid: int) -> bool:
    return owner.start_time(pid) is not None


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            os.killpg(p.pid, 9)
        p.wait()


def test_the_owner_is_the_recorded_process_and_not_a_later_one_with_its_pid(tmp_path):
    mine, dead, unclaimed, reused = (tmp_path / n for n in ("crashcart-x-mine", "crashcart-x-dead",
                                                             "crashcart-x-unclaimed", "crashcart-x-reused"))
    for d in (mine, dead, unclaimed, reused):
        d.mkdir()
    owner.claim(mine)
    _claim_dead(dead)
    # This process's pid with another start time: what a reused pid looks like.
    (reused / owner.OWNER_FILE).write_text(json.dumps({"pid": os.getpid(), "start": owner.start_time(os.getpid()) - 1}))
    (unclaimed / owner.OWNER_FILE).write_text("{not json")

    assert owner.owner_alive(mine) is True
    assert owner.owner_alive(dead) is False
    assert owner.owner_alive(reused) is False
    assert owner.owner_alive(unclaimed) is None  # nobody can tell: never reaped
    assert owner.owner_alive(tmp_path) is None
    assert owner.orphans("crashcart-x-*", tmp_path) == [dead, reused]


def test_a_process_that_is_not_running_cannot_own_a_directory(tmp_path):
    with pytest.raises(ValueError, match="is not running"):
        owner.claim(tmp_path, _dead_pid())


def test_ray_reap_stops_a_dead_sessions_head_and_nodes_and_leaves_a_live_sessions(tmp_path, procs):
    dead, live = tmp_path / "crashcart-ray-dead", tmp_path / "crashcart-ray-live"
    (dead / "spot-a").mkdir(parents=True)
    live.mkdir()
    sessions = {}
    for name, where in (("head", dead), ("node", dead / "spot-a"), ("live", live)):
        leader, child = sessions[name] = _session(procs)
        temp = tmp_path / f"ccray-{name}"
        temp.mkdir()
        (where / "head.json").write_text(json.dumps({"pid": leader, "temp_dir": str(temp),
                                                     "start": owner.start_time(leader)}))
    _claim_dead(dead)
    owner.claim(live)

    assert ray_local.reap(tmp_path) == [dead]

    for name in ("head", "node"):
        assert not any(_running(p) for p in sessions[name]), name
        assert not (tmp_path / f"ccray-{name}").exists()
    assert not dead.exists()
    assert all(_running(p) for p in sessions["live"])
    assert (tmp_path / "ccray-live").exists()
    assert ray_local.reap(tmp_path) == []


def test_ray_reap_leaves_a_process_that_got_a_dead_heads_pid(tmp_path, procs):
    """The head's leader gone with its whole session, the pid now another session's leader:
    its start time tells them apart."""
    dead = tmp_path / "crashcart-ray-dead"
    dead.mkdir()
    leader, child = _session(procs)
    (dead / "head.json").write_text(json.dumps({"pid": leader, "temp_dir": str(tmp_path / "gone"),
                                                "start": owner.start_time(leader) - 1}))
    _claim_dead(dead)

    assert ray_local.reap(tmp_path) == [dead]
    assert _running(leader) and _running(child)
