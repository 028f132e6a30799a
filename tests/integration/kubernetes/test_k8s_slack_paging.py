"""Paged in Slack by `crashcart watch --cluster cluster.yaml`, as a user runs it (issue 12): each
process is a real `crashcart` subprocess, the cluster is the loopback Kubernetes API server and
Slack is the loopback Web API (tests/harness/slack_api.py). The Slack notifier has no token of its
own: it uses the `slack:` section's. The incident `watch` opens is posted once to the configured
channel; the approval moves it on, and that updates the same message (chat.update, same ts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from slack_api import SlackApiServer
from test_k8s_agent import ALLOW_ALL, oom_job

CHANNEL = "C0ONCALL01"  # "#oncall" in the loopback workspace
POD = "biencoder-idx-k2l9v"


@pytest.fixture
def slack_api():
    server = SlackApiServer().start()
    yield server
    server.stop()


def _crashcart(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crashcart.agent.interfaces.cli", *args], cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **env},
                          capture_output=True, text=True, timeout=120)


def _pages(slack_api) -> list[dict]:
    """The channel's top-level messages (a page; its thread's replies are not pages)."""
    return [m for m in slack_api.messages(CHANNEL) if m.get("thread_ts") in (None, m["ts"])]


def test_watch_posts_its_incident_to_slack_and_the_approval_updates_that_message(lab, slack_api, tmp_path):
    oom_job(lab)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "name": "loopback", "backend": "kubernetes",
        "kubernetes": {"connection": {"kubeconfig": str(lab.kubeconfig), "context": "loopback"}, "namespaces": ["train"]},
        "guard": {**ALLOW_ALL, "approvers": ["alice"], "approval": [{"tool": "resubmit", "approvers": ["alice"]}]},
        "slack": {"bot_token_env": "CRASHCART_SLACK_BOT", "api_url": slack_api.base_url + "/api/"},
        "notifiers": [{"kind": "slack", "channel": "#oncall", "backoff_seconds": 0}],
    }))
    env = {"CRASHCART_SLACK_BOT": slack_api.bot_token, "SLACK_BOT_TOKEN": "xoxb-not-this-one"}
    state = ["--state-dir", str(tmp_path / "state")]

    watched = _crashcart("watch", "--cluster", str(cluster), "--polls", "1", "--interval", "0",
                         "--lookback-minutes", "10", *state, cwd=tmp_path, env=env)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    incident = next(line.split()[0] for line in watched.stdout.splitlines() if line.startswith("inc-"))
    assert "awaiting_approval" in watched.stdout, watched.stdout
    [page] = _pages(slack_api)
    assert page["bot_id"] and incident in page["text"] and "awaiting_approval" in page["text"]
    assert {c.token for c in slack_api.calls()} == {slack_api.bot_token}
    assert slack_api.calls("chat.update") == []

    approved = _crashcart("approve", incident, "--cluster", str(cluster), "--approver", "alice", *state,
                          cwd=tmp_path, env=env)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    [update] = slack_api.calls("chat.update")
    assert (update.params["channel"], update.params["ts"]) == (CHANNEL, page["ts"])
    [page_now] = _pages(slack_api)  # the same message, changed in place: no second page
    assert page_now["ts"] == page["ts"] and "remediated" in page_now["text"], page_now["text"]
    replies = [m for m in slack_api.messages(CHANNEL) if m.get("thread_ts") == page["ts"] and m["ts"] != page["ts"]]
    assert any("awaiting_approval → remediated" in r["text"] for r in replies), replies
    resubmitted = [j["metadata"]["name"] for j in lab.all("batch/v1", "Job")]
    assert len(resubmitted) == 2, resubmitted  # the approved resubmit ran

    # The next poll: nothing new on the cluster, nothing new in Slack.
    calls = len(slack_api.calls())
    again = _crashcart("watch", "--cluster", str(cluster), "--polls", "1", "--interval", "0", *state,
                       cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "poll: nothing new" in again.stdout and len(slack_api.calls()) == calls
