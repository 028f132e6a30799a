"""`crashcart slack` as a person starts it: secrets named in cluster.yaml, the token checked
against the (loopback) Web API, and in HTTP mode a real request URL that Slack's signed
requests reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from slack_app_kit import ALICE, CHANNEL, SIGNING_SECRET, event_body, signed_headers
from slack_api import BOT_USER_ID


def cluster_yaml(tmp_path: Path, api, **slack) -> Path:
    """A Slurm cluster reached on this machine (its commands are not installed here, so an
    investigation fails, which is itself an answer), with the Slack app's settings."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({
        "name": "gpu-test", "backend": "slurm", "slurm": {"connection": {"method": "local"}},
        "slack": {"bot_token_env": "TEST_SLACK_BOT", "signing_secret_env": "TEST_SLACK_SIGNING",
                  "api_url": api.base_url + "/api/", **slack},
    }))
    return path


def crashcart(*args, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crashcart.agent.interfaces.cli", *map(str, args)],
                          env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **env},
                          capture_output=True, text=True, timeout=timeout)


def test_the_cli_imports_no_slack_sdk():
    code = "import sys, crashcart.agent.interfaces.cli; print([m for m in sys.modules if m.startswith('slack')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_secret_is_named_never_shown(tmp_path, slack_api):
    config = cluster_yaml(tmp_path, slack_api)
    out = crashcart("slack", "--cluster", config, "--http", "--state-dir", tmp_path / "s",
                    env={"TEST_SLACK_BOT": slack_api.bot_token})
    assert out.returncode == 2
    assert "TEST_SLACK_SIGNING" in out.stdout and "is not set" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_a_token_slack_refuses_is_a_clear_error(tmp_path, slack_api):
    config = cluster_yaml(tmp_path, slack_api)
    out = crashcart("slack", "--cluster", config, "--http", "--state-dir", tmp_path / "s",
                    env={"TEST_SLACK_BOT": "xoxb-wrong-token-0000", "TEST_SLACK_SIGNING": SIGNING_SECRET})
    assert out.returncode == 2
    assert "Slack refused the bot token" in out.stdout and "invalid_auth" in out.stdout
    assert "xoxb-wrong-token-0000" not in out.stdout + out.stderr


def announced_port(proc: subprocess.Popen, timeout: float) -> tuple[int, list[str]]:
    """The port `crashcart slack --http --port 0` says it serves on, and what it printed before."""
    import queue
    import re
    import threading

    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            assert proc.poll() is None, f"crashcart slack exited {proc.returncode}:\n{''.join(seen)}"
            continue
        seen.append(line)
        served = re.search(r"serving Slack's request URL at http://127\.0\.0\.1:(\d+)/slack/events", line)
        if served:
            return int(served[1]), seen
    raise AssertionError(f"crashcart slack did not say where it serves within {timeout} s:\n{''.join(seen)}")


def post(port: int, body: str, headers: dict[str, list[str]]) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                     headers={k: v[0] for k, v in headers.items()}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_http_mode_answers_a_signed_mention_in_its_thread(tmp_path, slack_api):
    config = cluster_yaml(tmp_path, slack_api)
    env = {**os.environ, "TEST_SLACK_BOT": slack_api.bot_token, "TEST_SLACK_SIGNING": SIGNING_SECRET,
           "NO_COLOR": "1"}
    # Port 0: the server binds a free port and says which. A port picked free here first could be
    # taken by anyone on the machine before the server binds it.
    proc = subprocess.Popen([sys.executable, "-m", "crashcart.agent.interfaces.cli", "slack", "--cluster", str(config),
                             "--http", "--host", "127.0.0.1", "--port", "0", "--state-dir", str(tmp_path / "s")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # Generous: the CLI imports the whole stack, which takes long on a loaded machine.
        port, _ = announced_port(proc, timeout=120)
        assert slack_api.calls("auth.test"), "the token is checked before the server starts"
        asked = slack_api.workspace.post(CHANNEL, user=ALICE, text=f"<@{BOT_USER_ID}> is gpu-b07 healthy?")
        body = event_body({"type": "app_mention", "user": ALICE, "text": asked["text"], "ts": asked["ts"],
                           "channel": CHANNEL, "event_ts": asked["ts"]})
        assert post(port, body, signed_headers(body, content_type="application/json")) == 200
        assert post(port, body, signed_headers(body, content_type="application/json", secret="wrong")) == 401
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            replies = slack_api.workspace.thread(CHANNEL, asked["ts"])[1:]
            if replies and replies[0].get("edited") and "investigation_failed" in json.dumps(replies[0]["blocks"]):
                break
            time.sleep(0.2)
        replies = slack_api.workspace.thread(CHANNEL, asked["ts"])[1:]
        assert len(replies) == 1, replies
        # The cluster's commands cannot run here: "could not investigate" is the answer, never "healthy".
        assert "investigation_failed" in json.dumps(replies[0]["blocks"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
