"""Named places where a test can make crashcart die by SIGKILL, to prove a restart is safe.

A restart test that raises an exception inside the process proves less than it seems:
`finally` blocks still run and buffers still flush. Setting CRASHCART_CRASH_AT to one
of CRASH_POINTS makes the process send itself SIGKILL there instead, exactly as
`kill -9` from an operator or the OOM killer would. Unset (always, in production), a
crash point is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

CRASH_POINTS = {
    "before_act": "the guard's decisions are journaled; nothing has run",
    "after_action": "an action ran on the cluster; its result is not journaled yet",
}
ENV = "CRASHCART_CRASH_AT"


def crash_point(name: str) -> None:
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r} (known: {', '.join(CRASH_POINTS)})")
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
