"""A model's turns after the fact and as they happen: the store keeps them, `incidents show`
prints them, `replay` plays them back instead of asking the playbooks (or a provider), and
`investigate` prints each turn before the next request goes out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from crashcart.agent.guard import load_policy
from crashcart.agent.interfaces.incident_view import render_incident_detail
from crashcart.agent.interfaces.model_turns import LiveTurns
from crashcart.agent.interfaces.transcript import _trim
from crashcart.agent.policies.auto import AutoPolicy
from crashcart.agent.policies.llm import FunctionModel, LLMPolicy, ModelResponse, ScriptedModel, ToolCallRequest
from crashcart.agent.replay import replay_incident
from crashcart.agent.runner import make_deps, start_incident
from crashcart.agent.store import IncidentStore
from crashcart.evals.runner import EVAL_GUARD
from crashcart.evals.scenario import load_scenario
from crashcart.tools.backends.fixture import FixtureBackend
from helpers import GOOD_SCENARIO

OOM_LINE = ("[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 2 has a total "
            "capacity of 79.15 GiB of which 1.91 GiB is free. Including non-PyTorch memory, this process has "
            "77.20 GiB memory in use.")
READS = [("sacct", {"job": "90210"}), ("get_logs", {"job": "90210"})]
# The model's own reading, unlike the playbooks' (cuda_oom): a replay by the playbooks would differ.
OWN = {"family": "memory", "label": None, "cause": "activation memory at batch 8 on a long sequence",
       "root_cause": "job:90210", "remedy": "escalate_user", "confidence": 0.6, "evidence": [OOM_LINE],
       "actions": []}


@pytest.fixture
def scenario(tmp_path: Path):
    p = tmp_path / "good.yaml"
    p.write_text(GOOD_SCENARIO)
    return load_scenario(p)


def record(scenario, policy, store):
    deps = make_deps(FixtureBackend(scenario.cluster, scenario.backend), policy, load_policy(EVAL_GUARD), store,
                     cluster=scenario.id)
    return start_incident(deps, scenario.trigger.model_dump(), cluster=scenario.id, source="test", record=True), deps


def test_the_store_keeps_the_turns_and_incidents_show_prints_each_call_beside_its_result(scenario):
    store = IncidentStore(":memory:")
    run, _ = record(scenario, LLMPolicy(ScriptedModel([READS, "Thinking out loud."], conclusion=OWN)), store)
    notes = store.policy_notes(run.incident_id)
    assert [n["kind"] for n in notes] == ["turn", "turn", "turn", "conclusion"]
    assert notes == [n for n in run.state["policy_log"]]  # what the graph saw is what was kept
    console = Console(record=True, width=200)
    render_incident_detail(console, store.get_incident(run.incident_id), store.incident_history(run.incident_id),
                           store.deliveries(run.incident_id), notes)
    text = console.export_text()
    assert "model turn 1 (test:scripted" in text and "model turn 3" in text and "Thinking out loud." in text
    # Each call, then the excerpt of what it returned, in the order the model asked.
    call = text.index('-> get_logs({"job": "90210"})')
    assert text.index("#2 get_logs: ") > call > text.index('-> sacct({"job": "90210"})')
    assert "OutOfMemoryError" in text[call:]


def test_replaying_a_model_decided_incident_plays_its_turns_back_not_the_playbooks(scenario):
    store = IncidentStore(":memory:")
    run, _ = record(scenario, LLMPolicy(ScriptedModel([READS], conclusion=OWN)), store)
    assert run.state["diagnosis"]["remedy"] == "escalate_user"  # the playbooks say resubmit_with_changes
    result = replay_incident(store, run.incident_id)  # no model or provider is given: the store has the turns
    assert result.differences == [] and result.policy == "llm (2 recorded model turns of test:scripted)"
    assert result.replayed["remedy"] == "escalate_user"
    # A recording that ends early shows where the agent now goes further than it did.
    with store.lock:
        store._con.execute("DELETE FROM policy_notes WHERE incident_id = ? AND seq > 1", [run.incident_id])
    result = replay_incident(store, run.incident_id)
    assert "remedy: was 'escalate_user', now 'escalate_infra'" in result.differences
    assert "the recording has no model turn 2" in result.replayed["decided_by"]


def test_an_auto_incident_the_model_decided_replays_through_auto(scenario):
    chat = scenario.model_copy(update={"trigger": scenario.trigger.model_copy(
        update={"kind": "chat", "text": "why did 90210 die?"})})
    store = IncidentStore(":memory:")
    run, _ = record(chat, AutoPolicy(LLMPolicy(ScriptedModel([], conclusion=OWN))), store)
    assert run.state["diagnosis"]["decided_by"].startswith("llm:test:scripted: the trigger is a person's question")
    result = replay_incident(store, run.incident_id)
    assert result.differences == [] and result.policy.startswith("auto (1 recorded model turns")
    assert result.replayed["decided_by"] == run.state["diagnosis"]["decided_by"]


def test_a_playbook_incident_still_replays_with_the_playbooks(scenario):
    from crashcart.agent.policies.playbook import PlaybookPolicy

    store = IncidentStore(":memory:")
    run, _ = record(scenario, PlaybookPolicy(), store)
    assert store.policy_notes(run.incident_id) == []
    result = replay_incident(store, run.incident_id)
    assert result.differences == [] and result.policy == "playbook"


def test_investigate_prints_each_turn_and_its_results_before_the_next_request(scenario):
    console = Console(record=True, width=200)
    seen_at_request: list[str] = []

    def model(messages, tools, choice):
        seen_at_request.append(console.export_text(clear=False))
        n = len(seen_at_request)
        if n == 1:
            return ModelResponse(text="First the accounting and the log.", tool_calls=[
                ToolCallRequest(id="a", name="sacct", arguments='{"job": "90210"}'),
                ToolCallRequest(id="b", name="get_logs", arguments='{"job": "90210"}')])
        if n == 2:
            return ModelResponse(text="A CUDA OOM; I am sure enough.", tool_calls=[
                ToolCallRequest(id="c", name="conclude", arguments=json.dumps(OWN))])
        raise AssertionError("asked a third time")

    live = LiveTurns(LLMPolicy(FunctionModel(model)), console, _trim)
    run, _ = record(scenario, live, IncidentStore(":memory:"))
    assert run.state["diagnosis"]["remedy"] == "escalate_user"
    first, second = seen_at_request
    assert "model turn" not in first
    # By the second request, the first turn, its calls and what they returned are on the screen.
    assert "model turn 1 (function:test" in second and "First the accounting and the log." in second
    assert second.index("-> get_logs(") < second.index("#2 get_logs: ") and "OutOfMemoryError" in second
    final = console.export_text()
    assert "model turn 2" in final and '-> conclude({"family": "memory"' in final and "concluded" in final


def test_the_live_view_hears_a_streamed_answer_while_it_arrives(scenario):
    heard: list[str] = []

    class Streaming(ScriptedModel):
        on_text = None

        def request(self, *args, **kwargs):
            assert self.on_text is not None  # the live view listens while the request is out
            self.on_text("Reading the ")
            heard.append("asked")
            return super().request(*args, **kwargs)

    model = Streaming([READS], conclusion=OWN)
    console = Console(record=True, width=200)
    run, _ = record(scenario, LiveTurns(LLMPolicy(model), console, _trim), IncidentStore(":memory:"))
    assert heard == ["asked", "asked"] and model.on_text is None  # and it stops listening after
    assert run.state["diagnosis"]["remedy"] == "escalate_user"
