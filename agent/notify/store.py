"""The incident store as a notifier: the escalation is journaled with its incident.

Always the first notifier, whatever cluster.yaml lists: what the other notifiers fail to
deliver is still here, for `crashcart incidents` and for a person to act on."""

from __future__ import annotations

from typing import Literal

from crashcart.agent.notify.base import Notification, NotifierSettings


class StoreSettings(NotifierSettings):
    kind: Literal["store"]

    def build(self) -> StoreNotifier:
        return StoreNotifier()


class StoreNotifier:
    def send(self, n: Notification) -> None:
        """Nothing to send: the dispatcher's delivery record is the journal entry."""
