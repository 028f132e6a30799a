"""The Bolt app: who hears what, and the 3-second rule.

Slack wants every request acknowledged within three seconds; an investigation takes longer.
So each listener acks at once and does its work as a Bolt lazy listener (a thread of the
app's executor): the question gets a placeholder in its thread, then the answer in place.

    app_mention           -> ask, in the mention's thread
    message (im only)     -> ask, in the DM's thread
    /crashcart QUESTION   -> the question posted in the channel, answered in its thread
    crashcart_approve / crashcart_reject buttons -> _approve.answer_click
"""

from __future__ import annotations

import logging
from typing import Any

from crashcart.agent.interfaces.slack import blocks as kit
from crashcart.agent.interfaces.slack._approve import answer_click
from crashcart.agent.interfaces.slack._ask import SlackService

log = logging.getLogger("crashcart.slack")


def build_app(service: SlackService, *, token: str, signing_secret: str, client: Any = None) -> Any:
    """A Bolt App bound to `service`. `client`: a WebClient (e.g. with base_url) instead of Slack's default."""
    from slack_bolt import App

    from crashcart.agent.interfaces.slack._verify import JournaledRequestVerification

    def refused(body: dict[str, Any], why: str) -> None:
        _journal_unverified(service, body, why)

    app = App(
        token=None if client is not None else token, signing_secret=signing_secret, client=client,
        # Bolt's own verification, in its own place in the chain, plus a journal of what it refuses:
        # before_authorize runs exactly where the built-in one would.
        request_verification_enabled=False,
        before_authorize=JournaledRequestVerification(signing_secret, refused),
        raise_error_for_unhandled_request=False,
    )

    def ack_now(ack: Any) -> None:
        service.accepted()
        ack()

    def on_mention(event: dict[str, Any], client: Any) -> None:
        with service.working():
            service.ask(client, channel=event["channel"], thread_ts=event.get("thread_ts") or event["ts"],
                        user=event.get("user"), text=event.get("text") or "")

    def on_message(event: dict[str, Any], client: Any) -> None:
        with service.working():
            # Only direct messages from people: channel chatter needs a mention, edits and bots are not questions.
            if event.get("channel_type") != "im" or event.get("subtype") or event.get("bot_id"):
                return
            service.ask(client, channel=event["channel"], thread_ts=event.get("thread_ts") or event["ts"],
                        user=event.get("user"), text=event.get("text") or "")

    def ack_command(ack: Any, command: dict[str, Any]) -> None:
        service.accepted()
        ack(text="Looking into it…" if (command.get("text") or "").strip() else
            "Ask a question: /crashcart why is 48213 pending?")

    def on_command(command: dict[str, Any], client: Any) -> None:
        question = (command.get("text") or "").strip()
        with service.working():
            if not question:
                return
            asked = client.chat_postMessage(
                channel=command["channel_id"], text=f"<@{command['user_id']}> asked: {question}",
                blocks=[kit.context(f"<@{kit.escape_mrkdwn(command['user_id'])}> asked:"), kit.plain_section(question)])
            service.ask(client, channel=asked["channel"], thread_ts=asked["ts"], user=command.get("user_id"),
                        text=question)

    def on_click(body: dict[str, Any], client: Any) -> None:
        with service.working():
            answer_click(service, client, body)

    app.event("app_mention")(ack=ack_now, lazy=[on_mention])
    app.event("message")(ack=ack_now, lazy=[on_message])
    app.command("/crashcart")(ack=ack_command, lazy=[on_command])
    app.action(kit.APPROVE_ACTION)(ack=ack_now, lazy=[on_click])
    app.action(kit.REJECT_ACTION)(ack=ack_now, lazy=[on_click])
    return app


def _journal_unverified(service: SlackService, body: dict[str, Any], why: str) -> None:
    """A refused request that claims to be a click is journaled against the incident it names."""
    if body.get("type") != "block_actions":
        log.warning("refused a Slack request: %s", why)
        return
    from crashcart.agent.interfaces.slack._approve import Click, binding_of

    click = Click.from_body(body)
    binding = binding_of(click.value) or {}
    service.store.record_approval_attempt(
        binding.get("incident") or "slack:unbound-click", outcome="refused",
        reason=f"signature check failed: {why}", at=service.deps().guard.clock(),
        action_id=binding.get("action"), tool=binding.get("tool"), approver=None,
        slack_user=click.slack_user or None, approved=click.approved, policy_sha256=binding.get("policy"))
