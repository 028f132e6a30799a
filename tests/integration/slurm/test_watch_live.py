"""crashcart watch on the real cluster: a failure becomes one incident, acted on once, and the
recorded incident exports to a scenario that `crashcart eval` passes."""

from __future__ import annotations

from crashcart.agent.guard import policy_from_dict
from crashcart.agent.policies import make_policy
from crashcart.agent.runner import make_deps
from crashcart.agent.store import IncidentStore
from crashcart.agent.watch import Watcher, WatchSettings
from crashcart.evals.export import scenario_from_incident
from crashcart.evals.runner import run_scenario
from crashcart.evals.scenario import parse_scenario
from crashcart.tools.tape import Tape
from slurmlab import ALLOW_ALL, SlurmLab
from test_agent_local import CUDA_OOM


def test_watch_opens_one_incident_acts_once_and_the_incident_exports(lab: SlurmLab, tmp_path):
    backend = lab.backend()
    # The watch window starts with this test: earlier tests' failures (autonomous here, every
    # write permitted) would be acted on too, and their resubmits and drains left behind.
    lab.background_ended()
    since = lab.window_start()
    script = lab.script("watched.sh", CUDA_OOM)
    old = lab.sbatch(script, "-J", "watched-sft", "--gres=gpu:1", "-w", "n2", "-o", "watched-%j.out",
                     args=("--batch_size=8",))
    assert lab.wait_state(old, "FAILED") == "FAILED"
    store = IncidentStore(str(tmp_path / "watch.duckdb"))
    deps = make_deps(backend, make_policy("playbook"), policy_from_dict(ALLOW_ALL), store, cluster="crashcart-local")
    watcher = Watcher(deps, cluster="crashcart-local", settings=WatchSettings(interval_s=0))
    store.set_watch_cursor("crashcart-local", since)

    touched = watcher.poll_once()
    mine = [i for i in touched if store.get_incident(i).incident.trigger.get("job") == old]
    assert len(mine) == 1 and len(touched) == 1, [store.get_incident(i).incident.trigger for i in touched]
    detail = store.get_incident(mine[0])
    assert detail.incident.diagnosis["label"] == "cuda_oom"
    resubmits = [a for a in detail.actions if a.tool == "resubmit"]
    assert len(resubmits) == 1 and resubmits[0].result["new_job"]
    assert "--batch_size=4" in lab.job(resubmits[0].result["new_job"])["Command"]

    # The next poll sees nothing new: the failure is claimed, and is not acted on again.
    again = [i for i in watcher.poll_once() if store.get_incident(i).incident.trigger.get("job") == old]
    assert again == []

    last = {d.action_id: (d.tool, d.args, d.decision) for d in detail.decisions}
    text = scenario_from_incident(mine[0], Tape.from_jsonl(store.load_tape(mine[0])),
                                  detail.incident.diagnosis, list(last.values()))
    exported = parse_scenario(text, "exported-live.yaml")
    assert "CUDA out of memory" in exported.cluster.job(old).log
    result = run_scenario(exported, "exported-live.yaml")
    assert result.passed, result.failures
