"""Commands on this machine (crashcart runs on the login node itself)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from crashcart.tools.transport._base import CommandResult, Transport, TransportError


class LocalTransport(Transport):
    where = "localhost"

    def __init__(self, env=None, timeout: float = 60.0):
        super().__init__(env)
        self.timeout = timeout

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None,
            retry: bool = True) -> CommandResult:
        argv = tuple(argv)
        try:
            done = subprocess.run(
                argv, input=input, capture_output=True, text=True, errors="replace",
                timeout=timeout or self.timeout, env={**os.environ, **self.env},
            )
        except FileNotFoundError:
            # What a shell would say, so local and SSH look the same to callers.
            return CommandResult(argv, 127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            raise TransportError(f"{argv[0]} did not finish within {timeout or self.timeout:g} s on {self.where}") from None
        except OSError as e:
            raise TransportError(f"cannot run {argv[0]} on {self.where}: {e}") from None
        return CommandResult(argv, done.returncode, done.stdout, done.stderr)
