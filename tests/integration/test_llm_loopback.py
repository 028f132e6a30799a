"""The llm policy through the official openai and anthropic SDKs, against a loopback server that
speaks both wire formats: a model that follows the runbook, and a hostile one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crashcart.agent.guard import load_policy
from crashcart.agent.policies import make_policy
from crashcart.agent.policies.llm import LLMSettings, Retry
from crashcart.evals.runner import EVAL_GUARD, run_scenario
from crashcart.evals.scenario import load_scenario

sys.path.insert(0, str(Path(__file__).parents[1] / "harness"))
from llm_server import LoopbackModelServer  # noqa: E402

SUITE = Path(__file__).parents[2] / "evals" / "scenarios"
# One per backend and several families: a job's own fault, a bad node, a fabric, a question.
SCENARIOS = [
    "memory/k8s-oomkilled-tokenize-mt5", "hardware/boot-fail-power-save-resume-timeout",
    "hardware/hw-ib-roce-port-flap-one-node-slurm", "distributed/dist-childfailed-ecc-counters-slurm",
    "ray/ray-gcs-head-oom-all-jobs-fail", "scheduling/sch-k8s-pvc-provisioning-quota",
    "hardware/hw-pcie-link-gen1-x8-ray-stalled", "capacity/capacity-forecast-nlp-h100",
]
TAKEN = {"allow", "dry_run", "needs_approval"}


@pytest.fixture(scope="module")
def server():
    with LoopbackModelServer() as s:
        yield s


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")


def policy(server, provider: str, brain: str, name: str = "llm", **settings):
    base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    return make_policy(name, f"{provider}:{brain}", LLMSettings(base_url=base, **settings))


def run(sc_id: str, pol, guard=None):
    path = SUITE / f"{sc_id}.yaml"
    scenario = load_scenario(path)
    if guard is not None:
        scenario = scenario.model_copy(update={"guard": guard.model_dump(mode="json")})
    return scenario, run_scenario(scenario, str(path), "llm", model=pol)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_model_following_the_runbook_passes_through_either_sdk(server, provider):
    before = len(server.state.requests)
    results = [run(s, policy(server, provider, "runbook"))[1] for s in SCENARIOS]
    assert [(r.id, r.failures) for r in results if not r.passed] == []
    assert all(r.decided_by == f"llm:{provider}:runbook" and r.model["requests"] >= 2 for r in results)
    sent = server.state.requests[before:]
    assert {q["api"] for q in sent} == {provider}
    assert all("test" in (q["auth"] or "") for q in sent)  # the SDK sent the key from its own variable


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("guard", ["default", "eval"])
def test_a_hostile_model_writes_nothing_the_guard_and_the_investigation_do_not_allow(server, provider, guard):
    guard_policy = load_policy(None) if guard == "default" else load_policy(EVAL_GUARD)
    for sc_id in SCENARIOS:
        scenario, r = run(sc_id, policy(server, provider, "hostile"), guard_policy)
        assert r.error is None and r.diagnosis is not None, sc_id  # every incident ends in a result
        playbook = run_scenario(scenario, sc_id)  # what the playbooks do on the same incident
        backed = {(a.tool, a.args.get("node") or a.args.get("job")) for a in playbook.actions}
        for a in r.actions:
            if a.decision in TAKEN and a.tool not in {"escalate", "notify"}:
                assert (a.tool, a.args.get("node") or a.args.get("job")) in backed, (sc_id, a)
                assert "LD_PRELOAD" not in str(a.args) and "entrypoint" not in str(a.args)
        assert r.violations == [], sc_id
        drains = [a for a in r.actions if a.tool == "node_drain"]
        assert len(drains) >= 2 and sum(a.decision in TAKEN for a in drains) <= 1, sc_id


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_model_that_follows_the_runbook_adds_no_forbidden_action_of_its_own(server, provider):
    # The one scenario where the playbooks themselves take a forbidden action (a drain after a
    # port flap that has since recovered): llm and auto may inherit it, never add to it.
    sc_id = "holdout/b3a-slurm-single-port-flap-recovered"
    scenario = load_scenario(SUITE / f"{sc_id}.yaml")
    inherited = set(run_scenario(scenario, sc_id).violations)
    for name in ("llm", "auto"):
        _, r = run(sc_id, policy(server, provider, "runbook", name=name))
        assert r.error is None and set(r.violations) <= inherited, (name, r.violations)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_streamed_answer_is_put_back_together(server, provider):
    results = [run(s, policy(server, provider, "runbook", stream=True))[1] for s in SCENARIOS[1:4]]
    assert [(r.id, r.failures) for r in results if not r.passed] == []
    assert all(r.model["tokens_in"] > 0 and r.model["tokens_out"] > 0 for r in results)
    _, r = run(SCENARIOS[2], policy(server, provider, "hostile", stream=True))
    assert not r.violations and any("LD_PRELOAD" in a.reason for a in r.actions if a.decision == "deny")
    # The words of a streamed answer reach a live view piece by piece, as they arrive.
    from crashcart.agent.policies.llm import ToolDef, make_model

    base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    model = make_model(f"{provider}:runbook", LLMSettings(base_url=base, stream=True))
    pieces: list[str] = []
    model.on_text = pieces.append
    resp = model.request([{"role": "system", "content": "s"}, {"role": "user", "content": "Trigger: job_failed."}],
                         [ToolDef("playbook_candidates", "the runbook", {"type": "object", "properties": {}})])
    assert resp.text and "".join(pieces) == resp.text


def test_the_responses_api_carries_the_same_conversation(server):
    before = len(server.state.requests)
    pol = make_policy("llm", "openai:runbook", LLMSettings(base_url=server.openai_base_url, openai_api="responses"))
    for sc_id in SCENARIOS[1:4]:
        _, r = run(sc_id, pol)
        assert r.passed, (sc_id, r.failures)
    assert {q["api"] for q in server.state.requests[before:]} == {"responses"}
    _, r = run(SCENARIOS[2], make_policy("llm", "openai:hostile",
                                         LLMSettings(base_url=server.openai_base_url, openai_api="responses")))
    assert not r.violations and not any(a.decision != "deny" and a.tool == "node_drain" for a in r.actions)


def test_rate_limits_and_overload_are_retried_and_an_outage_escalates(server):
    fast = {"retry": Retry(attempts=3, backoff_s=0.01)}
    _, r = run(SCENARIOS[0], policy(server, "openai", "flaky", **fast))
    assert r.passed and r.model["retries"] >= 2
    _, r = run(SCENARIOS[0], policy(server, "anthropic", "down", **fast))
    assert r.error is None and r.remedy == "escalate_infra" and "HTTP 503" in r.decided_by
    assert [a.tool for a in r.actions] == ["escalate"]


def test_auto_keeps_the_playbooks_answer_and_says_who_decided(server):
    for sc_id in SCENARIOS[:4]:
        scenario, r = run(sc_id, policy(server, "openai", "hostile", name="auto"))
        if scenario.trigger.kind == "chat":  # a person's question goes to the model, contained as ever
            assert r.decided_by == "llm:openai:hostile: the trigger is a person's question" and not r.violations
        else:
            assert r.passed and r.decided_by.startswith("playbook:"), (sc_id, r.decided_by)


def _cli(*args: str, server) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test", "COLUMNS": "200"}
    if server is not None:
        env.update(OPENAI_BASE_URL=server.openai_base_url, ANTHROPIC_BASE_URL=server.anthropic_base_url)
    return subprocess.run([sys.executable, "-m", "crashcart.agent.interfaces.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("model", ["openai:hostile", "anthropic:runbook"])
def test_crashcart_eval_with_a_model_scores_like_the_playbook(server, model, tmp_path):
    out = _cli("eval", str(SUITE / "memory"), "--policy", "llm", "--model", model, "--json", str(tmp_path / "r.json"),
               server=server)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "0 forbidden actions, 0 errors" in out.stdout
    assert "the model, by family" in out.stdout and "tokens in" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_crashcart_eval_auto_lists_the_incidents_it_handed_to_the_model(server, tmp_path):
    folder = SUITE / "capacity"
    out = _cli("eval", str(folder), "--policy", "auto", "--model", "openai:runbook", server=server)
    assert out.returncode == 0, out.stderr[-2000:]
    questions = [p.stem for p in sorted(folder.glob("*.yaml")) if load_scenario(p).trigger.kind == "chat"]
    handed = re.search(r"handed to the model \((\d+) of (\d+)\)", out.stdout)
    assert questions and handed and len(questions) <= int(handed[1]) < int(handed[2])
    listed = out.stdout[handed.start():]
    assert all(q in listed for q in questions) and listed.count("person's question") == len(questions)


def test_investigate_shows_the_model_turn_by_turn(server, tmp_path):
    sc = SUITE / f"{SCENARIOS[2]}.yaml"
    out = _cli("investigate", str(sc), "--policy", "llm", "--model", "openai:hostile", "--state-dir",
               str(tmp_path), server=server)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "model turn 1" in text and "admin alice APPROVED" in text and "unknown tool 'rm_rf_everything'" in text
    assert "decided by llm:openai:hostile" in text and "deny" in text
    # Afterwards the store has the turns: `incidents show` prints them, and `replay` plays them
    # back (with no server: nothing is asked of a model).
    from crashcart.agent.store import IncidentStore

    with IncidentStore(str(tmp_path / "incidents.duckdb")) as store:
        (incident,) = store.list_incidents()
    shown = _cli("incidents", "show", incident.id, "--state-dir", str(tmp_path), server=server)
    assert shown.returncode == 0 and "the model's investigation" in shown.stdout, shown.stderr[-2000:]
    assert "model turn 1 (openai:hostile" in shown.stdout and "unknown tool 'rm_rf_everything'" in shown.stdout
    replayed = _cli("replay", incident.id, "--state-dir", str(tmp_path), server=None)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr[-2000:]
    assert "decides exactly as it did" in replayed.stdout and "replayed with llm (" in replayed.stdout


def test_a_model_name_that_cannot_work_is_a_clear_error(server):
    out = _cli("eval", str(SUITE / "memory"), "--policy", "llm", "--model", "gpt-4", server=server)
    assert out.returncode == 2 and "provider:model" in out.stdout and "Traceback" not in out.stderr
    out = _cli("eval", str(SUITE / "memory"), "--policy", "llm", server=server)
    assert out.returncode == 2 and "needs --model" in out.stdout
