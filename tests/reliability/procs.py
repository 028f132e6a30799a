"""Separate crashcart processes for the reliability suite.

Each test process is the real CLI (`crashcart.agent.interfaces.cli.app`) in a process of
its own, started from a fork server that has already imported crashcart, so a run costs
the incident, not Python's start-up. The fixture cluster is made to outlive its process
(`LastingCluster`): a real cluster keeps what a killed agent did to it, and counting
"exactly one action per failure" means counting on the cluster, not only in the store.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.process
import os
import threading
from pathlib import Path
from typing import Any

from crashcart.tools.backends.fixture import FixtureBackend
from crashcart.tools.cluster import Cluster

PRELOAD = ["crashcart.agent.interfaces.cli", "crashcart.agent.graph", "crashcart.agent.watch",
           "crashcart.agent.store", "crashcart.tools.backends.fixture", "langgraph.checkpoint.sqlite",
           "procs", "_warm"]


class LastingCluster(FixtureBackend):
    """A fixture cluster kept in a JSON file next to the store: loaded when a process starts,
    written after every action, the way a real cluster keeps what was done to it."""

    FILE = "cluster-state.json"
    state_dir: Path | None = None

    def __init__(self, cluster: Cluster, kind: str):
        super().__init__(cluster, kind)
        saved = self._file()
        if saved.exists():
            data = json.loads(saved.read_text())
            self.cluster = Cluster.model_validate(data["cluster"])
            self.requests = data["requests"]
            self.escalations = data["escalations"]

    def _file(self) -> Path:
        assert self.state_dir is not None
        return self.state_dir / self.FILE

    def run(self, spec, args):
        out = super().run(spec, args)
        if spec.effect == "write":
            tmp = self._file().with_suffix(".tmp")
            tmp.write_text(json.dumps({"cluster": self.cluster.model_dump(mode="json"), "requests": self.requests,
                                       "escalations": self.escalations}, default=str))
            os.replace(tmp, self._file())
        return out


def load_cluster(state_dir: Path) -> dict[str, Any]:
    return json.loads((state_dir / LastingCluster.FILE).read_text())


def _cli(args: list[str], env: dict[str, str], out: str, lasting_in: str | None) -> None:
    import sys

    os.environ.update(env)
    if lasting_in:
        import crashcart.tools.backends.fixture as fixture

        LastingCluster.state_dir = Path(lasting_in)
        fixture.FixtureBackend = LastingCluster
    from crashcart.agent.interfaces import cli

    with open(out, "w") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        sys.argv = ["crashcart", *args]
        try:
            cli.main()
        except SystemExit as e:
            sys.stdout.flush()
            os._exit(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


_CTX = None
_STARTING = threading.Lock()
REPORT: list[str] = []
"""Counts the reliability tests measured, printed at the end of the run (conftest.py)."""


def _context():
    global _CTX
    if _CTX is None:
        _CTX = multiprocessing.get_context("forkserver")
        _CTX.set_forkserver_preload(PRELOAD)
    return _CTX


def start(args: list[str], out: Path, *, env: dict[str, str] | None = None, lasting_in: Path | None = None):
    """A crashcart command in a new process; its stdout and stderr go to `out`."""
    env = {"COLUMNS": "1000", "NO_COLOR": "1", "TERM": "dumb", **(env or {})}
    p = _context().Process(target=_cli, args=([str(a) for a in args], env, str(out),
                                              str(lasting_in) if lasting_in else None))
    # Process.start() first polls every child the module knows of, from the starting thread.
    # With the forkserver, a poll reads the child's exit code off a pipe once: a thread starting
    # a process could read another thread's child's code just before that thread's join read
    # the pipe, and the join then found it empty and reported 255 ("the forkserver died")
    # instead of the -9 the child really died of. Each child is its own thread's alone.
    with _STARTING:
        p.start()
        multiprocessing.process._children.discard(p)
    return p


def run(args: list[str], out: Path, *, timeout: float = 120, **kw) -> tuple[int, str]:
    p = start(args, out, **kw)
    p.join(timeout)
    if p.exitcode is None:
        p.kill()
        p.join()
        raise AssertionError(f"crashcart {' '.join(map(str, args))} did not finish in {timeout} s:\n{out.read_text()}")
    return p.exitcode, out.read_text()
