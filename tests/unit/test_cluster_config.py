"""cluster.yaml: strict, secret-free, errors naming the file and the field."""

from __future__ import annotations

import logging

import pytest

from crashcart.agent.config import ClusterConfigError, load_cluster_config
from crashcart.tools.transport import LocalTransport, SSHTransport

GOOD = """\
name: gpu-prod
backend: slurm
slurm:
  connection:
    method: ssh
    ssh:
      hosts: [login1.example.org, login2.example.org]
      user: crashcart
      key_file: ~/.ssh/crashcart_ed25519
      key_passphrase_env: CRASHCART_TEST_PASSPHRASE
      known_hosts: ~/.ssh/known_hosts
  env: {SLURM_CONF: /etc/slurm/slurm.conf}
  node_access: {method: ssh}
  resubmit:
    config: file
    config_file: {path: "{workdir}/train.yaml", pass_as_env: TRAIN_CONFIG}
guard: guard.yaml
"""
GUARD = "mode: autonomous\npermissions:\n  - tool: node_drain\n    partitions: [h100]\n"


def write(tmp_path, text, guard=GUARD):
    (tmp_path / "guard.yaml").write_text(guard)
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_a_full_config_loads_with_its_guard(tmp_path):
    config, guard = load_cluster_config(write(tmp_path, GOOD))
    assert config.name == "gpu-prod" and guard.mode == "autonomous"
    assert guard.permissions[0].partitions == ("h100",)
    backend = config.make_backend()
    assert isinstance(backend.transport, SSHTransport) and backend.transport.target.hosts == (
        "login1.example.org", "login2.example.org")
    assert backend.transport.env == {"SLURM_CONF": "/etc/slurm/slurm.conf", "TZ": "UTC"}


def test_local_is_the_default_and_the_guard_can_be_inline(tmp_path):
    config, guard = load_cluster_config(write(tmp_path, "name: lab\nbackend: slurm\nguard: {mode: observe}\n"))
    assert isinstance(config.make_backend().transport, LocalTransport) and guard.mode == "observe"
    _, default = load_cluster_config(write(tmp_path, "name: lab\nbackend: slurm\n"))
    assert default.mode == "dry_run"


@pytest.mark.parametrize("change, field", [
    (("      user: crashcart\n", "      usr: crashcart\n"), "slurm.connection.ssh.usr: unknown field"),
    (("backend: slurm\n", "backend: lsf\n"), "backend:"),
    (("  node_access: {method: ssh}\n", "  node_access: {method: telnet}\n"), "slurm.node_access.method"),
    (("      hosts: [login1.example.org, login2.example.org]\n", "      hosts: []\n"), "slurm.connection"),
    (("pass_as_env: TRAIN_CONFIG", "format: yaml"), "slurm.resubmit.config_file"),
])
def test_errors_name_the_file_and_the_field(tmp_path, change, field):
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(ClusterConfigError) as e:
        load_cluster_config(path)
    assert str(e.value).startswith(f"{path}: ") and field in str(e.value)


def test_a_bad_guard_file_is_named_too(tmp_path):
    path = write(tmp_path, GOOD, guard="mode: reckless\n")
    with pytest.raises(ClusterConfigError, match=r"cluster.yaml: guard: .*guard.yaml: mode"):
        load_cluster_config(path)


@pytest.mark.parametrize("key", ["password", "passphrase", "key_passphrase"])
def test_secrets_are_refused_in_the_file_and_never_echoed(tmp_path, key):
    secret = "hunter2-do-not-print"
    path = write(tmp_path, GOOD.replace("      user: crashcart\n", f"      user: crashcart\n      {key}: {secret}\n"))
    with pytest.raises(ClusterConfigError) as e:
        load_cluster_config(path)
    assert "secrets never go in the config file" in str(e.value) and "_env" in str(e.value)
    assert secret not in str(e.value)


def test_secrets_named_by_env_are_not_in_any_repr_or_log(tmp_path, monkeypatch, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    secret = "correct-horse-battery-staple-77"
    monkeypatch.setenv("CRASHCART_TEST_PASSPHRASE", secret)
    config, _ = load_cluster_config(write(tmp_path, GOOD))
    backend = config.make_backend()
    target = backend.transport.target
    assert target.passphrase.reveal() == secret  # read only when a connection needs it
    shown = [repr(config), str(config), config.model_dump_json(), repr(backend.transport), repr(target),
             caplog.text, *capsys.readouterr()]
    assert not [s for s in shown if secret in s]
    assert "CRASHCART_TEST_PASSPHRASE" in repr(config)  # where it comes from is fine to show


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ClusterConfigError, match="nowhere.yaml: cannot read"):
        load_cluster_config(tmp_path / "nowhere.yaml")
