"""Escalations reach people (issue 8, item 6): a webhook and SMTP email against real loopback
servers (http.server, aiosmtpd), retries with backoff, a dead-letter record in the store, and
secrets that never show."""

from __future__ import annotations

import json
import socket
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from crashcart.agent.config import ClusterConfigError, parse_cluster_config
from crashcart.agent.interfaces.cli import app
from crashcart.agent.notify import Dispatcher, parse_notifiers
from crashcart.agent.store import IncidentStore

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
AT = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)
TOKEN = "s3cr3t-webhook-token-7f1d"
PASSWORD = "hunter2-smtp-pass-99c"
ESCALATION = {
    "tool": "escalate", "action_id": "a1b2c3d4e5f60718", "decision": "allow", "result": {"ok": True},
    "args": {"team": "hardware", "severity": "high", "summary": "gpu-b07: Xid 79, GPU fell off the bus",
             "evidence": ["NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus."],
             "reason": "crashcart: hardware fault"},
}


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that answers each POST with the next status in `script`."""

    def __init__(self, script: list[int]):
        self.script, self.requests = list(script), []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), json.loads(body)))
                status = receiver.script.pop(0) if receiver.script else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/oncall"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(script=()):
        made.append(Receiver(list(script)))
        return made[-1]

    yield make
    for r in made:
        r.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inbox_class():
    """An aiosmtpd handler that keeps what it receives (aiosmtpd imported only where used)."""
    from aiosmtpd.handlers import Message

    class Inbox(Message):
        def __init__(self):
            super().__init__()
            self.messages = []

        def handle_message(self, message):
            self.messages.append(message)

    return Inbox


@pytest.fixture
def smtp_server():
    """A real SMTP server (aiosmtpd) on loopback that takes AUTH LOGIN/PLAIN with one password."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult

    Inbox = _inbox_class()

    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"crashcart" and auth_data.password == PASSWORD.encode()
        return AuthResult(success=ok)

    inbox = Inbox()
    # The port is picked free here and bound by the controller after: anyone on the machine may
    # take it in between (aiosmtpd cannot bind port 0 and say which). Then another one is tried.
    for attempt in range(3):
        controller = Controller(inbox, hostname="127.0.0.1", port=_free_port(), authenticator=authenticator,
                                auth_require_tls=False)
        try:
            controller.start()
            break
        except OSError:
            if attempt == 2:
                raise
    yield controller, inbox
    controller.stop()


def _store():
    return IncidentStore(":memory:")


def test_webhook_posts_json_with_the_token_and_retries_with_backoff(receiver, monkeypatch):
    monkeypatch.setenv("ONCALL_TOKEN", TOKEN)
    r = receiver([503, 502])
    waits = []
    store = _store()
    [hook] = parse_notifiers([{"kind": "webhook", "url": r.url, "token_env": "ONCALL_TOKEN", "backoff_seconds": 0.5}])
    Dispatcher(store, [hook], sleep=waits.append).deliver("h100-east", "inc-1", ESCALATION, AT)
    assert len(r.requests) == 3
    assert waits == [0.5, 1.0]
    headers, body = r.requests[-1]
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"] == "application/json"
    assert headers["Idempotency-Key"] == "inc-1/a1b2c3d4e5f60718"
    assert body["event"] == "escalate" and body["team"] == "hardware" and body["severity"] == "high"
    assert body["incident_id"] == "inc-1" and body["cluster"] == "h100-east"
    assert "Xid" in body["evidence"][0]
    rows = {d.notifier: d for d in store.deliveries("inc-1")}
    assert rows["store"].status == "delivered"
    assert (rows["webhook"].status, rows["webhook"].attempts) == ("delivered", 3)


