"""Delivering one escalation through every notifier that wants it, with retries and backoff.

The store's record comes first, so the escalation is never lost; each notifier then gets
1 + retries attempts, and one that still fails leaves a dead-letter record holding the payload
and the last error, which `crashcart incidents` shows.

Kinds that page (Slack) also keep one message per incident `watch` opened up to date:
`page()` runs after every stretch of the incident's run (it opened, stopped for an approval,
resumed, finished), with the same retries; a failed page is a dead-letter record too, and the
next page of that incident posts the message afresh.

`watch` calls `retry_undelivered()` at every poll: the page, then each escalation some notifier
left as a dead letter, is tried again (once a poll, so a receiver that is down does not hold up
the loop), and each try leaves its own record, until one gets through."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable

from crashcart.agent.notify.base import DeliveryError, Notification, NotifierSettings
from crashcart.agent.notify.store import StoreSettings

STORE = StoreSettings(kind="store")
PAGE = "page"
"""The action_id of a page's delivery records (one incident, one message per notifier)."""


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
            self._send(s, incident_id, n, payload, at)

    def retry_undelivered(self, incident_id: str, at: datetime | None = None) -> None:
        """Try again what a notifier could not deliver about this incident: its page first (an
        escalation then lands in the page's thread), then every dead-lettered escalation, one
        attempt each. A notifier no longer configured keeps its dead letter for a person to see."""
        self.page(incident_id, at=at)
        rows = self.store.deliveries(incident_id)
        delivered = {(d.action_id, d.notifier) for d in rows if d.status == "delivered"}
        waiting = {(d.action_id, d.notifier): d for d in rows
                   if d.action_id != PAGE and d.status == "dead_letter" and (d.action_id, d.notifier) not in delivered}
        by_label = {s.label: s for s in self.settings}
        for (_, label), d in waiting.items():
            if label in by_label:
                self._send(by_label[label], incident_id, Notification.model_validate(d.payload), d.payload, at,
                           retries=0)

    def _send(self, s: NotifierSettings, incident_id: str, n: Notification, payload: dict[str, Any],
              at: datetime | None, retries: int | None = None) -> None:
        attempts, error, _ = self._attempt(s, lambda notifier: notifier.send(n), retries)
        status = "delivered" if error is None else "dead_letter"
        self.store.record_delivery(incident_id, n.action_id, s.label, s.kind, status, attempts, payload,
                                   error=error, at=at)

    def page(self, incident_id: str, state: dict[str, Any] | None = None, at: datetime | None = None) -> None:
        """Bring every paging notifier's message about this incident up to date (watch's incidents only:
        one asked in chat is answered in its own thread)."""
        pagers = [s for s in self.settings if s.pages]
        if not pagers:
            return
        detail = self.store.get_incident(incident_id)
        if detail is None or detail.incident.source != "watch":
            return
        payload = {"status": detail.incident.status, "summary": (detail.incident.diagnosis or {}).get("summary")}
        records = [d for d in self.store.deliveries(incident_id) if d.action_id == PAGE]
        for s in pagers:
            attempts, error, sent = self._attempt(s, lambda notifier: notifier.page(incident_id, state))
            last = next((d for d in reversed(records) if d.notifier == s.label), None)
            if error is not None and last is not None and (last.status, last.error, last.payload) == (
                    "dead_letter", error, payload):
                continue  # the same failure, tried again at a later poll: its record already says so
            # Not sent and no error: the message already shows this (an escalation opened it), which
            # delivers a page that failed before.
            if sent or error is not None or (last is not None and last.status == "dead_letter"):
                self.store.record_delivery(incident_id, PAGE, s.label, s.kind, "delivered" if error is None
                                           else "dead_letter", attempts, payload, error=error, at=at)

    def _attempt(self, s: NotifierSettings, send: Callable[[Any], Any],
                 retries: int | None = None) -> tuple[int, str | None, Any]:
        retries = s.retries if retries is None else retries
        notifier = s.build_for(self.store)
        attempts = 0
        while True:
            attempts += 1
            try:
                return attempts, None, send(notifier)
            except Exception as e:  # noqa: BLE001 - whatever breaks, the escalation stays recorded
                permanent = not isinstance(e, DeliveryError) or e.permanent
                if permanent or attempts > retries:
                    error = str(e) if isinstance(e, DeliveryError) else f"{s.label}: {type(e).__name__}: {e}"
                    return attempts, error, None
                # The receiver's own Retry-After wins over a shorter backoff.
                wait = s.backoff_seconds * 2 ** (attempts - 1)
                self.sleep(max(wait, getattr(e, "retry_after", None) or 0))
