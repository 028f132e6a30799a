"""Every thread a crashcart command started has ended before the interpreter finalizes.

A daemon thread still running then is ended by CPython wherever it is; inside DuckDB's C++
(the incident store's idle closer was) that aborted the whole process after its work was done
("terminate called ... FATAL: exception not rethrown", exit -6), once in a few runs. Whether
a thread is still alive at the very end is certain, however the timing falls, so that is
what these check: a hook registered before crashcart is imported runs after all of
crashcart's own exit handlers, and lists the threads left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from crashcart.agent.store import IncidentStore
from crashcart.evals.scenario import BUNDLED_DIR

SCENARIO = BUNDLED_DIR / "hardware" / "xid79-fell-off-bus-h100-4node.yaml"
MARK = "threads-left-at-exit:"
RUN = f"""
import atexit, sys, threading

def left():
    names = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    print({MARK!r}, __import__("json").dumps(names), file=sys.stderr, flush=True)

atexit.register(left)  # registered first, so it runs last
from crashcart.agent.interfaces.cli import main
sys.argv = ["crashcart", *sys.argv[1:]]
main()
"""


def crashcart(*args: str) -> tuple[int, list[str], str]:
    done = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb", "PATH": "/usr/bin:/bin"})
    lines = [line for line in done.stderr.splitlines() if line.startswith(MARK)]
    assert len(lines) == 1, f"the exit hook did not run (exit {done.returncode}):\n{done.stderr[-2000:]}"
    return done.returncode, json.loads(lines[0][len(MARK):]), done.stderr


def test_investigate_and_replay_leave_no_thread_running_at_exit(tmp_path: Path):
    state = tmp_path / "state"
    rc, left, err = crashcart("investigate", str(SCENARIO), "--state-dir", str(state), "--mode", "observe")
    assert rc == 0, err[-2000:]
    assert left == []

    with IncidentStore(state / "incidents.duckdb") as store:
        [incident] = store.list_incidents()
    rc, left, err = crashcart("replay", incident.id, "--state-dir", str(state))
    assert rc == 0, err[-2000:]
    assert left == []
