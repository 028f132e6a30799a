"""Which model, where it is, what it may spend: settings, prices and making a model.

A model is named `provider:model` (`openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`,
`openai:local-name` with a base URL). Endpoints and keys come from the SDKs' own
environment variables (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL,
ANTHROPIC_API_KEY) unless cluster.yaml's `llm:` section names them. A key is never
written in a file: the section names the variable or the file that holds it.
"""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crashcart.agent.policies.llm._messages import Model
from crashcart.tools.yamlio import FileError, describe_validation_error, read_yaml_file

PRICES_PATH = Path(__file__).with_name("prices.yaml")
PROVIDERS = ("openai", "anthropic")


class LLMConfigError(FileError, ValueError):
    """A model name or an llm section is wrong; the message says which and where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    """When an investigation by a model stops: whichever runs out first."""

    max_tool_calls: int = Field(40, ge=1)
    max_tokens: int = Field(300_000, ge=1000)
    """Input plus output tokens over all requests of one incident."""
    max_seconds: float = Field(300, gt=0)
    max_cost_usd: float = Field(2.0, ge=0)
    max_requests: int = Field(40, ge=2)
    context_chars: int = Field(60_000, ge=4000)
    """How much of the observations the model is shown per request; the oldest are trimmed first."""
    result_chars: int = Field(6_000, ge=500)
    """One tool result, as the model sees it (the tool itself caps at 12,000)."""


class Retry(_Strict):
    attempts: int = Field(4, ge=1, le=10)
    """Requests per turn, the first included, for rate limits, 5xx, timeouts and lost connections."""
    backoff_s: float = Field(1.0, ge=0)
    """The first wait; it doubles after each failure."""
    max_backoff_s: float = Field(20.0, ge=0)


class LLMSettings(_Strict):
    """cluster.yaml's `llm:` section (every field optional)."""

    model: str | None = None
    """provider:model; the CLI's --model wins."""
    base_url: str | None = None
    """Default: the SDK's own variable (OPENAI_BASE_URL, ANTHROPIC_BASE_URL), else the provider."""
    api_key_env: str | None = None
    """The environment variable holding the key (default: OPENAI_API_KEY / ANTHROPIC_API_KEY)."""
    api_key_file: str | None = None
    """Or a file holding it (first line); the key itself never goes in cluster.yaml."""
    timeout_s: float = Field(60, gt=0)
    openai_api: Literal["chat", "responses"] = "chat"
    """openai models: chat completions (every OpenAI-compatible server has it) or the Responses API."""
    stream: bool = False
    """Ask for the answer as a stream (server-sent events) and put it back together."""
    max_output_tokens: int = Field(2048, ge=16)
    """Per model turn."""
    budget: Budget = Budget()
    retry: Retry = Retry()
    handover_confidence: float = Field(0.6, ge=0, le=1)
    """`auto`: below this, a playbook verdict goes to the model."""

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"api_key", "key", "token"} & set(data):
            raise ValueError("secrets never go in the config file: name the variable (api_key_env) "
                             "or the file (api_key_file) that holds the key")
        return data


def parse_settings(data: Any, source: str = "llm") -> LLMSettings:
    if data is None:
        return LLMSettings()
    if not isinstance(data, dict):
        raise LLMConfigError(source, "the llm section is one mapping (model, base_url, api_key_env, budget, ...)")
    try:
        return LLMSettings.model_validate(data)
    except ValidationError as e:
        raise LLMConfigError(source, describe_validation_error(e, data)) from None


def split_model_name(name: str) -> tuple[str, str]:
    provider, sep, model = (name or "").partition(":")
    if not sep or not model or provider not in PROVIDERS:
        raise LLMConfigError("--model", f"{name!r}: name a model as provider:model, provider one of "
                                        f"{', '.join(PROVIDERS)} (e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5, "
                                        "openai:my-local-model with OPENAI_BASE_URL)")
    return provider, model


def _api_key(settings: LLMSettings) -> str | None:
    if settings.api_key_file:
        path = Path(settings.api_key_file).expanduser()
        try:
            return path.read_text(encoding="utf-8").strip().splitlines()[0]
        except (OSError, IndexError):
            raise LLMConfigError(str(path), "api_key_file: cannot read a key from it") from None
    if settings.api_key_env:
        key = os.environ.get(settings.api_key_env)
        if not key:
            raise LLMConfigError("llm.api_key_env", f"the environment variable {settings.api_key_env} is not set")
        return key
    return None  # the SDK reads its own variable


def make_model(name: str, settings: LLMSettings | None = None) -> Model:
    """A model from its name; the SDK is imported when the first request is made."""
    settings = settings or LLMSettings()
    provider, model = split_model_name(name)
    key = _api_key(settings)
    if provider == "openai":
        from crashcart.agent.policies.llm.providers.openai import OpenAIChatModel

        base = settings.base_url or os.environ.get("OPENAI_BASE_URL")
        if settings.openai_api == "responses":
            from crashcart.agent.policies.llm.providers.openai_responses import OpenAIResponsesModel

            return OpenAIResponsesModel(model, base_url=base, api_key=key, timeout_s=settings.timeout_s)
        return OpenAIChatModel(model, base_url=base, api_key=key, timeout_s=settings.timeout_s, stream=settings.stream)
    from crashcart.agent.policies.llm.providers.anthropic import AnthropicModel

    base = settings.base_url or os.environ.get("ANTHROPIC_BASE_URL")
    return AnthropicModel(model, base_url=base, api_key=key, timeout_s=settings.timeout_s,
                          stream=settings.stream)


class Price(_Strict):
    model: str
    input: float = Field(ge=0)
    output: float = Field(ge=0)


class PriceTable(_Strict):
    prices: tuple[Price, ...]

    def price(self, model: str) -> Price | None:
        return next((p for p in self.prices if fnmatchcase(model, p.model)), None)

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """US dollars, or None when the model is not in the table."""
        p = self.price(model)
        if p is None:
            return None
        return (input_tokens * p.input + output_tokens * p.output) / 1_000_000


@lru_cache(maxsize=4)
def load_prices(path: str | None = None) -> PriceTable:
    source = path or str(PRICES_PATH)
    data = read_yaml_file(source)
    try:
        return PriceTable.model_validate(data)
    except ValidationError as e:
        raise LLMConfigError(source, describe_validation_error(e, data)) from None
