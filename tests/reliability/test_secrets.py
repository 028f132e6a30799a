"""A secret never leaves the place it was given in: a key passphrase and a password (read from
the environment the cluster config names), a token in the command environment, and a password
written into a host string appear in no output, store, checkpoint, tape or export.

The login node is a real SSH server on loopback (paramiko's) that takes the key and the
password crashcart offers and refuses them, so the secrets are really read and really used."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import paramiko
import pytest
import yaml

import procs

SECRETS = {"passphrase": "pp-Zq81-never-shown", "password": "pw-Kx77-never-shown",
           "token": "tok-Jw55-never-shown", "host password": "hpw-Rr42-never-shown"}
CRASHED = re.compile(r"^Traceback \(most recent call last\)", re.M)


class _Refuses(paramiko.ServerInterface):
    def __init__(self, offered: list[str]):
        self.offered = offered

    def get_allowed_auths(self, username):
        return "publickey,password"

    def check_auth_publickey(self, username, key):
        self.offered.append("publickey")
        return paramiko.AUTH_FAILED

    def check_auth_password(self, username, password):
        self.offered.append(password)
        return paramiko.AUTH_FAILED


@pytest.fixture
def login_node(tmp_path):
    """An SSH server on 127.0.0.1 that refuses every login; yields (port, known_hosts, offered)."""
    host_key = paramiko.RSAKey.generate(2048)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    offered: list[str] = []
    stop = threading.Event()
    transports: list[paramiko.Transport] = []

    def serve():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            t = paramiko.Transport(conn)
            transports.append(t)
            t.add_server_key(host_key)
            try:
                t.start_server(server=_Refuses(offered))
            except (paramiko.SSHException, EOFError):
                t.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port, known, offered
    stop.set()
    thread.join()  # the accept loop looks at `stop` every 0.2 s
    # Each login's server side is a thread of paramiko's: ended and joined here, not at exit.
    for t in transports:
        t.close()
        t.join(10)
    sock.close()


def _cluster(tmp_path: Path, name: str, ssh: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "backend": "slurm", "slurm": {
        "connection": {"method": "ssh", "ssh": ssh},
        "env": {"SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_JWT": SECRETS["token"]},
        "node_access": {"method": "none"}}, "guard": {"mode": "dry_run", "permissions": [{"tool": "*"}]}}))
    return path


def test_no_secret_in_any_output_store_tape_or_export(tmp_path, login_node):
    port, known, offered = login_node
    key = tmp_path / "id_rsa"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(key), password=SECRETS["passphrase"])
    ssh = {"hosts": ["127.0.0.1"], "port": port, "user": "crashcart", "key_file": str(key),
           "key_passphrase_env": "CC_TEST_PASSPHRASE", "password_env": "CC_TEST_PASSWORD",
           "known_hosts": str(known), "connect_timeout": 5, "retries": 0}
    live = _cluster(tmp_path, "live", ssh)
    in_host = _cluster(tmp_path, "in-host", {**ssh, "hosts": [f"crashcart:{SECRETS['host password']}@127.0.0.1"]})
    env = {"CC_TEST_PASSPHRASE": SECRETS["passphrase"], "CC_TEST_PASSWORD": SECRETS["password"]}
    state = tmp_path / "state"

    outputs = []
    for n, args in enumerate([
        ["investigate", "--cluster", live, "--job", "48213", "--state-dir", state],
        ["watch", "--cluster", live, "--polls", "1", "--interval", "0", "--state-dir", state],
        ["investigate", "--cluster", in_host, "--job", "48213", "--state-dir", state],
        ["watch", "--cluster", in_host, "--polls", "1", "--interval", "0", "--state-dir", state],
        ["incidents", "--state-dir", state],
    ]):
        code, text = procs.run(args, tmp_path / f"{n}.out", env=env)
        assert not CRASHED.search(text), text
        outputs.append(text)
    # The secrets were used: the key was decrypted (a wrong passphrase never gets to offer it)
    # and the password was sent.
    assert "publickey" in offered and SECRETS["password"] in offered, offered
    # The host string with a password was refused, without repeating it.
    assert "hosts[0] is not a plain host name" in outputs[2], outputs[2]

    incidents = re.findall(r"inc-[0-9a-f]{12}", outputs[4])
    assert incidents, outputs[4]
    for n, incident in enumerate(sorted(set(incidents))):
        code, text = procs.run(["export", incident, "--state-dir", state], tmp_path / f"export-{n}.out")
        assert code == 0, text
        outputs.append(text)

    files = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    assert any(p.name == "incidents.duckdb" for p in files) and any("checkpoints" in p.name for p in files)
    found = [(what, where) for what, secret in SECRETS.items()
             for where, blob in [*((f"output {i}", o.encode()) for i, o in enumerate(outputs)),
                                 *((str(p), b) for p, b in files.items())]
             if secret.encode() in blob]
    assert not found, f"secrets leaked: {found}"
    procs.REPORT.append(f"secrets: {len(SECRETS)} secrets, {len(outputs)} outputs and {len(files)} "
          f"state files (store, checkpoints, tapes) checked; 0 leaks")
