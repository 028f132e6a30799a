"""Policies choose tool calls and conclude; they share the graph, tools and guard."""

from crashcart.agent.policies.base import Policy

POLICIES = ("playbook", "llm", "auto")


def make_policy(name: str, model: str | None = None, settings=None) -> Policy:
    """`llm` and `auto` need a model (provider:model, or a Model object such as a fake)."""
    if name == "playbook":
        from crashcart.agent.policies.playbook import PlaybookPolicy

        return PlaybookPolicy()
    if name in {"llm", "auto"}:
        from crashcart.agent.policies.llm import LLMConfigError, LLMPolicy, make_model

        if model is None:
            raise LLMConfigError("--model", f"policy {name!r} needs a model: --model provider:model "
                                            "(or llm.model in cluster.yaml)")
        llm = LLMPolicy(make_model(model, settings) if isinstance(model, str) else model, settings)
        if name == "llm":
            return llm
        from crashcart.agent.policies.auto import AutoPolicy

        return AutoPolicy(llm)
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")


__all__ = ["POLICIES", "Policy", "make_policy"]
