"""Commands on a compute node (nvidia-smi, the kernel log): over SSH to the node, or as an srun step.

A node that cannot be reached, or lacks the command, gives a sentence saying so
(returned as `unavailable`), never an exception: "nvidia-smi is not on this node"
is itself a finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crashcart.tools.backends.slurm._cli import SlurmCLI
from crashcart.tools.backends.slurm._config import SlurmSettings
from crashcart.tools.backends.slurm._parse import NodeInfo
from crashcart.tools.transport import SSHTransport, Transport, TransportError

MISSING = 127
"""Exit status a node script uses for "the command is not installed"."""
_STATUS = "crashcart-status: "


@dataclass
class NodeOutput:
    stdout: str = ""
    unavailable: str | None = None
    """Why there is no output: unreachable node, missing command, node commands switched off."""
    missing: bool = False


class NodeRunner:
    def __init__(self, settings: SlurmSettings, cli: SlurmCLI):
        self.settings = settings
        self.cli = cli
        self._ssh: dict[str, Transport] = {}

    def run(self, node: NodeInfo, script: str, running_job: str | None = None) -> NodeOutput:
        method = self.settings.node_access.method
        if method == "none":
            return NodeOutput(unavailable="node commands are switched off in the cluster config (node_access: none)")
        if method == "ssh":
            return self._over_ssh(node, script)
        return self._over_srun(node, script, running_job)

    def _over_ssh(self, node: NodeInfo, script: str) -> NodeOutput:
        access = self.settings.node_access
        host = access.host.format(name=node.name, address=node.address or node.name,
                                  hostname=node.hostname or node.name)
        transport = self._ssh.get(host)
        if transport is None:
            ssh = self.settings.node_ssh()
            transport = self._ssh[host] = SSHTransport(ssh.target([host]), env={"TZ": "UTC"})
        try:
            result = transport.run(["sh", "-c", script], timeout=access.timeout)
        except TransportError as e:
            return NodeOutput(unavailable=f"cannot reach node {node.name} over ssh ({host}): {e}")
        return self._result(node, result.rc, result.stdout, result.stderr, f"ssh {host}")

    def _over_srun(self, node: NodeInfo, script: str, running_job: str | None) -> NodeOutput:
        if running_job:
            # A step inside the job already on the node: no new job, no wait for resources.
            head = ["srun", f"--jobid={running_job}", "--overlap"]
        else:
            # A one-minute job of its own; --immediate gives up at once if the node is busy or down.
            head = ["srun", "--immediate=10", "--time=1", "--job-name=crashcart-probe"]
        # The step itself always succeeds and reports the command's status on stderr, so a
        # probe never shows up in accounting as a FAILED job for anyone to investigate.
        wrapped = f"({script}); echo \"{_STATUS}$?\" >&2; exit 0"
        argv = [*head, f"--nodelist={node.name}", "--nodes=1", "--ntasks=1", "--quiet", "sh", "-c", wrapped]
        result = self.cli.run(argv, check=False, input="", timeout=self.settings.node_access.timeout)
        rc, err = result.rc, result.stderr
        if rc == 0 and (m := re.search(rf"^{_STATUS}(\d+)$", err, re.M)):
            rc, err = int(m[1]), err[: m.start()] + err[m.end():]
        return self._result(node, rc, result.stdout, err, "srun")

    @staticmethod
    def _result(node: NodeInfo, rc: int, out: str, err: str, how: str) -> NodeOutput:
        if rc == 0:
            return NodeOutput(stdout=out)
        said = [line.split("crashcart: ", 1)[1] for line in err.splitlines() if "crashcart: " in line]
        if rc == MISSING and said:
            return NodeOutput(unavailable=said[0].strip(), missing=True)
        detail = (err.strip() or out.strip() or f"exit {rc}")[-500:]
        return NodeOutput(unavailable=f"node {node.name} ({node.state}) could not run the command via {how}: {detail}")
