"""cluster.yaml's `slack:` section: where the app's secrets are (never what they are) and where it talks.

```yaml
slack:
  bot_token_env: SLACK_BOT_TOKEN            # xoxb-...; or bot_token_file: /etc/crashcart/slack-bot-token
  app_token_env: SLACK_APP_TOKEN            # xapp-... (Socket Mode); or app_token_file
  signing_secret_env: SLACK_SIGNING_SECRET  # HTTP mode; or signing_secret_file
  channel: "#gpu-oncall"                    # where pages go when no route matches
```

Who may approve from Slack is not here: it is the guard policy's `approvers[].slack_ids`, the
policy each incident stores when it starts, so no Slack setting can name an approver.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from crashcart.tools.transport import Secret


class SlackConfigError(ValueError):
    """A Slack secret cannot be read, or the settings cannot start the mode asked for."""


class SlackSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bot_token_env: str | None = None
    """Default, when neither this nor bot_token_file is given: SLACK_BOT_TOKEN (Bolt's own name)."""
    bot_token_file: str | None = None
    app_token_env: str | None = None
    """Socket Mode's app-level token (connections:write). Default: SLACK_APP_TOKEN."""
    app_token_file: str | None = None
    signing_secret_env: str | None = None
    """HTTP mode checks every request's signature with it. Default: SLACK_SIGNING_SECRET."""
    signing_secret_file: str | None = None
    channel: str | None = None
    """The default channel for pages (name or id)."""
    api_url: str | None = None
    """The Web API's base URL (default Slack's own, https://slack.com/api/): a proxy, or a test server."""

    @model_validator(mode="after")
    def _one_source_each(self) -> SlackSettings:
        for what in ("bot_token", "app_token", "signing_secret"):
            if getattr(self, f"{what}_env") and getattr(self, f"{what}_file"):
                raise ValueError(f"give {what}_env or {what}_file, not both")
        return self

    def bot_token(self) -> str:
        return _reveal(self.bot_token_env, self.bot_token_file, "SLACK_BOT_TOKEN", "bot token")

    def app_token(self) -> str:
        return _reveal(self.app_token_env, self.app_token_file, "SLACK_APP_TOKEN", "app-level token (Socket Mode)")

    def signing_secret(self) -> str:
        return _reveal(self.signing_secret_env, self.signing_secret_file, "SLACK_SIGNING_SECRET",
                       "signing secret (HTTP mode)")


def _reveal(env: str | None, file: str | None, default_env: str, what: str) -> str:
    """The secret's value, or an error naming where it should be (never a value)."""
    from crashcart.tools.transport import TransportError

    source = Secret(env=env, file=file) if env or file else Secret(env=default_env)
    try:
        value = source.reveal()
    except TransportError as e:
        raise SlackConfigError(f"slack: the {what}: {e}") from None
    if not value or not value.strip():
        raise SlackConfigError(f"slack: the {what} from {source!r} is empty")
    return value.strip()
