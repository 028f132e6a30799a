"""Slack: pages people about the incidents `watch` opens, and posts escalations.

Each incident `watch` opens gets one message in a channel chosen by the routing table (the
team it escalates to, else its partition or namespace, else its cluster, else `channel`),
showing the summary, the evidence, what crashcart did and what waits. Later states of the
incident update that same message (chat.update; its channel and ts are in the store) and add
a line to its thread, mentioning the team's user group when people are needed. An escalation
or notification goes into that thread, or, for an incident nobody was paged about, to the
routed channel on its own. slack_sdk loads on first use; retries and the dead-letter record
are the dispatcher's, as for every notifier.

```yaml
notifiers:
  - kind: slack
    token_env: SLACK_BOT_TOKEN        # or token_file; the xoxb- bot token, never inline (neither:
                                      # the `slack:` section's bot token, and its api_url)
    channel: "#gpu-oncall"            # where anything unrouted goes
    route:                            # first that applies: team, partition, cluster
      teams:                          # escalation teams: their channel and user group
        hardware: {channel: "#gpu-hardware", group: S0HWTEAM1}
        network: {group: S0NETTEAM1}
      partitions: {h100: "#h100-oncall", training: "#k8s-training"}   # Slurm partition or namespace
      clusters: {gpu-prod: "#prod-oncall"}
```
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from crashcart.agent.notify.base import DeliveryError, Notification, NotifierSettings, reveal, secret

CHANNEL = r"^(#[a-z0-9][a-z0-9._-]{0,79}|[CG][A-Z0-9]{6,})$"
"""`#name` (lower case, as Slack names channels) or a channel id (C.../G...)."""
ATTENTION = {"awaiting_approval", "escalated", "investigation_failed"}
"""States that need a person: the team's user group is mentioned when the incident reaches one."""
TRANSIENT = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
"""Slack errors that pass; any other `error` (invalid_auth, channel_not_found...) will not change."""