def test_a_webhook_that_keeps_failing_leaves_a_dead_letter_and_the_escalation_is_kept(receiver):
    r = receiver([500] * 10)
    store = _store()
    hooks = parse_notifiers([{"kind": "webhook", "url": r.url, "retries": 2, "backoff_seconds": 0}])
    Dispatcher(store, hooks, sleep=lambda s: None).deliver("c", "inc-2", ESCALATION, AT)
    assert len(r.requests) == 3
    rows = {d.notifier: d for d in store.deliveries("inc-2")}
    assert rows["webhook"].status == "dead_letter" and rows["webhook"].attempts == 3
    assert "HTTP 500" in rows["webhook"].error
    assert rows["webhook"].payload["summary"] == ESCALATION["args"]["summary"]
    assert rows["store"].status == "delivered"
    assert store.undelivered_counts(["inc-2"]) == {"inc-2": 1}


def test_a_client_error_is_not_retried(receiver):
    r = receiver([404])
    store = _store()
    Dispatcher(store, parse_notifiers([{"kind": "webhook", "url": r.url}]), sleep=lambda s: None).deliver(
        "c", "inc-3", ESCALATION, AT)
    assert len(r.requests) == 1
    [row] = [d for d in store.deliveries("inc-3") if d.notifier == "webhook"]
    assert (row.status, row.attempts) == ("dead_letter", 1)


def test_a_delivered_notifier_is_not_sent_twice_on_resume(receiver):
    r = receiver()
    store = _store()
    d = Dispatcher(store, parse_notifiers([{"kind": "webhook", "url": r.url}]), sleep=lambda s: None)
    d.deliver("c", "inc-4", ESCALATION, AT)
    d.deliver("c", "inc-4", ESCALATION, AT)
    assert len(r.requests) == 1


def test_a_missing_token_variable_is_named_and_no_secret_is_sent(receiver, monkeypatch):
    monkeypatch.delenv("ONCALL_TOKEN", raising=False)
    r = receiver()
    store = _store()
    Dispatcher(store, parse_notifiers([{"kind": "webhook", "url": r.url, "token_env": "ONCALL_TOKEN"}]),
               sleep=lambda s: None).deliver("c", "inc-5", ESCALATION, AT)
    assert r.requests == []
    [row] = [d for d in store.deliveries("inc-5") if d.notifier == "webhook"]
    assert row.status == "dead_letter" and "ONCALL_TOKEN" in row.error


def test_email_goes_through_a_real_smtp_server_with_a_password_from_a_file(smtp_server, tmp_path):
    controller, inbox = smtp_server
    secret = tmp_path / "smtp-password"
    secret.write_text(PASSWORD + "\n")
    store = _store()
    mail = parse_notifiers([{"kind": "email", "host": "127.0.0.1", "port": controller.port, "username": "crashcart",
                             "password_file": str(secret), "sender": "crashcart@example.org",
                             "to": ["gpu-oncall@example.org", "hw@example.org"]}])
    Dispatcher(store, mail, sleep=lambda s: None).deliver("h100-east", "inc-6", ESCALATION, AT)
    [message] = inbox.messages
    assert message["To"] == "gpu-oncall@example.org, hw@example.org"
    assert "high escalation to hardware" in message["Subject"] and "inc-6" in message["Subject"]
    body = message.get_payload()
    assert "Xid 79" in body and "crashcart incidents show inc-6" in body
    assert [d.status for d in store.deliveries("inc-6")] == ["delivered", "delivered"]


def test_a_wrong_smtp_password_is_a_dead_letter_that_does_not_show_it(smtp_server, monkeypatch):
    controller, inbox = smtp_server
    monkeypatch.setenv("SMTP_PASSWORD", "wrong-" + PASSWORD)
    store = _store()
    mail = parse_notifiers([{"kind": "email", "host": "127.0.0.1", "port": controller.port, "username": "crashcart",
                             "password_env": "SMTP_PASSWORD", "sender": "c@example.org", "to": ["x@example.org"],
                             "timeout": 2}])  # aiosmtpd stalls after a refused login; no need to wait 15 s
    Dispatcher(store, mail, sleep=lambda s: None).deliver("c", "inc-7", ESCALATION, AT)
    assert inbox.messages == []
    [row] = [d for d in store.deliveries("inc-7") if d.notifier == "email"]
    assert row.status == "dead_letter" and row.attempts == 1 and "refused" in row.error
    assert PASSWORD not in row.error and PASSWORD not in json.dumps(row.payload)


