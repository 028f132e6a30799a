"""The Slurm commands, run through a transport: errors become ToolErrors that say what ran and where."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from crashcart.tools._spec import ToolError
from crashcart.tools.transport import CommandResult, Transport, TransportError

# Versions whose `sinfo --json` / `squeue --json` crashcart has checked against a real
# cluster. sacct is always read as `-P` text: 22.05's `sacct --json` reports exit code 0
# for every job that exited normally (its dumper maps WIFEXITED to SUCCESS).
JSON_CHECKED = {(22, 5)}


class SlurmCLI:
    def __init__(self, transport: Transport, json: str = "auto", cache_seconds: float = 5.0):
        self.transport = transport
        self.json_mode = json
        self.cache_seconds = cache_seconds
        self._version: tuple[int, int] | None = None
        self._cache: dict[tuple[str, ...], tuple[float, CommandResult]] = {}

    def read(self, argv: Sequence[str], *, check: bool = True) -> CommandResult:
        """A read-only command, answered from the last few seconds' results when it ran then:
        one investigation round asks sacct and scontrol about the same job several times, and
        over SSH every command costs a round trip."""
        key = tuple(argv)
        hit = self._cache.get(key)
        if hit and time.monotonic() - hit[0] < self.cache_seconds:
            result = hit[1]
        else:
            result = self.run(argv, check=False)
            self._cache[key] = (time.monotonic(), result)
        if check and not result.ok:
            self._raise(argv, result)
        return result

    def forget(self) -> None:
        """After a write: what was read before may no longer hold."""
        self._cache.clear()

    def run(self, argv: Sequence[str], *, input: str | None = None, check: bool = True,
            retry: bool = True, env: dict[str, str] | None = None, timeout: float | None = None) -> CommandResult:
        full = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)
        try:
            result = self.transport.run(full, input=input, retry=retry, timeout=timeout)
        except TransportError as e:
            raise ToolError(f"cannot run {argv[0]} on {self.transport.where}: {e}") from None
        if check and not result.ok:
            self._raise(argv, result)
        return result

    def _raise(self, argv: Sequence[str], result: CommandResult) -> None:
        detail = (result.stderr.strip() or result.stdout.strip() or "no output")[-800:]
        raise ToolError(f"`{_shown(argv)}` failed on {self.transport.where} (exit {result.rc}): {detail}")

    def out(self, argv: Sequence[str]) -> str:
        """stdout of a read-only command (cached for a few seconds)."""
        return self.read(argv).stdout

    @property
    def version(self) -> tuple[int, int]:
        if self._version is None:
            text = self.out(["sinfo", "--version"])
            m = re.search(r"(\d+)\.(\d+)", text)
            if not m:
                raise ToolError(f"cannot tell the Slurm version from `sinfo --version`: {text.strip()[:200]!r}")
            self._version = (int(m[1]), int(m[2]))
        return self._version

    @property
    def json_ok(self) -> bool:
        return self.json_mode == "auto" and self.version in JSON_CHECKED


def _shown(argv: Sequence[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= 300 else text[:300] + "..."
