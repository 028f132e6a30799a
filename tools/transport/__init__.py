"""Running commands where the cluster is: on this machine or on a login node over SSH.

A transport runs one argv and returns what it printed; it knows nothing about
Slurm. `LocalTransport` uses subprocess; `SSHTransport` uses paramiko (imported
only when an SSH connection is made) with host failover, checked host keys and
retries with backoff on transient network errors.
"""

from crashcart.tools.transport._base import CommandResult, Transport, TransportError
from crashcart.tools.transport._local import LocalTransport
from crashcart.tools.transport._ssh import Secret, SSHTarget, SSHTransport

__all__ = ["CommandResult", "LocalTransport", "SSHTarget", "SSHTransport", "Secret", "Transport", "TransportError"]