def test_an_smtp_server_that_is_down_is_retried_then_dead_lettered():
    store = _store()
    mail = parse_notifiers([{"kind": "email", "host": "127.0.0.1", "port": _free_port(), "sender": "c@example.org",
                             "to": ["x@example.org"], "retries": 1, "timeout": 2}])
    Dispatcher(store, mail, sleep=lambda s: None).deliver("c", "inc-8", ESCALATION, AT)
    [row] = [d for d in store.deliveries("inc-8") if d.notifier == "email"]
    assert (row.status, row.attempts) == ("dead_letter", 2)


@pytest.mark.parametrize("entry, message", [
    ({"kind": "pager", "url": "x"}, "notifiers[0].kind: 'pager' is not a notifier kind"),
    ({"kind": "webhook", "url": "http://h/x", "tokn_env": "T"}, "notifiers[0].tokn_env: unknown field"),
    ({"kind": "webhook", "url": "file:///etc/passwd"}, "notifiers[0]: url 'file:///etc/passwd' is not an http(s) URL"),
    ({"kind": "email", "host": "h", "sender": "a@b", "to": []}, "notifiers[0].to"),
    ({"kind": "email", "host": "h", "sender": "a@b", "to": ["x@y"], "password_env": "P"}, "a password needs a username"),
    ({"kind": "webhook", "url": "http://h/x", "retries": -1}, "notifiers[0].retries"),
])
def test_a_broken_notifiers_section_names_the_file_and_the_field(entry, message):
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_config({"name": "c", "backend": "slurm", "notifiers": [entry]}, "cluster.yaml")
    assert str(info.value).startswith("cluster.yaml: ") and message in str(info.value)


