"""crashcart's Bolt app in Socket Mode: slack_bolt's SocketModeHandler (slack_sdk's builtin
websocket client) opens its connection through apps.connections.open on the loopback Web API
and talks to the loopback Socket Mode server (tests/harness/slack_socket.py) in Slack's
envelopes. Every envelope is acknowledged by its envelope_id within Slack's 3 seconds, before
the answer is ready; the answers go to the Web API like in HTTP mode."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs

import pytest
from slack_app_kit import ALICE, BAD_NODE, CHANNEL, JOB, TEAM_ID, block_texts, buttons, click_body, make_rig
from slack_api import BOT_USER_ID

from crashcart.agent.interfaces.slack import incident_for_thread
from crashcart.agent.interfaces.slack.blocks import APPROVE_ACTION

ACK_DEADLINE_S = 3.0  # Slack retries an envelope nobody acknowledged within 3 seconds


@pytest.fixture
def connected(tmp_path, slack_api, slack_socket):
    """The app connected over Socket Mode, as `crashcart slack` runs it (no signing secret needed)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    rig = make_rig(tmp_path, slack_api)
    handler = SocketModeHandler(rig.app, slack_api.app_token)
    handler.connect()
    slack_socket.wait_connected()
    yield rig
    slack_socket.reset()  # the server hangs up first, so the client's close does not wait on a read
    handler.close()


def _mention(slack_api, slack_socket, user: str, text: str, thread_ts: str | None = None):
    msg = slack_api.workspace.post(CHANNEL, user=user, text=f"<@{BOT_USER_ID}> {text}", thread_ts=thread_ts)
    event = {"type": "app_mention", "user": user, "text": msg["text"], "ts": msg["ts"], "channel": CHANNEL,
             "event_ts": msg["ts"], "team": TEAM_ID, **({"thread_ts": thread_ts} if thread_ts else {})}
    sent = time.monotonic()
    envelope_id = slack_socket.events_api(event)
    ack = slack_socket.wait_ack(envelope_id, timeout=ACK_DEADLINE_S)
    return msg, ack, time.monotonic() - sent


def test_the_connection_is_opened_with_the_app_token_and_greeted(connected, slack_api, slack_socket):
    [opened] = slack_api.calls("apps.connections.open")
    assert opened.token == slack_api.app_token and opened.answer["ok"]
    [path] = slack_socket.handshakes
    assert path.startswith("/link/?ticket=") and opened.answer["url"].endswith(path)


def test_an_app_mention_is_acked_at_once_and_answered_in_its_thread(connected, slack_api, slack_socket):
    rig = connected
    asked, ack, waited = _mention(slack_api, slack_socket, ALICE, f"why did job {JOB} die last night?")
    assert ack == {"envelope_id": ack["envelope_id"]}  # an events_api ack carries nothing else
    assert waited < ACK_DEADLINE_S
    assert rig.service.wait_idle(60)
    [reply] = rig.bot_replies(asked["ts"])
    shown = block_texts(reply)
    assert "gpu_fallen_off_bus" in shown and f"node_drain {BAD_NODE}: waiting for approval" in shown
    posted = slack_api.calls("chat.postMessage")
    assert [c.params["thread_ts"] for c in posted] == [asked["ts"]]  # one reply, in the thread
    assert all(c.token == slack_api.bot_token for c in slack_api.calls("chat.update"))
    assert incident_for_thread(CHANNEL, asked["ts"]) in shown


def test_a_slash_command_is_acked_with_its_response_payload(connected, slack_api, slack_socket):
    rig = connected
    envelope_id = slack_socket.slash_command("/crashcart", f"is job {JOB} healthy?", user_id=ALICE, channel_id=CHANNEL)
    ack = slack_socket.wait_ack(envelope_id, timeout=ACK_DEADLINE_S)
    assert ack["payload"] == {"text": "Looking into it…"}
    assert rig.service.wait_idle(60)
    [question] = [m for m in slack_api.messages(CHANNEL) if "asked:" in m["text"]]
    [answer] = rig.bot_replies(question["ts"])
    assert "gpu_fallen_off_bus" in block_texts(answer)


def test_an_approve_click_over_socket_mode_runs_the_drain_once(connected, slack_api, slack_socket):
    rig = connected
    asked, _, _ = _mention(slack_api, slack_socket, ALICE, f"why did job {JOB} die last night?")
    assert rig.service.wait_idle(60)
    [reply] = rig.bot_replies(asked["ts"])
    value = buttons(reply)[APPROVE_ACTION]["value"]
    form = click_body(ALICE, APPROVE_ACTION, value, reply, slack_api.response_url("click"))
    payload = json.loads(parse_qs(form)["payload"][0])  # what Slack POSTs in HTTP mode, it sends here as is
    for _ in range(2):  # Slack redelivers when it thinks an ack was lost: the second must not run again
        slack_socket.wait_ack(slack_socket.interactive(payload), timeout=ACK_DEADLINE_S)
        assert rig.service.wait_idle(60)
    incident_id = incident_for_thread(CHANNEL, asked["ts"])
    drains = [a for a in rig.store.get_incident(incident_id).actions if a.tool == "node_drain"]
    assert len(drains) == 1 and rig.backend.cluster.node(BAD_NODE).state in ("drained", "draining")
    assert f"Approved by <@{ALICE}> (alice)" in block_texts(rig.bot_replies(asked["ts"])[0])


def test_after_slacks_disconnect_notice_the_app_reconnects_with_a_new_ticket(connected, slack_api, slack_socket):
    rig = connected
    slack_socket.disconnect("refresh_requested")
    deadline = time.monotonic() + 60
    while len(slack_socket.handshakes) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(slack_socket.handshakes) == 2 and len(slack_api.calls("apps.connections.open")) == 2
    asked, _, _ = _mention(slack_api, slack_socket, ALICE, f"why did job {JOB} die last night?")
    assert rig.service.wait_idle(60)
    assert rig.bot_replies(asked["ts"])
