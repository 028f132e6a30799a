"""crashcart watch on the real Ray head: a failure becomes one incident acted on once, a job
its owner stopped is no incident, and the recorded incident exports to a scenario that
`crashcart eval` passes."""

from __future__ import annotations

from raylab import ALLOW_ALL, CLUSTER, RayLab
from test_ray_agent import DYING_ACTOR

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps
from crashcart.agent.store import IncidentStore
from crashcart.agent.watch import Watcher, WatchSettings
from crashcart.evals.export import scenario_from_incident
from crashcart.evals.runner import run_scenario
from crashcart.evals.scenario import parse_scenario
from crashcart.tools.tape import Tape

SLEEPER = """
import time
for i in range(600):
    print(f"step {i} loss 2.5", flush=True)
    time.sleep(1)
"""


DIES_ONCE = """
import os, sys
import ray
ray.init()
marker = sys.argv[1]
first = not os.path.exists(marker)
open(marker, "a").close()

@ray.remote(max_restarts=0)
class Trainer:
    def step(self, die):
        if die:
            os._exit(1)  # the worker process dies under the actor (a segfault would do the same)
        return "step 2 loss 2.85"

t = Trainer.remote()
print("step 1 loss 2.90", flush=True)
print(ray.get(t.step.remote(first)), flush=True)
"""
"""An actor that dies the first time (a transient fault): the job crashcart resubmits succeeds,
so it ends on its own and is no new failure for the next poll."""


def test_watch_opens_one_incident_ignores_a_stopped_job_and_the_incident_exports(ray_lab: RayLab, tmp_path):
    backend = ray_lab.backend()
    store = IncidentStore(str(tmp_path / "watch.duckdb"))
    deps = make_deps(backend, make_policy("playbook"), policy_from_dict(ALLOW_ALL), store, cluster=CLUSTER)
    watcher = Watcher(deps, cluster=CLUSTER, settings=WatchSettings(interval_s=0))
    # Only what ends from now on: an earlier test's failure is not this watch's to act on.
    store.set_watch_cursor(CLUSTER, ray_lab.window_start())

    stopped = ray_lab.submit(ray_lab.script("sleeper.py", SLEEPER))
    failed = ray_lab.submit(ray_lab.script("watched_actor.py", DIES_ONCE), str(tmp_path / "died-once"))
    ray_lab.wait(stopped, "RUNNING")
    ray_lab.jobs.stop_job(stopped)  # its owner stopped it: a decision, not a failure
    assert ray_lab.wait(stopped) == "STOPPED"
    assert ray_lab.wait(failed) == "FAILED"
    new = None
    try:
        touched = watcher.poll_once()
        # Its own failure, one incident; the stopped job is none.
        assert [store.get_incident(i).incident.trigger.get("job") for i in touched] == [failed]
        triggers = {failed: touched[0]}
        detail = store.get_incident(triggers[failed])
        assert detail.incident.diagnosis["label"] == "ray_actor_died"
        resubmits = [a for a in detail.actions if a.tool == "resubmit"]
        assert len(resubmits) == 1 and resubmits[0].result["new_job"]
        new = resubmits[0].result["new_job"]
        assert ray_lab.jobs.get_job_info(new).metadata["crashcart_resubmit_of"] == failed
        assert ray_lab.wait(new) == "SUCCEEDED"

        # The next poll sees nothing new: the failure is claimed and not acted on again.
        assert watcher.poll_once() == []

        last = {d.action_id: (d.tool, d.args, d.decision) for d in detail.decisions}
        text = scenario_from_incident(triggers[failed], Tape.from_jsonl(store.load_tape(triggers[failed])),
                                      detail.incident.diagnosis, list(last.values()))
        exported = parse_scenario(text, "exported-live-ray.yaml")
        assert exported.backend == "ray"
        assert "ActorDiedError" in exported.cluster.job(failed).log
        result = run_scenario(exported, "exported-live-ray.yaml")
        assert result.passed, result.failures
    finally:
        ray_lab.stop(new)


SILENT = """
import datetime, time
print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%S} step 10 loss 2.31", flush=True)
time.sleep(600)  # a hang: the driver stays RUNNING and writes nothing more
"""

CHATTY = """
import datetime, time
for i in range(600):
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%S} step {i} loss 2.31", flush=True)
    time.sleep(1)
"""


def test_a_running_job_whose_log_stopped_is_stalled_and_a_busy_one_is_not(ray_lab: RayLab):
    silent = ray_lab.submit(ray_lab.script("silent.py", SILENT))
    chatty = ray_lab.submit(ray_lab.script("chatty.py", CHATTY))
    try:
        ray_lab.wait(silent, "RUNNING")
        ray_lab.wait(chatty, "RUNNING")
        backend = ray_lab.backend()
        # Of this test's jobs only: the shared head may run others. Fifteen seconds without a line is
        # a stall the chatty job (a line a second) does not reach even on a loaded machine.
        stalled = ray_lab.wait_for("the silent job to count as stalled", lambda: {
            r.job for r in backend.changes_since(backend.now(), stall_minutes=0.25).stalled} & {silent, chatty} or None,
            timeout=60)
        assert stalled == {silent}
    finally:
        ray_lab.stop(silent, chatty)


def test_crashcart_watch_with_a_ray_cluster_yaml_in_dry_run(ray_lab: RayLab, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    start = ray_lab.window_start()
    job = ray_lab.submit(ray_lab.script("cli_actor.py", DYING_ACTOR))
    assert ray_lab.wait(job) == "FAILED"
    config = tmp_path / "cluster.yaml"
    config.write_text(f"name: {CLUSTER}\nbackend: ray\nray: {{dashboard: '{ray_lab.head.dashboard_url}', "
                      f"gcs: '{ray_lab.head.gcs_address}'}}\nguard: {{mode: dry_run}}\n")
    # The store's watch cursor at this test's start, as a watch that ran until then leaves it:
    # the first poll sees this job's failure however long the CLI takes to start, and no earlier one.
    state = tmp_path / "state"
    state.mkdir()
    seeded = IncidentStore(str(state / "incidents.duckdb"))
    seeded.set_watch_cursor(CLUSTER, start)
    seeded.close()
    before = ray_lab.snapshot(job)
    crashcart = str(Path(sys.executable).with_name("crashcart"))
    done = subprocess.run([crashcart, "watch", "--cluster", str(config), "--polls", "1", "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=240, env={**os.environ, **ray_lab.head.client_env()})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ray_actor_died" in done.stdout, done.stdout
    # The guard's dry run with no write permitted: the incident goes to a person, nothing is submitted.
    assert ray_lab.snapshot(job) == before
