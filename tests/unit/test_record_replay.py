"""Record every tool call to a tape, replay it, and export it as a scenario."""

import pytest

from crashcart.agent.guard import load_policy
from crashcart.agent.policies.playbook import PlaybookPolicy
from crashcart.agent.replay import replay_incident
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.evals.export import scenario_from_incident
from crashcart.evals.runner import EVAL_GUARD, run_scenario
from crashcart.evals.scenario import BUNDLED_DIR, load_scenario, parse_scenario
from crashcart.playbooks import KnowledgeBase, load_playbooks
from crashcart.tools._spec import REGISTRY, ToolError
from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.tape import ReplayBackend, Tape

XID = BUNDLED_DIR / "hardware" / "xid79-fell-off-bus-h100-4node.yaml"


def _record(store, path=XID, policy=None):
    sc = load_scenario(path)
    deps = make_deps(FixtureBackend(sc.cluster, sc.backend), policy or PlaybookPolicy(), load_policy(EVAL_GUARD),
                     store, cluster=sc.id)
    run = start_incident(deps, sc.trigger.model_dump(), cluster=sc.id, source="test", record=True)
    return sc, run


def test_a_recorded_incident_replays_to_the_same_decisions():
    store = IncidentStore()
    sc, run = _record(store)
    tape = Tape.from_jsonl(store.load_tape(run.incident_id))
    calls = [e.tool for e in tape.calls()]
    assert calls[:2] == ["sacct", "get_logs"] and "kernel_log" in calls and "node_drain" in calls
    result = replay_incident(store, run.incident_id)
    assert result.differences == []
    assert result.replayed["label"] == "gpu_fallen_off_bus"


def test_replay_shows_where_a_changed_agent_decides_differently():
    store = IncidentStore()
    _, run = _record(store)
    # The same tape under an agent that no longer knows Xid 79: the cause is lost, and it shows.
    kb = load_playbooks()
    weaker = KnowledgeBase({k: v for k, v in kb.entries.items() if k != "gpu_fallen_off_bus"})
    import crashcart.agent.replay as replay_module

    original = replay_module.make_policy
    replay_module.make_policy = lambda name: PlaybookPolicy(weaker)
    try:
        result = replay_incident(store, run.incident_id)
    finally:
        replay_module.make_policy = original
    assert any(d.startswith("label: was 'gpu_fallen_off_bus'") for d in result.differences)
    assert any("node_drain" in d and "was allow" in d for d in result.differences)


def test_replay_refuses_calls_the_recording_never_made():
    store = IncidentStore()
    _, run = _record(store)
    backend = ReplayBackend(Tape.from_jsonl(store.load_tape(run.incident_id)))
    spec = REGISTRY.get("kernel_log")
    with pytest.raises(ToolError, match="not on the tape"):
        backend.run(spec, spec.parse_args({"node": "gpu-b05", "tail": 7}))


def test_a_broken_tape_says_so():
    with pytest.raises(ValueError, match="not a crashcart tape"):
        Tape.from_jsonl("{\"tape\": 1}\n{not json", "broken.jsonl")
    store = IncidentStore()
    with pytest.raises(LookupError, match="not in the store"):
        replay_incident(store, "inc-missing")


def test_an_exported_incident_is_a_scenario_the_eval_accepts():
    store = IncidentStore()
    sc, run = _record(store)
    detail = store.get_incident(run.incident_id)
    last = {d.action_id: (d.tool, d.args, d.decision) for d in detail.decisions}
    text = scenario_from_incident(run.incident_id, Tape.from_jsonl(store.load_tape(run.incident_id)),
                                  detail.incident.diagnosis, list(last.values()))
    exported = parse_scenario(text, "exported.yaml")
    assert exported.expect.root_cause == "node:gpu-b07" and exported.expect.remedy == "exclude_node"
    assert "Xid" in exported.cluster.node("gpu-b07").kernel_log
    assert exported.cluster.job(sc.trigger.job).log.strip()
    result = run_scenario(exported, "exported.yaml")
    assert result.passed, result.failures
