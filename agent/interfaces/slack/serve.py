"""Start the Slack app for `crashcart slack`: secrets read, token checked, then serve until stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


class SlackStartError(Exception):
    """The app cannot start: a secret is missing, Slack refused the token. Names what, never a value."""


def start(target: Any, state_dir: Path, *, http: bool, host: str, port: int, say: Callable[[str], None]) -> None:
    from crashcart.agent.interfaces.slack._ask import slack_ids_of
    from crashcart.agent.interfaces.slack._run import EVENTS_PATH, http_server, serve_socket_mode
    from crashcart.agent.interfaces.slack._settings import SlackConfigError, SlackSettings

    config = target.config
    settings = (config.slack if config is not None else None) or SlackSettings()
    deps = target.deps
    try:
        token = settings.bot_token()
        secret = settings.signing_secret() if http else _optional(settings.signing_secret)
        app_token = None if http else settings.app_token()
    except SlackConfigError as e:
        raise SlackStartError(str(e)) from None
    service = make_service(target, state_dir)
    app = _app(service, token, secret, settings.api_url)
    policy = deps.guard.policy
    say(f"crashcart slack: cluster {target.name}, guard mode {policy.mode} for its approvers "
        f"({len(slack_ids_of(policy))} Slack id(s)), observe for everyone else")
    if http:
        server = http_server(app, host, port)
        say(f"serving Slack's request URL at http://{host}:{server.server_address[1]}{EVENTS_PATH}")
        try:
            server.serve_forever()
        finally:
            server.server_close()
    else:
        say("connecting to Slack in Socket Mode")
        serve_socket_mode(app, app_token)


def make_service(target: Any, state_dir: Path) -> Any:
    """The app's service on the command's target: its cluster's guard policy for approvers, and on a
    live cluster that policy as the ceiling no incident acting there may exceed."""
    from crashcart.agent.checkpointer import open_checkpointer
    from crashcart.agent.interfaces.slack._ask import SlackService

    deps, config = target.deps, target.config
    return SlackService(
        cluster=target.name, backend=deps.backend, guard_policy=deps.guard.policy, store=deps.store,
        checkpointer=open_checkpointer(state_dir / "checkpoints.sqlite"), make_policy=lambda: deps.policy,
        notifiers=list(config.notifiers) if config is not None else [], ceiling=deps.guard.ceiling,
    )


def _optional(read: Callable[[], str]) -> str:
    """Socket Mode needs no signing secret (the connection is the app token's); use one if given."""
    from crashcart.agent.interfaces.slack._settings import SlackConfigError

    try:
        return read()
    except SlackConfigError:
        return ""


def _app(service: Any, token: str, secret: str, api_url: str | None) -> Any:
    from slack_bolt.error import BoltError
    from slack_sdk import WebClient

    from crashcart.agent.interfaces.slack.app import build_app

    client = WebClient(token=token, base_url=api_url) if api_url else WebClient(token=token)
    try:
        return build_app(service, token=token, signing_secret=secret, client=client)
    except BoltError as e:  # auth.test refused the token: Slack's error code says why
        raise SlackStartError(f"Slack refused the bot token: {e}") from None
