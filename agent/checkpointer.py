"""The durable LangGraph checkpointer: one SQLite file that several processes share.

`watch` writes checkpoints while `approve` (another process) reads one and resumes the incident
it belongs to. SQLite allows that with write-ahead logging (readers never block the writer)
and a busy timeout (a writer waits for another's short commit instead of failing at once with
"database is locked").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUSY_TIMEOUT_S = 60.0


def open_checkpointer(path: Path) -> Any:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path), check_same_thread=False, timeout=BUSY_TIMEOUT_S)
    con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    con.execute("PRAGMA journal_mode = WAL")
    return SqliteSaver(con)
