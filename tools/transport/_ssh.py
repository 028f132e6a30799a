"""Commands on a login node over SSH (paramiko), with failover, checked host keys and retries.

- Hosts are tried in order, starting from the last one that worked; a host that
  is down or slow is skipped and the next one is tried.
- Host keys are checked against known_hosts; an unknown host is refused unless
  the config says `allow_unknown_hosts` (then it is accepted for this process
  only, and its fingerprint logged), and a changed key is always refused.
- Transient network errors (refused, reset, timed out, a dropped session) are
  retried with exponential backoff; authentication and host-key failures are not,
  since retrying cannot fix them.
- A command that changes something (`retry=False`) is never sent twice: if the
  connection drops after it was sent, the caller is told it may have run.
- Secrets (a key passphrase, a password) are read from the environment variable
  or file the config names, when a connection is made, and never kept in a
  repr, an error message or a log line.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shlex
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashcart.tools.transport._base import CommandResult, Transport, TransportError

log = logging.getLogger(__name__)


class HostKeyError(TransportError):
    """A host's key is unknown (and unknown hosts are not allowed) or does not match known_hosts."""


class AuthError(TransportError):
    """The login was refused or the credentials could not be read."""


@dataclass(frozen=True)
class Secret:
    """Where a secret comes from: an environment variable or a file. Never its value."""

    env: str | None = None
    file: str | None = None

    def reveal(self) -> str | None:
        if self.env:
            value = os.environ.get(self.env)
            if value is None:
                raise AuthError(f"environment variable {self.env} (named in the cluster config) is not set")
            return value
        if self.file:
            path = Path(self.file).expanduser()
            try:
                return path.read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as e:
                raise AuthError(f"cannot read the secret file {path} named in the cluster config: "
                                f"{e.strerror or type(e).__name__}") from None
        return None

    def __repr__(self) -> str:  # what it is, never what it holds
        return f"Secret(env={self.env!r})" if self.env else f"Secret(file={self.file!r})"


@dataclass(frozen=True)
class SSHTarget:
    hosts: tuple[str, ...]
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    use_agent: bool = False
    known_hosts: str | None = None
    """None: the user's ~/.ssh/known_hosts."""
    allow_unknown_hosts: bool = False
    connect_timeout: float = 10.0
    command_timeout: float = 60.0
    retries: int = 3
    backoff: float = 0.5
    """Seconds before the first retry; doubled each time."""
    passphrase: Secret | None = field(default=None, repr=False)
    password: Secret | None = field(default=None, repr=False)