class TeamRoute(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    channel: str | None = Field(None, pattern=CHANNEL)
    """Where this team's incidents go (default: the route the incident would take otherwise)."""
    group: str | None = Field(None, pattern=r"^S[A-Z0-9]{6,}$")
    """The Slack user group to mention (its id, S...), when the incident needs people."""


class Routing(BaseModel):
    """Which channel an incident goes to: its team's, else its partition's, its cluster's, the default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    teams: dict[str, TeamRoute] = {}
    """Escalation teams (hardware, network, infra, ...): their channel and user group."""
    partitions: dict[str, str] = {}
    """Slurm partition or Kubernetes namespace -> channel."""
    clusters: dict[str, str] = {}
    """Cluster name -> channel."""

    @field_validator("clusters", "partitions")
    @classmethod
    def _channels(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [f"{k}: {c!r}" for k, c in v.items() if not re.match(CHANNEL, c)]
        if bad:
            raise ValueError(f"not a channel (#name or a C.../G... id): {', '.join(bad)}")
        return v


class SlackSettings(NotifierSettings):
    kind: Literal["slack"]
    token_env: str | None = None
    """The bot token (xoxb-...) from this environment variable..."""
    token_file: str | None = None
    """...or this file. Never in cluster.yaml itself. Neither: the `slack:` section's bot token."""
    channel: str = Field(pattern=CHANNEL)
    """Where anything the routing table does not place goes."""
    route: Routing = Routing()
    base_url: str = "https://slack.com/api/"
    """Slack's Web API (another URL for GovSlack, a proxy or a test server)."""
    timeout: float = Field(10, gt=0, le=120)
    pages: ClassVar[bool] = True

    @model_validator(mode="after")
    def _token_and_url(self) -> SlackSettings:
        if bool(self.token_env) == bool(self.token_file):
            raise ValueError("give the bot token as token_env or token_file (one of them), or give cluster.yaml "
                             "a slack: section whose bot token it uses")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url {self.base_url!r} is not an http(s) URL")
        return self

    @classmethod
    def inherit(cls, entry: dict[str, Any], slack_app: Any) -> dict[str, Any]:
        """One place for the token: an entry with no token of its own uses the Slack app's (its
        `slack:` section's bot_token_env or _file, else Bolt's SLACK_BOT_TOKEN), and the app's
        api_url unless it names a base_url. What the entry gives itself always wins."""
        if slack_app is None or entry.get("token_env") or entry.get("token_file"):
            return entry
        token = ({"token_file": slack_app.bot_token_file} if slack_app.bot_token_file
                 else {"token_env": slack_app.bot_token_env or "SLACK_BOT_TOKEN"})
        url = {"base_url": slack_app.api_url} if slack_app.api_url and "base_url" not in entry else {}
        return {**entry, **token, **url}

    def channel_for(self, cluster: str, partition: str | None, team: str | None) -> tuple[str, str | None]:
        """(channel, user group) for an incident: its team's, else its partition's, cluster's, default."""
        r = self.route
        t = r.teams.get(team or "")
        channel = (t.channel if t else None) or r.partitions.get(partition or "") or r.clusters.get(cluster)
        return channel or self.channel, t.group if t else None

    def build(self) -> SlackNotifier:
        return SlackNotifier(self)

    def build_for(self, store: Any) -> SlackNotifier:
        return SlackNotifier(self, store)


class SlackNotifier:
    def __init__(self, settings: SlackSettings, store: Any = None):
        self.settings = settings
        self.store = store
        self._web: Any = None

    # --- escalations and notifications -----------------------------------------------------

    def send(self, n: Notification) -> None:
        from crashcart.agent.interfaces.slack.blocks import group_mention, notification_text

        channel, group = self.settings.channel_for(n.cluster, None, n.team)
        page = self._page_of(n.incident_id)
        if page is None and self._paged_incident(n.incident_id):
            self.page(n.incident_id)  # the escalation belongs in the incident's thread: open it first
            page = self._page_of(n.incident_id)
        text = notification_text(n.text(), mention=group_mention(group) if n.event == "escalate" else "")
        if page is not None:
            self._call("chat_postMessage", page.channel, text=text, thread_ts=page.ts)
        else:
            self._call("chat_postMessage", channel, text=text)

    # --- the incident's message ------------------------------------------------------------

    def page(self, incident_id: str, state: dict[str, Any] | None = None) -> bool:
        """Post the incident's message, or bring it up to date; False when it already shows this."""
        from crashcart.agent.interfaces.incident_view import action_views
        from crashcart.agent.interfaces.slack import blocks as kit

        detail = self.store.get_incident(incident_id)
        inc = detail.incident
        views = action_views(detail, [])
        actions = [{"action_id": v.action_id, "tool": v.tool, "args": v.args, "decision": v.decision,
                    "reason": v.reason, "error": None} for v in views]
        answers = [answered(v.what, a) for v in views for a in v.approvals]
        who = _approvers(self.store, incident_id)
        waiting = [who(v) for v in views if v.decision == "needs_approval"]
        before = self._page_of(incident_id)
        channel, group = self.settings.channel_for(inc.cluster, partition_of(state, inc.trigger), team_of(inc, views))
        channel = before.channel if before else channel  # the message stays where people first saw it
        mention = kit.group_mention(group) if inc.status in ATTENTION else ""
        text = kit.page_text(inc.id, inc.status, inc.diagnosis, mention)
        stored = self.store.incident_policy(incident_id)
        body = kit.page_blocks(inc.id, inc.status, inc.diagnosis, actions, cluster=inc.cluster, mention=mention,
                               answers=answers, waits_for=" / ".join(dict.fromkeys(waiting)) or None,
                               policy_sha256=stored.sha256 if stored else None)
        digest = hashlib.sha256(json.dumps([text, body], sort_keys=True).encode()).hexdigest()
        if before is not None and before.digest == digest:
            return False
        if before is None:
            posted = self._call("chat_postMessage", channel, text=text, blocks=body)
            channel, ts = posted["channel"], posted["ts"]
        else:
            ts = before.ts
            try:
                self._call("chat_update", channel, ts=ts, text=text, blocks=body)
            except DeliveryError as e:
                if "message_not_found" not in str(e):
                    raise
                # Someone deleted it: page again rather than leave the incident unseen.
                ts = self._call("chat_postMessage", channel, text=text, blocks=body)["ts"]
            if before.status != inc.status:
                reply = kit.status_change_text(before.status, inc.status, actions, mention)
                self._call("chat_postMessage", channel, text=reply, thread_ts=ts)
        self.store.save_page(incident_id, self.settings.label, channel, ts, inc.status, digest)
        return True

    # --- plumbing --------------------------------------------------------------------------

    def _page_of(self, incident_id: str) -> Any:
        return self.store.page(incident_id, self.settings.label) if self.store is not None else None

    def _paged_incident(self, incident_id: str) -> bool:
        if self.store is None:
            return False
        detail = self.store.get_incident(incident_id)
        return detail is not None and detail.incident.source == "watch"

    def _client(self) -> Any:
        if self._web is None:
            from slack_sdk import WebClient

            token = reveal(secret(self.settings.token_env, self.settings.token_file), f"slack {self.settings.label} token")
            base = self.settings.base_url if self.settings.base_url.endswith("/") else self.settings.base_url + "/"
            self._web = WebClient(token=token, base_url=base, timeout=int(self.settings.timeout))
            self._web.retry_handlers = []  # the dispatcher retries, with backoff and a dead-letter record
        return self._web

    def _call(self, method: str, channel: str, **kwargs: Any) -> Any:
        from slack_sdk.errors import SlackApiError, SlackClientError

        try:
            return getattr(self._client(), method)(channel=channel, **kwargs)
        except SlackApiError as e:
            error = e.response.get("error") if isinstance(e.response.data, dict) else None
            status = e.response.status_code
            wait = e.response.headers.get("retry-after") or e.response.headers.get("Retry-After")
            transient = error in TRANSIENT or status == 429 or status >= 500
            raise DeliveryError(f"Slack {method.replace('_', '.')} to {channel}: {error or f'HTTP {status}'}",
                                permanent=not transient, retry_after=float(wait) if wait else None) from None
        except (SlackClientError, urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise DeliveryError(f"Slack {method.replace('_', '.')}: {self._where()}: {reason}") from None

    def _where(self) -> str:
        parts = urlsplit(self.settings.base_url)
        return f"{parts.scheme}://{parts.netloc}"


def answered(what: str, approval: str) -> str:
    """'node_drain gpu-b07: approved by alice', from the store's 'alice approved'."""
    who, _, verb = approval.rpartition(" ")
    return f"{what}: {verb} by {who}"


def team_of(incident: Any, views: list[Any]) -> str | None:
    """The team the incident goes to: an escalation's, else the diagnosis's."""
    for v in views:
        if v.tool == "escalate" and v.args.get("team"):
            return str(v.args["team"])
    return (incident.diagnosis or {}).get("team")


def partition_of(state: dict[str, Any] | None, trigger: dict[str, Any] | None) -> str | None:
    """The trigger job's partition (or namespace) as the investigation saw it in a job row."""
    job = (trigger or {}).get("job")
    if not job or not state:
        return None
    for obs in state.get("observations") or []:
        for row in (obs.get("data") or {}).get("rows") or []:
            if isinstance(row, dict) and str(row.get("job")) == str(job) and row.get("partition"):
                return str(row["partition"])
    return None


def _approvers(store: Any, incident_id: str):
    """who-may-approve(view), from the policy the incident itself stored."""
    from crashcart.agent.guard import policy_from_dict
    from crashcart.agent.interfaces.incident_view import approvers_for

    stored = store.incident_policy(incident_id)
    policy = policy_from_dict(stored.policy, source=f"incident {incident_id}: its guard policy") if stored else None
    return lambda view: approvers_for(view, policy)
