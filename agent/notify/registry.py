"""The notifier kinds by name, and reading the `notifiers:` list of a cluster config."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from crashcart.agent.notify.base import NotifierSettings
from crashcart.agent.notify.email import EmailSettings
from crashcart.agent.notify.slack import SlackSettings
from crashcart.agent.notify.store import StoreSettings
from crashcart.agent.notify.webhook import WebhookSettings
from crashcart.tools.yamlio import describe_validation_error

KINDS: dict[str, type[NotifierSettings]] = {
    "webhook": WebhookSettings,
    "email": EmailSettings,
    "store": StoreSettings,
    "slack": SlackSettings,
}


def parse_notifiers(entries: Any, slack_app: Any = None) -> list[NotifierSettings]:
    """Each entry validated by its kind's model; ValueError names `notifiers[i].field`.
    `slack_app`: cluster.yaml's `slack:` section, where a Slack notifier without a token of its
    own finds the bot token (agent/interfaces/slack/_settings.py)."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ValueError("notifiers: a list of notifiers, each with a kind")
    out: list[NotifierSettings] = []
    for i, entry in enumerate(entries):
        where = f"notifiers[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: a mapping with a kind ({', '.join(KINDS)})")
        kind = entry.get("kind")
        if kind not in KINDS:
            raise ValueError(f"{where}.kind: {kind!r} is not a notifier kind; one of {', '.join(KINDS)}")
        try:
            settings = KINDS[kind].model_validate(KINDS[kind].inherit(entry, slack_app))
        except ValidationError as e:
            problems = describe_validation_error(e, entry).split("; ")
            raise ValueError("; ".join(f"{where}." + p if not p.startswith("(top level)")
                                       else where + p.removeprefix("(top level)") for p in problems)) from None
        if any(s.label == settings.label for s in out):
            raise ValueError(f"{where}.name: {settings.label!r} is used twice; give each notifier its own name")
        out.append(settings)
    return out
