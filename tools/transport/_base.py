"""What every transport offers: run an argv, get (rc, stdout, stderr)."""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class TransportError(Exception):
    """The command could not be run at all (no connection, a timeout, a refused host key).

    A command that ran and failed is not a TransportError: its CommandResult says so.
    """


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


class Transport(ABC):
    """Runs commands on one machine (a login node, or a compute node for node commands)."""

    where: str
    """A name for messages: 'localhost', 'ssh login1:22'."""

    def __init__(self, env: Mapping[str, str] | None = None):
        # Set for every command (SLURM_CONF, TZ=UTC): the same on every transport.
        self.env = dict(env or {})

    @abstractmethod
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None,
            retry: bool = True) -> CommandResult:
        """Run argv; `input` goes to its stdin. `retry=False` for commands that change
        something: after the command may have started, a failure is reported, never retried."""

    def close(self) -> None:
        """Release connections; the transport reconnects on the next run."""
