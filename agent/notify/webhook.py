"""A generic webhook: the notification as one JSON POST (stdlib urllib, nothing to install)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from crashcart.agent.notify.base import DeliveryError, Notification, NotifierSettings, reveal, secret


class WebhookSettings(NotifierSettings):
    kind: Literal["webhook"]
    url: str
    token_env: str | None = None
    """A bearer token for the Authorization header, from this environment variable..."""
    token_file: str | None = None
    """...or this file. Never in cluster.yaml itself."""
    timeout: float = Field(10, gt=0, le=300)

    @model_validator(mode="after")
    def _http(self) -> WebhookSettings:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"url {self.where!r} is not an http(s) URL")
        if self.token_env and self.token_file:
            raise ValueError("give token_env or token_file, not both")
        return self

    @property
    def where(self) -> str:
        # A URL can carry a secret in its query string: errors show only where it points.
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}{parts.path}"

    def build(self) -> WebhookNotifier:
        return WebhookNotifier(self)


class WebhookNotifier:
    def __init__(self, settings: WebhookSettings):
        self.settings = settings

    def send(self, n: Notification) -> None:
        s = self.settings
        headers = {"Content-Type": "application/json", "User-Agent": "crashcart",
                   # Retries carry the same key, so a receiver can drop a repeat.
                   "Idempotency-Key": f"{n.incident_id}/{n.action_id}"}
        token = reveal(secret(s.token_env, s.token_file), f"webhook {s.label} token")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = json.dumps({"source": "crashcart", **n.model_dump(mode="json"), "subject": n.subject}).encode()
        request = urllib.request.Request(s.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=s.timeout) as response:
                response.read()
        except urllib.error.HTTPError as e:
            # 408/429 and 5xx are the receiver's passing trouble; any other 4xx will not change.
            permanent = 400 <= e.code < 500 and e.code not in (408, 429)
            raise DeliveryError(f"POST {s.where}: HTTP {e.code} {e.reason}", permanent=permanent) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise DeliveryError(f"POST {s.where}: {reason}") from None
