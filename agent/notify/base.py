"""What every notifier shares: the message, the settings every kind has, the error it raises."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from crashcart.tools.transport import Secret, TransportError


class DeliveryError(Exception):
    """A notifier could not deliver. `permanent`: retrying will not help (a 4xx, bad credentials);
    `retry_after`: the receiver said how long to wait (Slack's Retry-After), in seconds."""

    def __init__(self, message: str, permanent: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class Notification(BaseModel):
    """An `escalate` or `notify` action the guard allowed and the backend ran, as people get it."""

    event: str
    """escalate | notify"""
    cluster: str
    incident_id: str
    action_id: str
    time: datetime
    team: str | None = None
    severity: str | None = None
    to: str | None = None
    summary: str
    evidence: list[str] = Field(default_factory=list)

    @classmethod
    def from_action(cls, cluster: str, incident_id: str, action: dict[str, Any], at: datetime) -> Notification:
        args = action.get("args") or {}
        return cls(event=action["tool"], cluster=cluster, incident_id=incident_id, action_id=action["action_id"],
                   time=at, team=args.get("team"), severity=args.get("severity"), to=args.get("to"),
                   summary=str(args.get("summary") or args.get("message") or args.get("reason") or ""),
                   evidence=[str(e) for e in args.get("evidence") or []])

    @property
    def subject(self) -> str:
        who = f"to {self.team}" if self.team else f"for {self.to}" if self.to else ""
        what = f"{self.severity} escalation" if self.event == "escalate" else "notification"
        return f"[crashcart] {what} {who}: {self.cluster} {self.incident_id}".replace("  ", " ")

    def text(self) -> str:
        lines = [self.subject, "", self.summary]
        if self.evidence:
            lines += ["", "Evidence:"] + [f"  {e}" for e in self.evidence]
        lines += ["", f"crashcart incidents show {self.incident_id}"]
        return "\n".join(lines)


class NotifierSettings(BaseModel):
    """The keys every kind has. Unknown keys are an error, like everywhere in crashcart."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    name: str | None = None
    """How `incidents` names it (default: its kind)."""
    teams: list[str] | None = None
    """Only escalations to these teams (and every notify); default: all."""
    retries: int = Field(3, ge=0, le=10)
    backoff_seconds: float = Field(1.0, ge=0, le=300)
    """Before retry i (from 0) it waits backoff_seconds * 2**i."""

    @property
    def label(self) -> str:
        return self.name or self.kind

    def wants(self, n: Notification) -> bool:
        return self.teams is None or n.event != "escalate" or n.team in self.teams

    pages: ClassVar[bool] = False
    """True: the kind also keeps a message per incident up to date (Slack), see Dispatcher.page."""

    @classmethod
    def inherit(cls, entry: dict[str, Any], slack_app: Any) -> dict[str, Any]:
        """The entry with what it leaves out taken from cluster.yaml's other sections (`slack_app`:
        the `slack:` section, or None); a kind that shares nothing returns it as it is."""
        return entry

    def build(self) -> Notifier:
        raise NotImplementedError

    def build_for(self, store: Any) -> Notifier:
        """The notifier a dispatcher uses; a kind that keeps a message per incident needs the store."""
        return self.build()


class Notifier(Protocol):
    def send(self, n: Notification) -> None:
        """Deliver or raise DeliveryError."""


def reveal(secret: Secret | None, what: str) -> str | None:
    """A secret's value, or a DeliveryError naming where it should be (never the value)."""
    if secret is None:
        return None
    try:
        return secret.reveal()
    except TransportError as e:
        raise DeliveryError(f"{what}: {e}", permanent=True) from None


def secret(env: str | None, file: str | None) -> Secret | None:
    return Secret(env=env, file=file) if env or file else None
