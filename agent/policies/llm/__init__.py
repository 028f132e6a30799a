"""The `llm` policy: a model investigates with crashcart's typed tools, under the same guard.

    from crashcart.agent.policies.llm import LLMPolicy, make_model
    policy = LLMPolicy(make_model("openai:gpt-4.1"))

Providers are official SDKs (the `llm` extra), imported when the first request is made.
The fakes (`ScriptedModel`, `FunctionModel`) need neither a network nor a key.
"""

from crashcart.agent.policies.llm._messages import Model, ModelError, ModelResponse, ToolCallRequest, ToolDef, Usage
from crashcart.agent.policies.llm._policy import LLMPolicy, own_notes, usage_of
from crashcart.agent.policies.llm._settings import (
    Budget, LLMConfigError, LLMSettings, Retry, load_prices, make_model, parse_settings, split_model_name,
)
from crashcart.agent.policies.llm.fakes import FunctionModel, RecordedModel, ScriptedModel

__all__ = [
    "Budget", "FunctionModel", "LLMConfigError", "LLMPolicy", "LLMSettings", "Model", "ModelError",
    "ModelResponse", "RecordedModel", "Retry", "ScriptedModel", "ToolCallRequest", "ToolDef", "Usage", "load_prices",
    "make_model", "own_notes", "parse_settings", "split_model_name", "usage_of",
]
