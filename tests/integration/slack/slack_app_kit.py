"""The Slack app as a test drives it: a recorded cluster, a store in tmp_path, Bolt's App with
request verification on, and requests signed the way Slack signs them (slack_sdk's
SignatureVerifier), dispatched in-process with `app.dispatch(BoltRequest(...))`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from slack_api import APP_ID, BOT_USER_ID, TEAM_ID

from crashcart.evals.scenario import BUNDLED_DIR, load_scenario

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the shape of Slack's, from its docs; not a real one
SCENARIO = BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml"
JOB, BAD_NODE = "1294430", "sxm-h100-33"
CHANNEL = "C0ONCALL01"
ALICE, BOB, CAROL = "U0ALICE01", "U0BOB0001", "U0CAROL01"
"""alice may approve drains; bob is an approver of nothing that waits here; carol is in no policy."""


def guard_policy() -> dict[str, Any]:
    guard = dict(load_scenario(SCENARIO).guard)
    guard["approvers"] = [{"name": "alice", "slack_ids": [ALICE]}, {"name": "bob", "slack_ids": [BOB]}]
    guard["approval"] = [{"tool": "node_drain", "approvers": ["alice"]}]
    return guard


def signed_headers(body: str, *, content_type: str, timestamp: int | None = None,
                   secret: str = SIGNING_SECRET) -> dict[str, list[str]]:
    from slack_sdk.signature import SignatureVerifier

    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"content-type": [content_type], "x-slack-request-timestamp": [ts], "x-slack-signature": [signature]}


def event_body(event: dict[str, Any]) -> str:
    """An Events API callback as Slack POSTs it."""
    return json.dumps({
        "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "team_id": TEAM_ID, "api_app_id": APP_ID, "event": event,
        "type": "event_callback", "event_id": f"Ev{int(time.time() * 1000)}", "event_time": int(time.time()),
        "authorizations": [{"enterprise_id": None, "team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True,
                            "is_enterprise_install": False}],
        "is_ext_shared_channel": False, "event_context": "4-eyJldCI6ImFwcF9tZW50aW9uIn0",
    })


def click_body(user: str, action_id: str, value: str, message: dict[str, Any], response_url: str) -> str:
    """A block_actions payload as Slack POSTs it: form-encoded `payload=` JSON."""
    return urlencode({"payload": json.dumps(click_payload(user, action_id, value, message, response_url))})


def click_payload(user: str, action_id: str, value: str, message: dict[str, Any], response_url: str) -> dict[str, Any]:
    """What Slack sends when someone clicks a button on `message`."""
    return {
        "type": "block_actions", "user": {"id": user, "username": user.lower(), "name": user.lower(),
                                          "team_id": TEAM_ID},
        "api_app_id": APP_ID, "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": CHANNEL, "is_ephemeral": False,
                      "thread_ts": message.get("thread_ts")},
        "trigger_id": "13345224609.738474920.8088930838d88f008e0", "team": {"id": TEAM_ID, "domain": "crashcart-test"},
        "enterprise": None, "is_enterprise_install": False,
        "channel": {"id": CHANNEL, "name": "oncall"}, "message": message, "state": {"values": {}},
        "response_url": response_url,
        "actions": [{"action_id": action_id, "block_id": "approval:x", "text": {"type": "plain_text", "text": "Approve"},
                     "value": value, "style": "primary", "type": "button", "action_ts": f"{time.time():.6f}"}],
    }


@dataclass
class SlackRig:
    app: Any
    service: Any
    backend: Any
    store: Any
    api: Any

    def dispatch(self, body: str, headers: dict[str, list[str]]) -> Any:
        """As `crashcart slack --http` hands a request to Bolt (agent/interfaces/slack/_run.py)."""
        from crashcart.agent.interfaces.slack._run import dispatch

        return dispatch(self.app, body, "", headers)

    def mention(self, user: str, text: str, thread_ts: str | None = None) -> dict[str, Any]:
        """A person's message in the channel (in the loopback workspace), delivered as an app_mention."""
        msg = self.api.workspace.post(CHANNEL, user=user, text=f"<@{BOT_USER_ID}> {text}", thread_ts=thread_ts)
        event = {"type": "app_mention", "user": user, "text": msg["text"], "ts": msg["ts"], "channel": CHANNEL,
                 "event_ts": msg["ts"], "team": TEAM_ID}
        if thread_ts:
            event["thread_ts"] = thread_ts
        body = event_body(event)
        response = self.dispatch(body, signed_headers(body, content_type="application/json"))
        assert response.status == 200, response.body
        assert self.service.wait_idle(60)
        return msg

    def click(self, user: str, value: str, message: dict[str, Any], *, approve: bool = True,
              timestamp: int | None = None, secret: str = SIGNING_SECRET) -> Any:
        from crashcart.agent.interfaces.slack.blocks import APPROVE_ACTION, REJECT_ACTION

        body = click_body(user, APPROVE_ACTION if approve else REJECT_ACTION, value, message,
                          self.api.response_url())
        headers = signed_headers(body, content_type="application/x-www-form-urlencoded", timestamp=timestamp,
                                 secret=secret)
        response = self.dispatch(body, headers)
        assert self.service.wait_idle(60)
        return response

    def bot_replies(self, thread_ts: str) -> list[dict[str, Any]]:
        return [m for m in self.api.workspace.thread(CHANNEL, thread_ts)[1:] if m.get("bot_id")]


def make_rig(tmp_path: Path, api: Any, guard: dict[str, Any] | None = None, policy: Any = None) -> SlackRig:
    """`policy`: the investigating policy (default: the playbooks)."""
    from slack_sdk import WebClient

    from crashcart.agent.checkpointer import open_checkpointer
    from crashcart.agent.guard import policy_from_dict
    from crashcart.agent.interfaces.slack import SlackService, build_app
    from crashcart.agent.policies import make_policy
    from crashcart.agent.store import IncidentStore
    from crashcart.tools.backends.fixture import FixtureBackend

    for user, name in ((ALICE, "alice"), (BOB, "bob"), (CAROL, "carol")):
        api.workspace.add_user(user, name)
    scenario = load_scenario(SCENARIO)
    playbook = policy or make_policy("playbook")  # one instance, as `crashcart slack` shares its deps' policy
    backend = FixtureBackend(scenario.cluster, scenario.backend)
    store = IncidentStore(str(tmp_path / "incidents.duckdb"))
    service = SlackService(cluster="gpu-test", backend=backend, guard_policy=policy_from_dict(guard or guard_policy()),
                           store=store, checkpointer=open_checkpointer(tmp_path / "checkpoints.sqlite"),
                           make_policy=lambda: playbook, notifiers=[])
    client = WebClient(token=api.bot_token, base_url=api.base_url + "/api/")
    app = build_app(service, token=api.bot_token, signing_secret=SIGNING_SECRET, client=client)
    return SlackRig(app, service, backend, store, api)


def buttons(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """action_id -> the button element, over every actions block of a message."""
    out: dict[str, dict[str, Any]] = {}
    for block in message.get("blocks") or []:
        if block.get("type") == "actions":
            for element in block["elements"]:
                out.setdefault(element["action_id"], element)
    return out


def block_texts(message: dict[str, Any]) -> str:
    """Every text a message's blocks show, one per line (plain, mrkdwn and rich text alike)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                out.append(node["text"])
            for v in node.values():
                if isinstance(v, (dict, list)):
                    walk(v)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(message.get("blocks") or [])
    return "\n".join(out)
