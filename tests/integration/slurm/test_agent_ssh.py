"""The agent on the real cluster over SSH: crashcart logs in to a login node (the loopback
sshd) with a key, and reaches the compute nodes over SSH too."""

from __future__ import annotations

import logging
import secrets

from crashcart.tools.backends.slurm import SlurmBackend, SlurmSettings
from slurmlab import SlurmLab, new_job, run_agent

NCCL_LOOPBACK = """#!/bin/bash
# Two-rank NCCL init that only works when NCCL keeps off the loopback interface.
h=$(hostname)
echo "$h:$$:$$ [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ${NCCL_SOCKET_IFNAME:-<unset>}"
case "${NCCL_SOCKET_IFNAME:-}" in
  ^lo*)
    echo "$h:$$:$$ [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>"
    echo "$(date -u +%Y-%m-%dT%H:%M:%S) step 10 loss 2.10"
    exit 0 ;;
esac
cat <<EOF
$h:$$:$$ [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>
$h:$$:$$ [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
$h:$$:$$ [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 127.0.0.1<43237> failed : Connection refused
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
EOF
exit 1
"""

SLEEPER = "#!/bin/bash\necho \"$(date -u +%Y-%m-%dT%H:%M:%S) step 1 loss 3.10\"\nsleep 300\n"


def test_nccl_on_loopback_is_resubmitted_with_the_interface_excluded(lab: SlurmLab, tmp_path):
    script = lab.script("ddp.sh", NCCL_LOOPBACK)
    old = lab.sbatch(script, "-J", "ddp-init", "-w", "n2", "-o", "ddp-%j.out",
                     "--export=ALL,NCCL_SOCKET_IFNAME=lo")
    assert lab.wait_state(old, "FAILED") == "FAILED"

    backend = lab.backend(via="ssh")
    state = run_agent(backend, {"kind": "job_failed", "job": old}, tmp_path / "s.duckdb")

    assert state["diagnosis"]["label"] == "nccl_socket_interface"
    assert state["diagnosis"]["changes"] == {"env.NCCL_SOCKET_IFNAME": "^lo,docker,virbr,veth,cni,br-"}
    assert all(o["ok"] for o in state["observations"]), [o["error"] for o in state["observations"]]
    new = new_job(state)
    assert lab.wait_state(new, "COMPLETED") == "COMPLETED"
    # The variable reached the job (a comma in it cannot go through --export in Slurm 22.05,
    # so crashcart exports it by name from sbatch's own environment).
    log = (lab.jobs / f"ddp-{new}.out").read_text()
    assert "NCCL_SOCKET_IFNAME set by environment to ^lo,docker" in log
    submit = lab.wait_for("accounting to record the submit line", lambda: lab.cli(
        "sacct", "-n", "-X", "-P", "-j", new, "-o", "SubmitLine").strip())
    assert "--export=ALL,NCCL_SOCKET_IFNAME " in submit and f"resubmit of {old}" in lab.job(new)["Comment"]


def test_node_down_over_ssh_with_an_encrypted_key(lab: SlurmLab, tmp_path, monkeypatch, caplog, capsys):
    """The passphrase comes from the environment, and nothing crashcart prints, logs or
    records holds it."""
    caplog.set_level(logging.DEBUG)
    passphrase = (lab.sshd.dir / "passphrase").read_text().strip()
    monkeypatch.setenv("CRASHCART_TEST_KEY_PASSPHRASE", passphrase)
    ssh = lab.sshd.ssh(key_file=lab.sshd.encrypted_key, key_passphrase_env="CRASHCART_TEST_KEY_PASSPHRASE")
    settings = SlurmSettings(env={"SLURM_CONF": lab.conf}, history_days=1,
                             resubmit={"script_dir": str(lab.jobs / "scripts")},
                             connection={"method": "ssh", "ssh": ssh}, node_access={"method": "ssh"})
    backend = SlurmBackend(settings)
    node = lab.reserved_node("n4")  # one job lost with its node is node_failure, not a crash with many victims
    script = lab.script("pretrain4.sh", SLEEPER)
    old = lab.sbatch(script, "-J", "pretrain-b", "--no-requeue", "-w", node, "-o", "p4-%j.out")
    lab.wait_state(old, "RUNNING")
    new = None
    try:
        lab.cli("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test: kernel panic")
        lab.wait_state(old, "NODE_FAIL")
        state = run_agent(backend, {"kind": "job_failed", "job": old}, tmp_path / "s.duckdb")

        node_state, reason = lab.node(node)
        assert "drain" in node_state and reason.startswith(f"crashcart {state['incident_id']}: node_failure")
        new = new_job(state)
        assert lab.job(new)["ExcNodeList"] == node

        seen = [caplog.text, *capsys.readouterr(), repr(settings), settings.model_dump_json(),
                repr(backend.transport), str(state), (tmp_path / "s.duckdb").read_bytes().decode("latin-1")]
        assert not [i for i, text in enumerate(seen) if passphrase in text]
        assert secrets.compare_digest(passphrase, passphrase)  # the secret was real and non-empty
        assert len(passphrase) >= 16
    finally:
        lab.cancel(new)
        lab.resume(node)
