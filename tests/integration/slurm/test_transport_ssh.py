"""SSHTransport against a real OpenSSH server on loopback: failover, host keys, keys with
passphrases, retries, timeouts, and commands that must never run twice."""

from __future__ import annotations

import logging
import time

import pytest

from crashcart.tools.transport import Secret, SSHTarget, SSHTransport, TransportError
from slurmlab import Sshd


def target(sshd: Sshd, **over) -> SSHTarget:
    base = dict(hosts=("127.0.0.1",), port=sshd.port, user="root", key_file=sshd.key,
                known_hosts=sshd.known_hosts, connect_timeout=30, retries=1, backoff=0.1)
    return SSHTarget(**{**base, **over})


def test_runs_commands_with_stdin_stderr_and_status(sshd: Sshd):
    t = SSHTransport(target(sshd), env={"CRASHCART_X": "a b"})
    result = t.run(["sh", "-c", 'cat; echo "$CRASHCART_X" >&2; exit 3'], input="piped\n")
    assert (result.rc, result.stdout, result.stderr) == (3, "piped\n", "a b\n")


def test_fails_over_to_the_next_login_host(sshd: Sshd):
    # 127.0.0.2 is loopback too, but nothing listens there: refused, then the next host.
    t = SSHTransport(target(sshd, hosts=("127.0.0.2", "127.0.0.1")))
    assert t.run(["echo", "up"]).stdout == "up\n"
    assert t.where == f"ssh 127.0.0.1:{sshd.port}"


def test_retries_with_backoff_then_names_every_host(sshd: Sshd):
    t = SSHTransport(target(sshd, hosts=("127.0.0.2", "127.0.0.3"), retries=2, backoff=0.2))
    started = time.monotonic()
    with pytest.raises(TransportError) as e:
        t.run(["true"])
    assert time.monotonic() - started >= 0.6  # 0.2 s, then 0.4 s between the three rounds
    assert "127.0.0.2" in str(e.value) and "127.0.0.3" in str(e.value) and "attempt 3" in str(e.value)


def test_unknown_host_is_refused_unless_allowed(sshd: Sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(TransportError, match=r"not in .*known_hosts .*SHA256:"):
        SSHTransport(target(sshd, known_hosts=str(empty))).run(["true"])
    allowed = SSHTransport(target(sshd, known_hosts=str(empty), allow_unknown_hosts=True))
    assert allowed.run(["true"]).rc == 0
    assert empty.read_text() == ""  # accepted for this process only, never written down


def test_a_changed_host_key_is_always_refused(sshd: Sshd):
    for allow in (False, True):
        t = SSHTransport(target(sshd, known_hosts=str(sshd.dir / "wrong_known_hosts"), allow_unknown_hosts=allow))
        with pytest.raises(TransportError, match="does not match known_hosts"):
            t.run(["true"])


def test_encrypted_key_takes_its_passphrase_from_env_or_file(sshd: Sshd, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(TransportError, match="key_passphrase_env or key_passphrase_file"):
        SSHTransport(target(sshd, key_file=sshd.encrypted_key)).run(["true"])
    by_file = SSHTransport(target(sshd, key_file=sshd.encrypted_key, passphrase=Secret(file=sshd.passphrase_file)))
    assert by_file.run(["true"]).rc == 0
    wrong = "not-the-passphrase-0451"
    monkeypatch.setenv("CRASHCART_TEST_WRONG", wrong)
    with pytest.raises(TransportError) as e:
        SSHTransport(target(sshd, key_file=sshd.encrypted_key, passphrase=Secret(env="CRASHCART_TEST_WRONG"))).run(["true"])
    assert wrong not in str(e.value) and wrong not in caplog.text
    with pytest.raises(TransportError, match="CRASHCART_TEST_UNSET"):
        SSHTransport(target(sshd, key_file=sshd.encrypted_key, passphrase=Secret(env="CRASHCART_TEST_UNSET"))).run(["true"])


def test_a_command_that_outlives_its_timeout_is_stopped(sshd: Sshd):
    t = SSHTransport(target(sshd))
    started = time.monotonic()
    with pytest.raises(TransportError, match="did not finish within 1 s"):
        t.run(["sleep", "20"], timeout=1)
    assert time.monotonic() - started < 15  # not the command's 20 s (logging in may take seconds under load)
    assert t.run(["echo", "still usable"]).stdout == "still usable\n"


def test_a_write_is_never_sent_twice_when_the_connection_drops(sshd: Sshd, tmp_path):
    marks = tmp_path / "runs"
    # The command counts its runs, then kills the sshd session serving it: the connection
    # drops after the command was sent.
    drop = ["sh", "-c", f'echo run >> {marks}; kill -9 $PPID']
    t = SSHTransport(target(sshd, retries=2))
    with pytest.raises(TransportError, match="may or may not have run"):
        t.run(drop, retry=False)
    assert marks.read_text().count("run") == 1
    marks.write_text("")
    with pytest.raises(TransportError, match="failed 3 times"):
        t.run(drop)  # a read may be retried: it ran once per attempt
    assert marks.read_text().count("run") == 3
    assert t.run(["echo", "reconnected"]).stdout == "reconnected\n"
