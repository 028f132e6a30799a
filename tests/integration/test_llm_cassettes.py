"""Recorded model conversations (vcrpy) in each SDK's own wire format, replayed without a server:
tool calls, tool results, streaming, a rate limit and an overload, and OpenAI's Responses API
(tool calls as function_call items; its errors are the chat API's). Keys are filtered out of every cassette.

A missing cassette is recorded against the loopback server; in CI (record_mode none) an
unrecorded request is an error."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

vcr = pytest.importorskip("vcr")

from crashcart.agent.policies import make_policy  # noqa: E402
from crashcart.agent.policies.llm import LLMSettings, Retry  # noqa: E402
from crashcart.evals.runner import run_scenario  # noqa: E402
from crashcart.evals.scenario import load_scenario  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "harness"))
from llm_server import LoopbackModelServer  # noqa: E402

CASSETTES = Path(__file__).parents[1] / "cassettes"
SCENARIO = Path(__file__).parents[2] / "evals" / "scenarios" / "hardware" / "hw-ib-roce-port-flap-one-node-slurm.yaml"
KEYS = {"OPENAI_API_KEY": "sk-live-looking-openai-key", "ANTHROPIC_API_KEY": "sk-ant-live-looking-key"}


def _run(model: str, base: str, stream: bool = False, api: str = "chat"):
    settings = LLMSettings(base_url=base, retry=Retry(attempts=3, backoff_s=0.01), stream=stream, openai_api=api)
    return run_scenario(load_scenario(SCENARIO), str(SCENARIO), "llm", model=make_policy("llm", model, settings))


@pytest.mark.parametrize("model, stream, api", [
    ("openai:runbook", False, "chat"), ("anthropic:runbook", False, "chat"),
    ("openai:flaky", False, "chat"), ("anthropic:flaky", False, "chat"),
    ("openai:runbook", True, "chat"), ("anthropic:runbook", True, "chat"),
    ("openai:runbook", False, "responses")])
def test_a_recorded_conversation_replays_to_the_same_incident(model, stream, api, monkeypatch):
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    provider, brain = model.split(":")
    cassette = CASSETTES / f"{provider}{'-responses' if api == 'responses' else ''}-{brain}{'-stream' if stream else ''}.yaml"
    recording = not cassette.exists()
    if recording and os.environ.get("CI"):
        pytest.fail(f"{cassette} is missing: record it locally (run this test once) and commit it")
    # The default matcher includes the port, which a loopback server picks anew each time.
    tape = vcr.VCR(record_mode="once" if recording else "none", match_on=["method", "path"],
                   filter_headers=["authorization", "x-api-key"], decode_compressed_response=True)
    if recording:
        with LoopbackModelServer() as server, tape.use_cassette(str(cassette)):
            base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
            first = _run(model, base, stream, api)
    else:
        first = None
    # Replay: nothing listens on this port; every response comes from the cassette.
    with tape.use_cassette(str(cassette), allow_playback_repeats=False):
        again = _run(model, "http://127.0.0.1:9/v1" if provider == "openai" else "http://127.0.0.1:9", stream, api)
    text = cassette.read_text()
    assert not any(v in text for v in KEYS.values())
    assert again.passed and again.diagnosis == "ib_port_flapping" and again.error is None
    if first is not None:
        assert (first.diagnosis, first.remedy, first.tool_calls) == (again.diagnosis, again.remedy, again.tool_calls)
    if "flaky" in model:
        assert again.model["retries"] == 2 and "code: 429" in text and "code: 503" in text
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}[api] if provider == "openai" else "/v1/messages"
    assert path in text
    if api == "responses":  # tool calls and their results as the Responses API's own items
        assert '"type":"function_call"' in text and '"type":"function_call_output"' in text
    if stream:
        assert "text/event-stream" in text and ("data: [DONE]" in text or "message_stop" in text)
