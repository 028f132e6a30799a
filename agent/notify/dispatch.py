"""Delivering one escalation through every notifier that wants it, with retries and backoff.

The store's record comes first, so the escalation is never lost; each notifier then gets
1 + retries attempts, and one that still fails leaves a dead-letter record holding the payload
and the last error, which `crashcart incidents` shows."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable

from crashcart.agent.notify.base import DeliveryError, Notification, NotifierSettings
from crashcart.agent.notify.store import StoreSettings

STORE = StoreSettings(kind="store")


class Dispatcher:
    def __init__(self, store: Any, settings: list[NotifierSettings] | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.store = store
        configured = [s for s in settings or [] if s.kind != "store"]
        self.settings: list[NotifierSettings] = [STORE, *configured]
        self.sleep = sleep

    def deliver(self, cluster: str, incident_id: str, action: dict[str, Any], at: datetime) -> None:
        n = Notification.from_action(cluster, incident_id, action, at)
        payload = n.model_dump(mode="json")
        done = self.store.delivered_to(n.action_id)
        for s in self.settings:
            if s.label in done or not s.wants(n):
                continue
            attempts, error = self._attempt(s, n)
            status = "delivered" if error is None else "dead_letter"
            self.store.record_delivery(incident_id, n.action_id, s.label, s.kind, status, attempts, payload,
                                       error=error, at=at)

    def _attempt(self, s: NotifierSettings, n: Notification) -> tuple[int, str | None]:
        notifier = s.build()
        attempts = 0
        while True:
            attempts += 1
            try:
                notifier.send(n)
                return attempts, None
            except Exception as e:  # noqa: BLE001 - whatever breaks, the escalation stays recorded
                permanent = not isinstance(e, DeliveryError) or e.permanent
                if permanent or attempts > s.retries:
                    return attempts, str(e) if isinstance(e, DeliveryError) else f"{s.label}: {type(e).__name__}: {e}"
                self.sleep(s.backoff_seconds * 2 ** (attempts - 1))
