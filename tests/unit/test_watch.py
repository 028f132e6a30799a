"""The on-call loop: one incident per root cause, nothing lost and nothing done twice on restart."""

import sqlite3
from datetime import timedelta

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from crashcart.agent.guard import load_policy
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.runner import make_deps
from crashcart.agent.store import IncidentStore
from crashcart.agent.watch import Watcher, WatchSettings, detect
from crashcart.evals.runner import EVAL_GUARD
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools import ToolError
from crashcart.tools.cluster import Cluster

CRASH = BUNDLED_DIR / "stuck" / "shared-node-crash-five-jobs-node-fail.yaml"
OOM = BUNDLED_DIR / "memory" / "cuda-oom-llama7b-bs32-after-bs64.yaml"


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs, no handler sees it."""


class DiesOnWrite(FixtureBackend):
    """A backend whose process dies at the first write: before acting, or right after."""

    def __init__(self, cluster, kind, after: bool):
        super().__init__(cluster, kind)
        self.after = after

    def run(self, spec, args):
        if spec.effect == "write":
            if self.after:
                super().run(spec, args)
            raise Killed()
        return super().run(spec, args)


def _watcher(backend, tmp_path, cluster="c1"):
    store = IncidentStore(tmp_path / "incidents.duckdb")
    saver = SqliteSaver(sqlite3.connect(str(tmp_path / "checkpoints.sqlite"), check_same_thread=False))
    deps = make_deps(backend, PlaybookPolicy(), load_policy(EVAL_GUARD), store, cluster=cluster)
    return Watcher(deps, cluster=cluster, checkpointer=saver, settings=WatchSettings(interval_s=0)), store


def test_five_jobs_killed_by_one_node_are_one_incident():
    sc = load_scenario(CRASH)
    backend = FixtureBackend(sc.cluster, sc.backend)
    changes = backend.changes_since(backend.now() - timedelta(hours=1), stall_minutes=45)
    assert len(changes.failed) == 5
    detections = detect(changes, WatchSettings())
    assert len(detections) == 1 and len(detections[0].also) == 5  # four more jobs and the node


def test_a_second_poll_opens_nothing_new(tmp_path):
    sc = load_scenario(CRASH)
    watcher, store = _watcher(FixtureBackend(sc.cluster, sc.backend), tmp_path)
    first = watcher.poll_once()
    assert len(first) == 1
    assert watcher.poll_once() == []
    detail = store.get_incident(first[0])
    assert detail.incident.diagnosis["label"] == "node_crash"
    assert [s for s, _ in store.incident_history(first[0])][:2] == ["detected", "investigating"]


@pytest.mark.parametrize("after", [False, True], ids=["killed-before-acting", "killed-right-after-acting"])
def test_a_restart_between_detection_and_action_acts_exactly_once(tmp_path, after):
    sc = load_scenario(OOM)
    dying = DiesOnWrite(sc.cluster, sc.backend, after=after)
    watcher, store = _watcher(dying, tmp_path)
    with pytest.raises(Killed):
        watcher.poll_once()
    store.close()
    # A new process: a new store connection and checkpointer on the same files, and the
    # cluster as the dead process left it.
    survivor = FixtureBackend(dying.cluster, sc.backend)
    survivor.requests = dying.requests
    watcher, store = _watcher(survivor, tmp_path)
    touched = watcher.poll_once()
    assert len(touched) == 1
    resubmits = [j for j in survivor.cluster.jobs if j.id.startswith(f"{sc.trigger.job}-r")]
    assert len(resubmits) == 1
    assert resubmits[0].config["batch_size"] < 32
    detail = store.get_incident(touched[0])
    assert [a.tool for a in detail.actions].count("resubmit") == 1
    assert watcher.poll_once() == []


def test_a_running_job_without_progress_is_reported_as_stalled(tmp_path):
    sc = load_scenario(BUNDLED_DIR / "stuck" / "training-hang-frozen-step.yaml")
    backend = FixtureBackend(sc.cluster, sc.backend)
    changes = backend.changes_since(backend.now() - timedelta(hours=1), stall_minutes=30)
    assert [j.job for j in changes.stalled] == [sc.trigger.job]
    watcher, store = _watcher(backend, tmp_path)
    (incident,) = watcher.poll_once()
    assert store.get_incident(incident).incident.trigger["kind"] == "job_stalled"
    assert store.get_incident(incident).incident.diagnosis["label"] == "training_hang"


def test_drains_and_cordons_are_decisions_not_alerts():
    cluster = Cluster.model_validate({"now": "2026-03-02T10:00:00Z", "nodes": [
        {"name": "a", "state": "drained", "reason": "crashcart inc-1: Xid 79"},
        {"name": "b", "state": "down", "reason": "Not responding"},
    ]})
    changes = FixtureBackend(cluster, "slurm").changes_since(cluster.now - timedelta(hours=1), 45)
    assert [n.node for n in changes.nodes_down] == ["b"]
    (d,) = detect(changes, WatchSettings())
    assert d.trigger == {"kind": "node_alert", "job": None, "node": "b", "text": None}


class Unreachable(FixtureBackend):
    """A login node that is down for the first poll, back for the next."""

    def __init__(self, cluster, kind):
        super().__init__(cluster, kind)
        self.down = True

    def changes_since(self, since, stall_minutes):
        if self.down:
            self.down = False
            raise ToolError("cannot run sacct on ssh login1:22: connection refused")
        return super().changes_since(since, stall_minutes)


def test_an_unreachable_cluster_fails_one_poll_and_the_loop_goes_on(tmp_path):
    sc = load_scenario(OOM)
    watcher, store = _watcher(Unreachable(sc.cluster, sc.backend), tmp_path)
    errors, polls = [], []
    watcher.run(polls=2, on_poll=polls.append, on_error=errors.append)
    assert [str(e) for e in errors] == ["cannot run sacct on ssh login1:22: connection refused"]
    # The failed poll moved no cursor: the failure it missed is found by the next one.
    assert len(polls) == 1 and len(polls[0]) == 1
    assert store.get_incident(polls[0][0]).incident.trigger["job"] == sc.trigger.job


def test_without_an_error_handler_a_failed_poll_is_raised():
    sc = load_scenario(OOM)
    deps = make_deps(Unreachable(sc.cluster, sc.backend), PlaybookPolicy(), load_policy(EVAL_GUARD),
                     IncidentStore(":memory:"), cluster="c1")
    with pytest.raises(ToolError, match="connection refused"):
        Watcher(deps, cluster="c1", settings=WatchSettings(interval_s=0)).run(polls=1)


def test_crash_points_are_named_and_inert_unless_asked_for(monkeypatch):
    from crashcart.agent import crashpoints

    monkeypatch.delenv(crashpoints.ENV, raising=False)
    crashpoints.crash_point("before_act")  # unset: nothing happens
    monkeypatch.setenv(crashpoints.ENV, "after_action")
    crashpoints.crash_point("before_act")  # another point: nothing happens
    with pytest.raises(ValueError, match="unknown crash point 'befor_act'"):
        crashpoints.crash_point("befor_act")
