"""Naming a model, finding its endpoint and key, and what it costs: errors say what and where."""

from __future__ import annotations

import subprocess
import sys

import pytest

from crashcart.agent.config import ClusterConfigError, load_cluster_config
from crashcart.agent.policies.llm import LLMConfigError, ModelError, load_prices, make_model, parse_settings
from crashcart.agent.policies.llm._messages import ToolDef


@pytest.mark.parametrize("name", ["gpt-4.1", "openai:", "azure:gpt-4", ":x", ""])
def test_a_model_name_is_provider_colon_model(name):
    with pytest.raises(LLMConfigError, match="provider:model"):
        make_model(name)


def test_endpoints_and_keys_come_from_the_sdk_variables_or_the_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    m = make_model("openai:local-llama")
    assert m.name == "openai:local-llama" and m._base_url == "http://127.0.0.1:8000/v1"
    keyfile = tmp_path / "key"
    keyfile.write_text("sk-from-file\n")
    m = make_model("anthropic:claude-sonnet-4-5", parse_settings({"api_key_file": str(keyfile)}))
    assert m._api_key == "sk-from-file"
    monkeypatch.delenv("CRASHCART_TEST_KEY", raising=False)
    with pytest.raises(LLMConfigError, match="CRASHCART_TEST_KEY is not set"):
        make_model("openai:gpt-4.1", parse_settings({"api_key_env": "CRASHCART_TEST_KEY"}))


def test_a_local_anthropic_endpoint_needs_no_key_and_a_missing_key_is_said_plainly(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8911")
    m = make_model("anthropic:local")
    assert m._base_url == "http://127.0.0.1:8911" and m._key() == "not-needed"
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    with pytest.raises(ModelError, match="no API key for anthropic:claude-x: set ANTHROPIC_API_KEY") as e:
        make_model("anthropic:claude-x")._key()
    assert not e.value.retriable


def test_making_a_model_imports_no_sdk_until_it_is_asked():
    code = ("import sys; from crashcart.agent.policies.llm import make_model; make_model('openai:x'); "
            "make_model('anthropic:y'); print([m for m in ('openai', 'anthropic') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tests_cannot_reach_a_real_provider():
    with pytest.raises(ModelError, match="blocked"):
        make_model("openai:gpt-4.1").request([{"role": "user", "content": "hi"}], [ToolDef("t", "d", {})])


def test_the_llm_section_of_cluster_yaml_is_strict_and_secret_free(tmp_path):
    base = "name: lab\nbackend: slurm\n"
    path = tmp_path / "cluster.yaml"
    path.write_text(base + "llm:\n  model: openai:gpt-4.1\n  budget: {max_tool_calls: 12}\n")
    config, _ = load_cluster_config(path)
    assert parse_settings(config.llm).budget.max_tool_calls == 12
    path.write_text(base + "llm:\n  modle: openai:gpt-4.1\n")
    with pytest.raises(ClusterConfigError, match=r"cluster.yaml: llm: .*modle: unknown field"):
        load_cluster_config(path)
    path.write_text(base + "llm:\n  api_key: sk-very-secret\n")
    with pytest.raises(ClusterConfigError) as e:
        load_cluster_config(path)
    assert "secrets never go in the config file" in str(e.value) and "sk-very-secret" not in str(e.value)


def test_prices_are_data_and_an_unknown_model_is_unpriced():
    table = load_prices()
    assert table.cost("openai:gpt-4.1-mini", 1_000_000, 1_000_000) == pytest.approx(2.0)
    assert table.cost("anthropic:claude-sonnet-4-5", 1_000_000, 0) == pytest.approx(3.0)
    assert table.cost("openai:some-new-model", 10, 10) is None
