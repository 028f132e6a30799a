"""Policies choose tool calls and conclude; they share the graph, tools and guard."""

from crashcart.agent.policies.base import Policy


def make_policy(name: str) -> Policy:
    if name == "playbook":
        from crashcart.agent.policies.playbook import PlaybookPolicy

        return PlaybookPolicy()
    raise ValueError(f"unknown policy {name!r} (known: playbook)")


__all__ = ["Policy", "make_policy"]