def fingerprint(key: Any) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class SSHTransport(Transport):
    def __init__(self, target: SSHTarget, env=None):
        super().__init__(env)
        if not target.hosts:
            raise TransportError("ssh: no hosts configured")
        self.target = target
        self._client: Any = None
        self._host: str | None = None
        self._order = list(target.hosts)

    @property
    def where(self) -> str:  # type: ignore[override]
        return f"ssh {self._host or self.target.hosts[0]}:{self.target.port}"

    def __repr__(self) -> str:
        t = self.target
        return f"SSHTransport(hosts={list(t.hosts)}, port={t.port}, user={t.user!r})"

    # --- running a command ------------------------------------------------------

    def command_line(self, argv: Sequence[str]) -> str:
        env = [f"{k}={v}" for k, v in self.env.items()]
        return shlex.join(["env", *env, *argv] if env else list(argv))

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None,
            retry: bool = True) -> CommandResult:
        argv = tuple(argv)
        line = self.command_line(argv)
        timeout = timeout or self.target.command_timeout
        attempts = self.target.retries + 1
        for attempt in range(attempts):
            client = self._connected()
            sent = [False]
            try:
                rc, out, err = self._exec(client, line, input, timeout, sent, shown=shlex.join(argv))
                return CommandResult(argv, rc, out, err)
            except TransportError:
                raise
            except Exception as e:  # noqa: BLE001 - sorted by _transient below
                host = self._host
                self.close()
                if not _transient(e):
                    raise TransportError(f"ssh {host}: {argv[0]} failed: {_describe(e)}") from None
                if sent[0] and not retry:
                    raise TransportError(
                        f"ssh {host}: the connection dropped after `{argv[0]}` was sent ({_describe(e)}); "
                        "it may or may not have run, so crashcart does not send it again") from None
                if attempt + 1 == attempts:
                    raise TransportError(f"ssh {host}: {argv[0]} failed {attempts} times: {_describe(e)}") from None
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _exec(self, client: Any, line: str, input: str | None, timeout: float, sent: list[bool], shown: str):
        """`shown` is the command for messages: without the environment, which may hold a token."""
        chan = client.get_transport().open_session(timeout=self.target.connect_timeout)
        try:
            chan.exec_command(line)
            sent[0] = True
            if input is not None:
                chan.sendall(input.encode())
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                finished = chan.exit_status_ready() and chan.eof_received
                if (finished or chan.closed) and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    raise TransportError(f"{self.where}: command did not finish within {timeout:g} s: {shown[:200]}")
                if not got:
                    time.sleep(0.005)
            status = chan.recv_exit_status() if chan.exit_status_ready() else -1
            if status == -1:  # paramiko's "no exit status came"
                if not client.get_transport().is_active():
                    # The connection died under the command (a network drop, a killed sshd).
                    raise EOFError("the connection closed before the command's exit status arrived")
                status = 255  # the command died of a signal (ssh reports exit-signal, no status)
            return status, out.decode(errors="replace"), err.decode(errors="replace")
        finally:
            chan.close()

    # --- connecting -------------------------------------------------------------

    def _connected(self) -> Any:
        if self._client is not None:
            transport = self._client.get_transport()
            if transport is not None and transport.is_active():
                return self._client
            self.close()
        errors: list[str] = []
        attempts = self.target.retries + 1
        for attempt in range(attempts):
            only_permanent = True
            for host in list(self._order):
                try:
                    self._client = self._connect(host)
                except Exception as e:  # noqa: BLE001 - sorted by _transient
                    if _transient(e):
                        only_permanent = False
                        errors.append(f"{host}: {_describe(e)} (attempt {attempt + 1})")
                    else:  # a refused key or login: retrying cannot fix it, the next host might
                        errors.append(f"{host}: {_describe(e)}")
                    continue
                self._host = host
                # The host that answered goes first next time.
                self._order.remove(host)
                self._order.insert(0, host)
                return self._client
            if only_permanent:
                break
            if attempt + 1 < attempts:
                self._sleep(attempt)
        raise TransportError("ssh: no login host could be reached: " + "; ".join(dict.fromkeys(errors)))

    def _connect(self, host: str) -> Any:
        paramiko = _paramiko()
        t = self.target
        client = paramiko.SSHClient()
        known = Path(t.known_hosts).expanduser() if t.known_hosts else None
        try:
            if known is not None:
                client.load_host_keys(str(known))
            else:
                client.load_system_host_keys()
        except FileNotFoundError:
            raise HostKeyError(f"known_hosts file {known} does not exist") from None
        client.set_missing_host_key_policy(_policy(paramiko, t.allow_unknown_hosts, known))
        key_file = str(Path(t.key_file).expanduser()) if t.key_file else None
        if key_file and not Path(key_file).is_file():
            raise AuthError(f"key_file {key_file} does not exist")
        try:
            client.connect(
                host, port=t.port, username=t.user, key_filename=key_file,
                passphrase=t.passphrase.reveal() if t.passphrase else None,
                password=t.password.reveal() if t.password else None,
                allow_agent=t.use_agent, look_for_keys=False, timeout=t.connect_timeout,
                banner_timeout=t.connect_timeout, auth_timeout=t.connect_timeout,
            )
        except paramiko.BadHostKeyException as e:
            client.close()
            raise HostKeyError(
                f"host key of {host} does not match known_hosts (got {fingerprint(e.key)}); "
                "refusing to connect") from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise AuthError(f"key_file {key_file} is encrypted: name its passphrase with "
                            "key_passphrase_env or key_passphrase_file") from None
        except paramiko.AuthenticationException as e:
            client.close()
            raise AuthError(f"authentication as {t.user or 'the current user'} refused ({type(e).__name__})") from None
        except Exception:
            client.close()
            raise
        return client

    def _sleep(self, attempt: int) -> None:
        time.sleep(self.target.backoff * (2 ** attempt))

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None


def _paramiko():
    try:
        import paramiko
    except ImportError:
        raise TransportError("SSH needs paramiko: pip install 'crashcart[slurm]'") from None
    return paramiko


def _policy(paramiko: Any, allow_unknown: bool, known: Path | None):
    where = known or "~/.ssh/known_hosts"

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            if not allow_unknown:
                raise HostKeyError(
                    f"host {hostname} is not in {where} ({key.get_name()} {fingerprint(key)}); add its key "
                    "there (ssh-keyscan) or set allow_unknown_hosts: true in the cluster config")
            # Accepted for this process only: known_hosts is never written behind anyone's back.
            client.get_host_keys().add(hostname, key.get_name(), key)
            log.warning("accepting unknown host key of %s: %s %s", hostname, key.get_name(), fingerprint(key))

    return Policy()


def _transient(e: BaseException) -> bool:
    if isinstance(e, (HostKeyError, AuthError)):
        return False
    try:
        import paramiko
    except ImportError:
        paramiko = None
    if paramiko is not None and isinstance(e, (paramiko.AuthenticationException, paramiko.BadHostKeyException)):
        return False
    if paramiko is not None and isinstance(e, paramiko.SSHException):
        return True  # banner errors, a dropped session, "Error reading SSH protocol banner"
    return isinstance(e, (socket.timeout, TimeoutError, ConnectionError, EOFError, OSError))


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text else text
