"""The loopback Slack servers (tests/harness/slack_api.py, slack_socket.py), started once per
session and emptied before each test. Both are the project's own and need only the standard
library (slack_sdk and Bolt come with the `test` extra), so nothing here skips.

    def test_x(slack_api, slack_web):          # a WebClient with the bot token, no retries
        slack_web.chat_postMessage(channel="#oncall", text="hi")
        assert slack_api.calls("chat.postMessage")
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))

from slack_api import SlackApiServer  # noqa: E402
from slack_socket import SlackSocketServer  # noqa: E402


@pytest.fixture(scope="session")
def _slack_servers():
    api = SlackApiServer().start()
    socket = SlackSocketServer(api).start()
    yield api, socket
    socket.stop()
    api.stop()


@pytest.fixture
def slack_api(_slack_servers) -> SlackApiServer:
    api, socket = _slack_servers
    socket.reset()
    api.reset()
    return api


@pytest.fixture
def slack_socket(_slack_servers, slack_api) -> SlackSocketServer:
    return _slack_servers[1]


@pytest.fixture
def slack_web(slack_api):
    """slack_sdk's WebClient as a user's app builds it, pointed at the loopback server."""
    from slack_sdk import WebClient

    client = WebClient(token=slack_api.bot_token, base_url=slack_api.base_url + "/api/")
    client.retry_handlers = []  # a test that wants retries adds them itself
    return client