def test_an_investigation_that_failed_is_escalated_through_the_cluster_notifiers(receiver, smtp_server, tmp_path,
                                                                                monkeypatch):
    """End to end: the cluster cannot be reached, the escalation goes out by webhook and email,
    and a webhook that is down shows in `crashcart incidents` while the email still arrived."""
    controller, inbox = smtp_server
    monkeypatch.setenv("SMTP_PASSWORD", PASSWORD)
    down = f"http://127.0.0.1:{_free_port()}/hooks/down"
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # no cluster configured: every Slurm command fails at once
    config = {
        "name": "unreachable", "backend": "slurm",
        "slurm": {"connection": {"method": "local"}, "env": {"SLURM_CONF": str(conf)}},
        "guard": {"mode": "autonomous", "permissions": [{"tool": "escalate"}]},
        "notifiers": [
            {"kind": "webhook", "name": "pager-hook", "url": down, "retries": 1, "backoff_seconds": 0},
            {"kind": "email", "host": "127.0.0.1", "port": controller.port, "username": "crashcart",
             "password_env": "SMTP_PASSWORD", "sender": "crashcart@example.org", "to": ["infra@example.org"]},
        ],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    state = tmp_path / "state"
    runner = CliRunner()
    out = runner.invoke(app, ["investigate", "--cluster", str(path), "--job", "48213", "--state-dir", str(state)], env=ENV)
    assert out.exit_code == 3, out.output
    [message] = inbox.messages
    assert "escalation to infra" in message["Subject"]
    listing = runner.invoke(app, ["incidents", "--state-dir", str(state)], env=ENV)
    assert listing.exit_code == 0, listing.output
    assert "investigation_failed" in listing.output and "1 undelivered" in listing.output
    assert PASSWORD not in out.output + listing.output


def _watcher(tmp_path, entries):
    """`watch` on a recorded Xid 79 incident: it escalates to hardware, then waits for a drain's
    approval, so nothing resumes it: only the poll can send the escalation again."""
    from crashcart.agent.guard import policy_from_dict
    from crashcart.agent.policies.playbook import PlaybookPolicy
    from crashcart.agent.runner import make_deps
    from crashcart.agent.watch import Watcher, WatchSettings
    from crashcart.evals.scenario import BUNDLED_DIR, load_scenario
    from crashcart.tools.backends.fixture import FixtureBackend

    sc = load_scenario(BUNDLED_DIR / "hardware" / "xid79-guarded-drain-needs-approval.yaml")
    deps = make_deps(FixtureBackend(sc.cluster, sc.backend), PlaybookPolicy(), policy_from_dict(sc.guard),
                     IncidentStore(str(tmp_path / "incidents.duckdb")), cluster="gpu-prod",
                     notifiers=parse_notifiers(entries))
    deps.notifier.sleep = lambda s: None
    return Watcher(deps, cluster="gpu-prod", settings=WatchSettings(interval_s=0))


def test_watch_retries_a_dead_lettered_webhook_at_every_poll_until_it_gets_through(receiver, tmp_path):
    from crashcart.agent.interfaces.incident_view import action_views

    r = receiver([500, 503, 200])
    watcher = _watcher(tmp_path, [{"kind": "webhook", "url": r.url, "retries": 0}])
    store = watcher.deps.store
    [incident] = watcher.poll_once()
    assert store.get_incident(incident).incident.status == "awaiting_approval"

    def hook_rows():
        return [(d.status, d.attempts) for d in store.deliveries(incident) if d.notifier == "webhook"]

    assert hook_rows() == [("dead_letter", 1)]
    assert watcher.poll_once() == []  # nothing new on the cluster; the escalation is tried again
    assert hook_rows() == [("dead_letter", 1), ("dead_letter", 1)]
    assert store.undelivered_counts([incident]) == {incident: 1}  # one escalation, however often tried
    watcher.poll_once()
    assert hook_rows() == [("dead_letter", 1), ("dead_letter", 1), ("delivered", 1)]
    assert store.undelivered_counts([incident]) == {}
    watcher.poll_once()
    assert len(r.requests) == 3  # delivered: never sent again
    first, *later = [body for _, body in r.requests]
    assert all(body == first for body in later) and first["team"] == "hardware" and first["incident_id"] == incident
    assert len({headers["Idempotency-Key"] for headers, _ in r.requests}) == 1  # the receiver can drop repeats
    assert store.get_incident(incident).incident.status == "awaiting_approval"  # retried by the poll, not a resume
    [escalation] = [v for v in action_views(store.get_incident(incident), store.deliveries(incident))
                    if v.tool == "escalate"]
    assert "webhook: delivered (after 2 failed tries)" in escalation.deliveries


def test_watch_retries_email_when_the_smtp_server_comes_back(tmp_path):
    from aiosmtpd.controller import Controller

    Inbox = _inbox_class()

    port = _free_port()  # nothing listens there yet
    watcher = _watcher(tmp_path, [{"kind": "email", "host": "127.0.0.1", "port": port, "sender": "c@example.org",
                                   "to": ["hw@example.org"], "retries": 1, "timeout": 2}])
    store = watcher.deps.store
    [incident] = watcher.poll_once()
    assert [(d.status, d.attempts) for d in store.deliveries(incident) if d.notifier == "email"] == [("dead_letter", 2)]
    watcher.poll_once()  # still down: one more try a poll, recorded
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        watcher.poll_once()
    finally:
        controller.stop()
    rows = [(d.status, d.attempts) for d in store.deliveries(incident) if d.notifier == "email"]
    assert rows == [("dead_letter", 2), ("dead_letter", 1), ("delivered", 1)]
    [message] = inbox.messages
    assert "escalation to hardware" in message["Subject"] and incident in message["Subject"]
    assert store.undelivered_counts([incident]) == {}
