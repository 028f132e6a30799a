"""Ask it: a question in Slack becomes (or continues) a `chat` incident, answered in its thread.

One Slack thread is one incident (and one LangGraph thread): the incident id comes from the
channel and the thread's ts, so a follow-up in the thread continues it with what it already
read. The question is the trigger's text and nothing else: it never reaches the guard, and an
asker the policy does not name gets the incident in `observe` mode (read tools only).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from crashcart.agent.interfaces.slack import blocks as kit

MENTION = re.compile(r"<@[UW][A-Z0-9]+>")
UPDATE_EVERY_S = 1.0
"""chat.update is rate-limited per channel (about one a second); progress waits at least this long."""


def incident_for_thread(channel: str, thread_ts: str) -> str:
    return f"slack-{channel}-{thread_ts}"


def question_of(text: str) -> str:
    """The question as typed, without the app's @mention."""
    return MENTION.sub("", text or "").strip()


def slack_ids_of(policy: Any) -> dict[str, str]:
    """Slack user id -> approver name, over every approver entry the policy holds."""
    entries = list(policy.approvers) + [a for t in policy.approval for a in policy.approver_entries(t)]
    out: dict[str, str] = {}
    for entry in entries:
        for uid in entry.slack_ids:
            out.setdefault(uid, entry.name)
    return out


@dataclass
class SlackService:
    """What the Slack handlers work with: one cluster, its guard policy, the shared store and checkpoints."""

    cluster: str
    backend: Any
    guard_policy: Any
    """The policy an incident starts under when the asker is one of its approvers (else observe)."""
    store: Any
    checkpointer: Any
    make_policy: Callable[[], Any]
    """The investigating policy (playbook, or auto with a model)."""
    notifiers: list[Any] | None = None
    ceiling: Any = None
    """A live cluster's own guard policy: no incident acts on the cluster above it (None: a recorded one)."""
    clock: Callable[[], datetime] | None = None
    """The guard's clock (default: the backend's)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """One incident run or answer at a time in this process: they share the store and the graph."""
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _busy: int = 0

    # --- deps -------------------------------------------------------------------------------

    def deps(self, policy: Any = None) -> Any:
        from crashcart.agent.runner import make_deps

        deps = make_deps(self.backend, self.make_policy(), policy or self.guard_policy, self.store,
                         cluster=self.cluster, notifiers=self.notifiers, ceiling=self.ceiling)
        if self.clock is not None:
            deps.guard.clock = self.clock
        return deps

    def now(self) -> datetime:
        return (self.clock or self.backend.now)()

    def policy_for_asker(self, slack_user: str | None) -> Any:
        """The configured policy for a person it names by Slack id; observe for anyone else."""
        if slack_user and slack_user in slack_ids_of(self.guard_policy):
            return self.guard_policy
        return self.guard_policy.model_copy(update={"mode": "observe"})

    # --- work tracking: what was acked and is still being done (tests wait on it) ---------

    def accepted(self) -> None:
        """An ack went out for work that a lazy listener will do."""
        with self._idle:
            self._busy += 1

    def working(self) -> _Working:
        """Around a lazy listener's work: when it ends, the acked request is done."""
        return _Working(self)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    # --- asking -----------------------------------------------------------------------------

    def ask(self, client: Any, *, channel: str, thread_ts: str, user: str | None, text: str) -> str:
        """Answer `text` in the thread: a placeholder at once, updated as the incident goes. Returns the incident id."""
        from crashcart.agent.runner import pending_approval, start_incident

        question = question_of(text) or "(an empty question)"
        incident_id = incident_for_thread(channel, thread_ts)
        posted = client.chat_postMessage(channel=channel, thread_ts=thread_ts, text="Looking into it…",
                                         blocks=kit.placeholder_blocks(question))
        reply = _Reply(client, channel, posted["ts"], question)
        with self.lock:
            existing = self.store.get_incident(incident_id)
            deps = self.deps(self.policy_for_asker(user))
            if existing is not None:
                waiting = pending_approval(deps, incident_id, self.checkpointer)
                if waiting:
                    names = ", ".join(kit.action_line({**a, "decision": "needs_approval", "reason": None})
                                      for a in waiting)
                    reply.final(kit.header_blocks(incident_id, "awaiting_approval", self.cluster)
                                + [kit.plain_section(f"This incident waits for an answer on: {names}. "
                                                     "Approve or reject it above first; then ask again.")],
                                f"crashcart {incident_id}: awaiting approval")
                    return incident_id
            trigger = _trigger(existing, question)
            try:
                run = start_incident(deps, trigger, cluster=self.cluster, source=f"slack:{channel}",
                                     checkpointer=self.checkpointer, incident_id=incident_id, record=True,
                                     opened=existing is not None, on_step=reply.progress)
            except Exception as e:  # the thread hears that it failed, with why; the traceback goes to the log
                reply.final([kit.plain_section(f"crashcart could not investigate this: {type(e).__name__}: {e}")],
                            "crashcart could not investigate this")
                raise
            sha = (deps.guard.policy_for(incident_id) or (None, None))[1]
            self.show(reply.client, channel, reply.ts, run.incident_id, run.state, sha)
        return incident_id

    def show(self, client: Any, channel: str, ts: str, incident_id: str, state: dict[str, Any],
             policy_sha256: str | None, extra: list[dict[str, Any]] | None = None) -> None:
        """The incident as it stands, in place of message `ts`."""
        status = state.get("status") or "investigating"
        blocks = kit.incident_blocks(incident_id, status, state.get("diagnosis"), state.get("actions") or [],
                                     policy_sha256=policy_sha256, cluster=self.cluster,
                                     tool_calls=len(state.get("observations") or []))
        if extra:
            blocks = (blocks + extra)[:50]
        client.chat_update(channel=channel, ts=ts, blocks=blocks,
                           text=kit.incident_text(incident_id, status, state.get("diagnosis")))


def _trigger(existing: Any, question: str) -> dict[str, Any]:
    """A follow-up keeps what the thread asked before: its jobs and nodes stay in focus."""
    before = (existing.incident.trigger or {}) if existing is not None else {}
    text = "\n".join(t for t in (before.get("text"), question) if t)
    return {"kind": "chat", "job": before.get("job"), "node": before.get("node"), "text": text}


@dataclass
class _Reply:
    """The bot's message in the thread, updated in place (at most once a second while it works)."""

    client: Any
    channel: str
    ts: str
    question: str
    _last: float = 0.0
    _shown: tuple = ()

    def progress(self, state: dict[str, Any]) -> None:
        seen = (len(state.get("observations") or []), bool(state.get("diagnosis")))
        if seen == self._shown or time.monotonic() - self._last < UPDATE_EVERY_S:
            return
        self._shown, self._last = seen, time.monotonic()
        try:
            self.client.chat_update(channel=self.channel, ts=self.ts, text="Looking into it…",
                                    blocks=kit.progress_blocks(self.question, state))
        except Exception:  # a missed progress update is not worth failing the incident for
            pass

    def final(self, blocks: list[dict[str, Any]], text: str) -> None:
        self.client.chat_update(channel=self.channel, ts=self.ts, blocks=blocks, text=text)


class _Working:
    def __init__(self, service: SlackService):
        self.service = service

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        with self.service._idle:
            self.service._busy -= 1
            self.service._idle.notify_all()


__all__ = ["SlackService", "incident_for_thread", "question_of", "slack_ids_of"]
