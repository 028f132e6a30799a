"""The loopback Slack Web API answers slack_sdk the way Slack does: envelopes, errors, rate limits."""

from __future__ import annotations

import time

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler


def test_post_update_and_thread_round_trip(slack_api, slack_web):
    posted = slack_web.chat_postMessage(channel="#oncall", text="job 48213 failed",
                                        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "*48213*"}}])
    assert posted["ok"] and posted["channel"] == "C0ONCALL01"
    assert isinstance(posted["ts"], str) and posted["ts"].count(".") == 1
    reply = slack_web.chat_postMessage(channel=posted["channel"], thread_ts=posted["ts"], text="drained gpu-b07")
    slack_web.chat_update(channel=posted["channel"], ts=posted["ts"], text="job 48213: remediated")

    thread = slack_web.conversations_replies(channel=posted["channel"], ts=posted["ts"])
    assert [m["text"] for m in thread["messages"]] == ["job 48213: remediated", "drained gpu-b07"]
    assert thread["messages"][0]["reply_count"] == 1 and thread["messages"][1]["thread_ts"] == posted["ts"]
    assert reply["ts"] > posted["ts"]
    update = slack_api.calls("chat.update")[0]
    assert update.params == {"channel": "C0ONCALL01", "ts": posted["ts"], "text": "job 48213: remediated"}
    assert update.token == slack_api.bot_token


def test_replies_page_with_cursor(slack_web):
    parent = slack_web.chat_postMessage(channel="#oncall", text="parent")
    for i in range(4):
        slack_web.chat_postMessage(channel="#oncall", thread_ts=parent["ts"], text=f"reply {i}")
    first = slack_web.conversations_replies(channel="C0ONCALL01", ts=parent["ts"], limit=3)
    assert first["has_more"] and first["response_metadata"]["next_cursor"]
    rest = slack_web.conversations_replies(channel="C0ONCALL01", ts=parent["ts"], limit=3,
                                           cursor=first["response_metadata"]["next_cursor"])
    texts = [m["text"] for m in first["messages"] + rest["messages"]]
    assert texts == ["parent", "reply 0", "reply 1", "reply 2", "reply 3"]
    assert rest["has_more"] is False and rest["response_metadata"]["next_cursor"] == ""


@pytest.mark.parametrize("call, error", [
    (lambda c: c.chat_postMessage(channel="#nowhere", text="x"), "channel_not_found"),
    (lambda c: c.chat_update(channel="C0ONCALL01", ts="1.000001", text="x"), "message_not_found"),
    (lambda c: c.conversations_replies(channel="C0ONCALL01", ts="1.000001"), "thread_not_found"),
    (lambda c: c.users_info(user="U0NOBODY"), "user_not_found"),
    pytest.param(lambda c: c.chat_postMessage(channel="#oncall"), "no_text",
                 marks=pytest.mark.filterwarnings("ignore:The top-level `text` argument")),
])
def test_errors_come_back_as_slack_api_errors(slack_web, call, error):
    with pytest.raises(SlackApiError) as raised:
        call(slack_web)
    assert raised.value.response.status_code == 200
    assert raised.value.response["ok"] is False and raised.value.response["error"] == error


def test_tokens_are_checked(slack_api, slack_web):
    from slack_sdk import WebClient

    bad = WebClient(token="xoxb-revoked", base_url=slack_api.base_url + "/api/")
    with pytest.raises(SlackApiError, match="invalid_auth"):
        bad.auth_test()
    app_level = WebClient(token=slack_api.app_token, base_url=slack_api.base_url + "/api/")
    with pytest.raises(SlackApiError, match="not_allowed_token_type"):
        app_level.chat_postMessage(channel="#oncall", text="x")
    with pytest.raises(SlackApiError, match="not_allowed_token_type"):
        slack_web.apps_connections_open(app_token=slack_api.bot_token)
    assert slack_web.auth_test()["user_id"] == "U0CRASHBOT"


def test_missing_scope_names_the_scope(slack_api, slack_web):
    slack_api.scopes = ("chat:write",)
    with pytest.raises(SlackApiError) as raised:
        slack_web.users_info(user="U0CRASHBOT")
    assert raised.value.response["error"] == "missing_scope" and raised.value.response["needed"] == "users:read"


def test_human_messages_cannot_be_updated_by_the_bot(slack_api, slack_web):
    human = slack_api.workspace.post("#oncall", user="U0DANA0001", text="why is 48213 pending?")
    with pytest.raises(SlackApiError, match="cant_update_message"):
        slack_web.chat_update(channel="C0ONCALL01", ts=human["ts"], text="x")


def test_rate_limit_has_retry_after_and_sdk_retries(slack_api, slack_web):
    slack_api.fail("chat.postMessage", "ratelimited", times=1, retry_after=1)
    with pytest.raises(SlackApiError) as raised:
        slack_web.chat_postMessage(channel="#oncall", text="x")
    assert raised.value.response.status_code == 429
    assert raised.value.response.headers["retry-after"] == "1"

    slack_api.fail("chat.postMessage", "ratelimited", times=1, retry_after=1)
    slack_web.retry_handlers = [RateLimitErrorRetryHandler(max_retry_count=1)]
    started = time.monotonic()
    assert slack_web.chat_postMessage(channel="#oncall", text="x")["ok"]
    assert time.monotonic() - started >= 1  # the SDK waited as Retry-After said
    assert [c.status for c in slack_api.calls("chat.postMessage")] == [429, 429, 200]


def test_ephemeral_and_response_url(slack_api, slack_web):
    from slack_sdk.webhook import WebhookClient

    slack_api.workspace.add_user("U0DANA0001", "dana")
    answer = slack_web.chat_postEphemeral(channel="C0ONCALL01", user="U0DANA0001", text="only you")
    assert answer["message_ts"] and slack_api.ephemeral[0]["user"] == "U0DANA0001"
    with pytest.raises(SlackApiError, match="user_not_in_channel"):
        slack_web.chat_postEphemeral(channel="C0ONCALL01", user="U0NOBODY", text="x")
    response = WebhookClient(slack_api.response_url("a1")).send(text="done", replace_original=True)
    assert response.status_code == 200 and response.body == "ok"
    assert slack_api.responses == [{"text": "done", "replace_original": True, "_path": "/response/a1"}]


def test_json_without_charset_gets_slacks_warning(slack_api):
    import json
    import urllib.request

    request = urllib.request.Request(slack_api.base_url + "/api/auth.test", data=json.dumps({}).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {slack_api.bot_token}"})
    body = json.loads(urllib.request.urlopen(request).read())
    assert body["ok"] and body["response_metadata"]["warnings"] == ["missing_charset"]


def test_stopping_the_socket_mode_server_ends_its_threads(slack_api):
    """A harness thread left blocked in accept() or a read lives until the interpreter ends it."""
    import socket as sockets

    from slack_socket import SlackSocketServer

    shared = slack_api.socket_url  # the session's own Socket Mode server: given back after
    server = SlackSocketServer(slack_api).start()
    client = sockets.create_connection(("127.0.0.1", server.port))
    try:
        # The accept loop and the connection's thread, blocked in its handshake read.
        deadline = time.monotonic() + 60
        while len(server._threads) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(server._threads) == 2
        server.stop()
        assert [t.name for t in server._threads if t.is_alive()] == []
    finally:
        client.close()
        slack_api.socket_url = shared
