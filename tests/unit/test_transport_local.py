"""LocalTransport: the same results a shell would give, and the SSH command line it mirrors."""

from __future__ import annotations

import pytest

from crashcart.tools.transport import LocalTransport, SSHTarget, SSHTransport, TransportError


def test_runs_with_env_stdin_and_status():
    t = LocalTransport(env={"CRASHCART_X": "a,b c"})
    result = t.run(["sh", "-c", 'cat; echo "$CRASHCART_X" >&2; exit 4'], input="in\n")
    assert (result.rc, result.stdout, result.stderr, result.ok) == (4, "in\n", "a,b c\n", False)


def test_a_missing_command_is_127_like_a_shell():
    result = LocalTransport().run(["crashcart-no-such-command", "x"])
    assert result.rc == 127 and "command not found" in result.stderr


def test_a_slow_command_is_a_transport_error():
    with pytest.raises(TransportError, match="did not finish within 0.2 s"):
        LocalTransport().run(["sleep", "5"], timeout=0.2)


def test_the_ssh_command_line_quotes_every_word():
    t = SSHTransport(SSHTarget(hosts=("login1",)), env={"SLURM_CONF": "/etc/slurm/slurm.conf"})
    line = t.command_line(["scontrol", "update", "NodeName=n3", "State=DRAIN", "Reason=crashcart inc-1: it's hot"])
    assert line == ("env SLURM_CONF=/etc/slurm/slurm.conf scontrol update NodeName=n3 State=DRAIN "
                    "'Reason=crashcart inc-1: it'\"'\"'s hot'")
