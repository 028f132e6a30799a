"""Approve through Slack: an Approve or Reject click, judged by the incident's stored policy.

The request's signature was checked before this runs (HTTP mode: _verify.py; Socket Mode: the
app-level token's own connection). Here the click must bind: the button names one action of
one incident under one policy hash, and the store must show exactly that action (tool, args)
waiting under exactly that policy. The clicking Slack user id must be listed (`slack_ids`) by
an approver of that policy; then the one shared approval path (agent/interfaces/approval.py)
resumes the incident, and the guard judges the person again there (tier, expiry, single use).
Anything else is refused: journaled in approval_attempts, told to the clicker only
(ephemeral, in the thread), and nothing resumes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from crashcart.agent.interfaces.slack import blocks as kit
from crashcart.agent.interfaces.slack._ask import SlackService, incident_for_thread, slack_ids_of


@dataclass
class Click:
    """The parts of a block_actions payload a decision reads."""

    slack_user: str
    approved: bool
    value: str
    channel: str | None
    message_ts: str | None
    thread_ts: str | None

    @classmethod
    def from_body(cls, body: Any) -> Click:
        """Read leniently: an unverified request (journaled before its 401) may hold anything."""
        body = _mapping(body)
        actions = body.get("actions")
        action = _mapping(actions[0] if isinstance(actions, list) and actions else None)
        container, message = _mapping(body.get("container")), _mapping(body.get("message"))
        return cls(
            slack_user=_text(_mapping(body.get("user")).get("id")) or "",
            approved=action.get("action_id") == kit.APPROVE_ACTION,
            value=_text(action.get("value")) or "",
            channel=_text(_mapping(body.get("channel")).get("id")) or _text(container.get("channel_id")),
            message_ts=_text(message.get("ts")) or _text(container.get("message_ts")),
            thread_ts=(_text(message.get("thread_ts")) or _text(container.get("thread_ts"))
                       or _text(message.get("ts"))),
        )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def binding_of(value: str) -> dict[str, str] | None:
    """The button's value as crashcart wrote it, or None when it is not that shape."""
    try:
        data = json.loads(value)
    except ValueError:
        return None
    keys = ("incident", "action", "tool", "args", "policy")
    if not isinstance(data, dict) or set(data) != set(keys) or not all(isinstance(data[k], str) for k in keys):
        return None
    return data


class Refused(Exception):
    pass


def answer_click(service: SlackService, client: Any, body: dict[str, Any]) -> None:
    """Honour the click or refuse it; either way the clicker hears the outcome in the thread."""
    click = Click.from_body(body)
    binding = binding_of(click.value)
    incident = binding["incident"] if binding else "slack:unbound-click"
    with service.lock:
        deps = service.deps()
        try:
            approver, sha = _check(service, deps, click, binding)
        except Refused as e:
            deps.store.record_approval_attempt(
                incident, outcome="refused", reason=str(e), at=deps.guard.clock(),
                action_id=binding["action"] if binding else None, tool=binding["tool"] if binding else None,
                approver=None, slack_user=click.slack_user or None, approved=click.approved,
                policy_sha256=binding["policy"] if binding else None)
            _tell(client, click, f"Refused: {e}")
            return
        from crashcart.agent.interfaces.approval import ApprovalRefused, answer_approval

        try:
            run = answer_approval(deps, incident, service.checkpointer, approver=approver, approved=click.approved,
                                  slack_user=click.slack_user, action_ids=[binding["action"]])
        except ApprovalRefused as e:  # journaled by answer_approval
            _tell(client, click, f"Refused: {e.message}")
            return
        action = next(a for a in run.state.get("actions") or [] if a["action_id"] == binding["action"])
        if action["decision"] == "needs_approval":  # the guard refused the person (journaled there)
            _tell(client, click, f"Refused: {action['reason']}")
            return
        if click.channel and click.message_ts:
            service.show(client, click.channel, click.message_ts, incident, run.state, sha,
                         extra=kit.answered_blocks(click.slack_user, approver, click.approved, action))


def _check(service: SlackService, deps: Any, click: Click, binding: dict[str, str] | None) -> tuple[str, str]:
    """(approver name, policy sha) for a click that binds to a waiting action, else Refused."""
    if binding is None:
        raise Refused("this button is not one crashcart made (its value does not name an incident's action).")
    incident, action_id = binding["incident"], binding["action"]
    stored = deps.guard.policy_for(incident)
    if stored is None:
        raise Refused(f"incident {incident} is not in this crashcart's store.")
    policy, sha = stored
    if binding["policy"] != sha:
        raise Refused(f"the button was made under another guard policy ({binding['policy'][:12]}) than incident "
                      f"{incident} runs under ({sha[:12]}).")
    pending = deps.store.last_decision(service.cluster, incident, action_id)
    if pending is None:
        raise Refused(f"incident {incident} has no action {action_id}.")
    if pending.tool != binding["tool"] or kit.args_sha256(pending.args or {}) != binding["args"]:
        raise Refused(f"the button names {binding['tool']} with other arguments than action {action_id} of "
                      f"incident {incident}.")
    if not _message_belongs(deps.store, incident, click):
        raise Refused(f"this button sits in another incident's thread than {incident}'s; a click answers only the "
                      "incident whose thread or page holds it.")
    approver = slack_ids_of(policy).get(click.slack_user)
    if approver is None:
        raise Refused(f"Slack user {click.slack_user or '(none)'} is not an approver in the guard policy of "
                      f"incident {incident}.")
    return approver, sha


def _message_belongs(store: Any, incident: str, click: Click) -> bool:
    """The clicked message is in the incident's own thread (one Slack thread is one incident asked
    in Slack), or is the page `watch` posted for it (agent/notify/slack.py keeps its channel and ts)."""
    if not (click.channel and click.thread_ts):
        return False
    return incident_for_thread(click.channel, click.thread_ts) == incident or any(
        (p.channel, p.ts) == (click.channel, click.thread_ts) for p in store.pages(incident))


def _tell(client: Any, click: Click, text: str) -> None:
    """Only the clicker sees a refusal; the thread stays as it was."""
    if click.channel and click.slack_user:
        client.chat_postEphemeral(channel=click.channel, user=click.slack_user, thread_ts=click.thread_ts,
                                  text=text[:2900])
