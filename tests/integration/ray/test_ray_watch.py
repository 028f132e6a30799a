"""crashcart watch on the real Ray head: a failure becomes one incident acted on once, a job
its owner stopped is no incident, and the recorded incident exports to a scenario that
`crashcart eval` passes."""

from __future__ import annotations

from datetime import timedelta

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


def test_watch_opens_one_incident_ignores_a_stopped_job_and_the_incident_exports(ray_lab: RayLab, tmp_path):
    backend = ray_lab.backend()
    store = IncidentStore(str(tmp_path / "watch.duckdb"))
    deps = make_deps(backend, make_policy("playbook"), policy_from_dict(ALLOW_ALL), store, cluster=CLUSTER)
    watcher = Watcher(deps, cluster=CLUSTER, settings=WatchSettings(interval_s=0))
    store.set_watch_cursor(CLUSTER, backend.now() - timedelta(seconds=5))

    stopped = ray_lab.submit(ray_lab.script("sleeper.py", SLEEPER))
    failed = ray_lab.submit(ray_lab.script("watched_actor.py", DYING_ACTOR))
    ray_lab.wait(stopped, "RUNNING")
    ray_lab.jobs.stop_job(stopped)  # its owner stopped it: a decision, not a failure
    assert ray_lab.wait(stopped) == "STOPPED"
    assert ray_lab.wait(failed) == "FAILED"
    new = None
    try:
        touched = watcher.poll_once()
        triggers = {store.get_incident(i).incident.trigger.get("job"): i for i in touched}
        assert stopped not in triggers
        assert failed in triggers
        detail = store.get_incident(triggers[failed])
        assert detail.incident.diagnosis["label"] == "ray_actor_died"
        resubmits = [a for a in detail.actions if a.tool == "resubmit"]
        assert len(resubmits) == 1 and resubmits[0].result["new_job"]
        new = resubmits[0].result["new_job"]
        assert ray_lab.jobs.get_job_info(new).metadata["crashcart_resubmit_of"] == failed

        # The next poll sees nothing new: the failure is claimed and not acted on again.
        again = [i for i in watcher.poll_once() if store.get_incident(i).incident.trigger.get("job") in (failed, stopped)]
        assert again == []

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
        stalled = ray_lab.wait_for("the silent job to count as stalled", lambda: {
            r.job for r in backend.changes_since(backend.now(), stall_minutes=0.1).stalled} or None, timeout=40)
        assert stalled == {silent}
    finally:
        ray_lab.stop(silent, chatty)


def test_crashcart_watch_with_a_ray_cluster_yaml_in_dry_run(ray_lab: RayLab, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    job = ray_lab.submit(ray_lab.script("cli_actor.py", DYING_ACTOR))
    assert ray_lab.wait(job) == "FAILED"
    config = tmp_path / "cluster.yaml"
    config.write_text(f"name: ray-local\nbackend: ray\nray: {{dashboard: '{ray_lab.head.dashboard_url}', "
                      f"gcs: '{ray_lab.head.gcs_address}'}}\nguard: {{mode: dry_run}}\n")
    before = ray_lab.snapshot()
    crashcart = str(Path(sys.executable).with_name("crashcart"))
    # Half a minute before this job ended (on a loaded machine the CLI may start a while after).
    import time

    lookback = (time.time() - ray_lab.jobs.get_job_info(job).end_time / 1000 + 30) / 60
    done = subprocess.run([crashcart, "watch", "--cluster", str(config), "--polls", "1", "--lookback-minutes", f"{lookback:.2f}",
                           "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **ray_lab.head.client_env()})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ray_actor_died" in done.stdout, done.stdout
    # The guard's dry run with no write permitted: the incident goes to a person, nothing is submitted.
    assert ray_lab.snapshot() == before
