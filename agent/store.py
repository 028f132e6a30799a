"""The incident store: one DuckDB file that journals what crashcart saw, decided and did.

One store serves many clusters (the eval runs every scenario as its own
"cluster" in one store), so every row the guard counts carries the cluster.
The guard's memory lives here: drains in the breaker's window, restarts of a
job, the breaker's state and single-use approvals, so that a restarted agent
(a new Guard on the same file) still knows them.

Times are timezone-aware in Python and stored as UTC TIMESTAMP: TIMESTAMPTZ
would make DuckDB need pytz to hand them back.

Many processes share one store file (`watch`, `approve` from another terminal, `incidents`,
`export`), and DuckDB lets only one process open a file at a time. So a store holds its
connection only while it is working: it connects on first use, keeps the connection while
calls come in quick succession (opening one costs tens of milliseconds), and lets it go
after IDLE_S without a call, and after HOLD_S of continuous use. A process that finds the
file taken waits and retries, up to `wait_s`. Whatever holds the store (`with store.lock:`)
holds the file, so the guard's count-decide-journal is atomic across processes too.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import threading
import time
import uuid
import weakref
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterator

import duckdb
from pydantic import BaseModel, ConfigDict

MAX_EXCERPT_CHARS = 4_000
IDLE_S = 0.2
"""A connection unused this long is closed, so another process can open the file."""
HOLD_S = 1.0
"""A process that used the file this long without a pause lets it go for YIELD_S."""
YIELD_S = 0.08
WAIT_S = float(os.environ.get("CRASHCART_STORE_WAIT_S", "120"))
"""How long a process waits for another to let the store go before giving up."""
_RETRY_MAX_S = 0.04

_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id TEXT, cluster TEXT NOT NULL, source TEXT, "trigger" TEXT, status TEXT,
    opened_at TIMESTAMP, updated_at TIMESTAMP, diagnosis TEXT, report TEXT);
CREATE TABLE IF NOT EXISTS tool_calls (
    incident_id TEXT, seq INTEGER, tool TEXT, args TEXT, effect TEXT, ok BOOLEAN,
    output_excerpt TEXT, error TEXT, "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS decisions (
    cluster TEXT, incident_id TEXT, seq INTEGER, action_id TEXT, tool TEXT, args TEXT,
    decision TEXT, reason TEXT, rule TEXT, escalate_to TEXT, job TEXT, node TEXT,
    target TEXT, "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS actions (
    cluster TEXT, incident_id TEXT, action_id TEXT, tool TEXT, args TEXT, result TEXT,
    "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS approvals (
    action_id TEXT, incident_id TEXT, approver TEXT, approved BOOLEAN, "at" TIMESTAMP,
    used BOOLEAN);
CREATE TABLE IF NOT EXISTS incident_states (
    incident_id TEXT, status TEXT, "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS watch (
    cluster TEXT PRIMARY KEY, cursor TIMESTAMP);
CREATE TABLE IF NOT EXISTS detections (
    cluster TEXT, "key" TEXT, incident_id TEXT, "at" TIMESTAMP, PRIMARY KEY (cluster, "key"));
CREATE TABLE IF NOT EXISTS tapes (
    incident_id TEXT PRIMARY KEY, tape TEXT);
CREATE TABLE IF NOT EXISTS deliveries (
    incident_id TEXT, action_id TEXT, notifier TEXT, kind TEXT, status TEXT, attempts INTEGER,
    error TEXT, payload TEXT, "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS pages (
    incident_id TEXT, notifier TEXT, channel TEXT, ts TEXT, status TEXT, digest TEXT, "at" TIMESTAMP,
    PRIMARY KEY (incident_id, notifier));
CREATE TABLE IF NOT EXISTS breaker (
    cluster TEXT PRIMARY KEY, tripped BOOLEAN, reason TEXT, tripped_at TIMESTAMP,
    reset_by TEXT, reset_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS incident_policies (
    incident_id TEXT PRIMARY KEY, mode TEXT, policy TEXT, sha256 TEXT, "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS approval_attempts (
    incident_id TEXT, action_id TEXT, tool TEXT, approver TEXT, os_user TEXT, approved BOOLEAN,
    outcome TEXT, reason TEXT, policy_sha256 TEXT, "at" TIMESTAMP);
CREATE TABLE IF NOT EXISTS observed (
    incident_id TEXT, kind TEXT, name TEXT, PRIMARY KEY (incident_id, kind, name));
CREATE TABLE IF NOT EXISTS policy_notes (
    incident_id TEXT, seq INTEGER, policy TEXT, kind TEXT, note TEXT, "at" TIMESTAMP);
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS tool TEXT;
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS args TEXT;
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS policy_sha256 TEXT;
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS os_user TEXT;
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS expires_at TIMESTAMP;
ALTER TABLE breaker ADD COLUMN IF NOT EXISTS incident_id TEXT;
ALTER TABLE approval_attempts ADD COLUMN IF NOT EXISTS slack_user TEXT;
"""


class StoreError(Exception):
    """The store refused a write that would break the journal (an unknown incident, an
    action with no 'allow' decision before it)."""


class StoreBusy(StoreError):
    """Another process held the store longer than this one was willing to wait."""


def _is_lock_conflict(e: Exception) -> bool:
    text = str(e)
    return "Could not set lock" in text or "Conflicting lock" in text


class _Hold:
    """`with store.lock:` — this thread has the store, and this process has its file, until the
    block ends; re-entrant."""

    def __init__(self, store: IncidentStore):
        self._store = store

    def __enter__(self) -> _Hold:
        self._store._enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._store._exit()


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class Incident(_Row):
    id: str
    cluster: str
    source: str | None
    trigger: dict[str, Any] | None
    status: str
    opened_at: datetime
    updated_at: datetime
    diagnosis: dict[str, Any] | None
    report: str | None


class ToolCallRecord(_Row):
    incident_id: str
    seq: int
    tool: str
    args: dict[str, Any]
    effect: str
    ok: bool
    output_excerpt: str | None
    error: str | None
    at: datetime


class DecisionRecord(_Row):
    cluster: str
    incident_id: str
    seq: int
    action_id: str
    tool: str
    args: dict[str, Any]
    decision: str
    reason: str
    rule: str
    escalate_to: str | None
    job: str | None
    node: str | None
    target: dict[str, Any] | None
    """The facts the decision rested on (an ActionTarget), so an approval can be re-checked."""
    at: datetime


class ActionRecord(_Row):
    cluster: str
    incident_id: str
    action_id: str
    tool: str
    args: dict[str, Any]
    result: dict[str, Any] | None
    at: datetime


class Approval(_Row):
    action_id: str
    incident_id: str
    approver: str
    approved: bool
    at: datetime
    used: bool
    tool: str | None = None
    args: dict[str, Any] | None = None
    """The action approved, exactly: an approval is good for this tool with these args only."""
    policy_sha256: str | None = None
    """The incident's policy it was given under."""
    os_user: str | None = None
    """The OS account `crashcart approve` ran as, next to the name given."""
    expires_at: datetime | None = None


class ApprovalAttempt(_Row):
    """Someone answered (or tried to answer) an approval request, or to reset the breaker."""

    incident_id: str
    action_id: str | None
    tool: str | None
    """The action's tool; `breaker_reset` for a reset."""
    approver: str | None
    os_user: str | None
    approved: bool | None
    outcome: str
    """accepted | refused"""
    reason: str | None
    policy_sha256: str | None
    at: datetime
    slack_user: str | None = None
    """The Slack user id of a click in Slack (the request's signature verified, or not: see reason)."""


class StoredPolicy(_Row):
    """The guard policy an incident started under: its own, whoever acts on it later."""

    incident_id: str
    mode: str
    policy: dict[str, Any]
    sha256: str
    at: datetime


class Delivery(_Row):
    """One attempt to get an escalation or notification to people through one notifier."""

    incident_id: str
    action_id: str
    notifier: str
    kind: str
    status: str
    """delivered | dead_letter (every retry failed: the payload waits here for a person)."""
    attempts: int
    error: str | None
    payload: dict[str, Any]
    at: datetime


class Page(_Row):
    """The chat message that pages people about an incident (one per notifier), kept up to date."""

    incident_id: str
    notifier: str
    channel: str
    ts: str
    """Slack's id for the message in its channel (what chat.update and thread replies name)."""
    status: str
    """The incident status the message shows."""
    digest: str
    """A hash of what the message shows: unchanged, nothing is sent."""
    at: datetime


class BreakerState(_Row):
    cluster: str
    tripped: bool = False
    reason: str | None = None
    tripped_at: datetime | None = None
    reset_by: str | None = None
    reset_at: datetime | None = None
    incident_id: str | None = None
    """The incident whose decision tripped it: its policy names who may reset it."""


class IncidentDetail(_Row):
    incident: Incident
    tool_calls: list[ToolCallRecord]
    decisions: list[DecisionRecord]
    actions: list[ActionRecord]
    approvals: list[Approval]
    approval_attempts: list[ApprovalAttempt] = []
    """Every answer given or refused, with who (name and OS account) and why."""


def _db_time(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"naive datetime {t.isoformat()}: the store takes timezone-aware times")
    return t.astimezone(UTC).replace(tzinfo=None)


def _py_time(t: datetime | None) -> datetime | None:
    return None if t is None else t.replace(tzinfo=UTC)


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if isinstance(o, BaseModel):
        return o.model_dump(mode="json")
    return str(o)


def _dumps(v: Any) -> str | None:
    return None if v is None else json.dumps(v, default=_json_default)


def _loads(s: str | None) -> Any:
    return None if s is None else json.loads(s)


_TIME_COLS = {"at", "opened_at", "updated_at", "tripped_at", "reset_at", "expires_at"}
_JSON_COLS = {"args", "trigger", "diagnosis", "result", "target", "policy", "payload"}


_OPEN_STORES: weakref.WeakSet[IncidentStore] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    # The idle closer is a daemon thread. Were it inside DuckDB's close when the interpreter
    # finalizes, CPython would end it with a forced unwind through C++ frames and abort the
    # whole process ("FATAL: exception not rethrown") after its work was done. atexit runs
    # before that, so the stores are closed here and their closers joined.
    for store in list(_OPEN_STORES):
        store._close_at_exit()


class IncidentStore:
    """The journal; safe to share between threads and between processes (see the module doc)."""

    def __init__(self, path: str | Path = ":memory:", *, wait_s: float | None = None):
        self.path = str(path)
        self.wait_s = WAIT_S if wait_s is None else wait_s
        # An in-memory store has no file for another process to want: it keeps its connection.
        self._shared = not self.path.startswith(":memory:")
        self._mutex = threading.RLock()
        self._idle = threading.Condition(self._mutex)
        self.lock = _Hold(self)
        self._con: Any = None
        self._depth = 0
        self._opened_at = self._last_used = 0.0
        self._yielded_at = -1.0
        self._closed = False
        self._closer: threading.Thread | None = None
        self._schema_ready = False
        self._seq: dict[tuple[str, str], int] = {}
        self._batch_depth = 0
        self._pending_calls: list[list[Any]] = []
        self._status: dict[str, str | None] = {}
        with self.lock:  # creates the schema, and fails here if the file is not a store
            pass
        _OPEN_STORES.add(self)

    def close(self) -> None:
        with self._mutex:
            self._disconnect()
            self._closed = True
            self._idle.notify_all()

    def _close_at_exit(self) -> None:
        # A thread that still holds the store at exit (a server's worker) is not waited on forever.
        if not self._mutex.acquire(timeout=5.0):
            return
        try:
            self.close()
        finally:
            self._mutex.release()
        closer = self._closer
        if closer is not None and closer is not threading.current_thread():
            closer.join(timeout=5.0)

    def __enter__(self) -> IncidentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- holding the file -------------------------------------------------------

    def _enter(self) -> None:
        self._mutex.acquire()
        try:
            if self._closed:
                raise StoreError(f"the incident store {self.path} is closed")
            if self._con is None:
                self._connect()
        except BaseException:
            self._mutex.release()
            raise
        self._depth += 1

    def _exit(self) -> None:
        try:
            self._depth -= 1
            if self._depth == 0 and self._shared:
                self._last_used = time.monotonic()
                if self._last_used - self._opened_at > HOLD_S:
                    self._disconnect()
                    self._yielded_at = self._last_used
                else:
                    self._idle.notify()
        finally:
            self._mutex.release()

    def _connect(self) -> None:
        if self._shared and time.monotonic() - self._yielded_at < YIELD_S:
            # This process just let the file go after a long hold: give a waiting one its turn.
            time.sleep(YIELD_S)
        deadline = time.monotonic() + self.wait_s
        delay = 0.002
        while True:
            try:
                con = duckdb.connect(self.path)
                break
            except duckdb.IOException as e:
                if not _is_lock_conflict(e):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreBusy(
                        f"the incident store {self.path} stayed busy for {self.wait_s:g} s: another "
                        f"process holds it ({e}); try again, or raise CRASHCART_STORE_WAIT_S"
                    ) from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, _RETRY_MAX_S)
        # One thread: the journal runs tiny statements, and a pool of workers only contends.
        con.execute("SET threads = 1")
        self._con = con
        self._opened_at = self._last_used = time.monotonic()
        if not self._schema_ready:
            con.execute(_SCHEMA)
            self._schema_ready = True
        if self._shared and self._closer is None:
            self._closer = threading.Thread(target=self._close_when_idle, name="store-idle", daemon=True)
            self._closer.start()

    def _disconnect(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        # What another process may write while the file is not ours: ask again next time.
        self._seq.clear()
        self._status.clear()

    def _close_when_idle(self) -> None:
        with self._idle:
            while not self._closed:
                if self._con is None:
                    self._idle.wait()
                    continue
                # Holding the mutex here means no thread is inside the store.
                idle = time.monotonic() - self._last_used
                if idle >= IDLE_S:
                    self._disconnect()
                else:
                    self._idle.wait(IDLE_S - idle)

    # --- plumbing -------------------------------------------------------------

    def _rows(self, model: type[_Row], sql: str, params: list[Any]) -> list[Any]:
        with self.lock:
            cur = self._con.execute(sql, params)
            names = [d[0] for d in cur.description]
            raw = cur.fetchall()
        out = []
        for values in raw:
            row = dict(zip(names, values))
            for k in row.keys() & _TIME_COLS:
                row[k] = _py_time(row[k])
            for k in row.keys() & _JSON_COLS:
                row[k] = _loads(row[k])
            out.append(model.model_validate(row))
        return out

    def _next_seq(self, table: str, incident_id: str) -> int:
        key = (table, incident_id)
        if key not in self._seq:
            # Another process may have journaled this incident before (an approval resumed it).
            row = self._con.execute(
                f"SELECT coalesce(max(seq), 0) FROM {table} WHERE incident_id = ?", [incident_id]
            ).fetchone()
            self._seq[key] = int(row[0])
        self._seq[key] += 1
        return self._seq[key]

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Several writes in one transaction: one commit instead of one per row.

        Everything written inside is committed when the block ends, so a decision journaled
        in a batch is durable before any action that depends on it runs after the block."""
        with self.lock:
            outer = self._batch_depth == 0
            if outer:
                self._con.execute("BEGIN TRANSACTION")
            self._batch_depth += 1
            try:
                yield
            except BaseException:
                self._batch_depth -= 1
                if outer:
                    self._con.execute("ROLLBACK")
                    self._seq.clear()
                    self._pending_calls.clear()
                raise
            self._batch_depth -= 1
            if outer:
                pending, self._pending_calls = self._pending_calls, []
                self._insert_many("tool_calls", pending)
                self._con.execute("COMMIT")

    # --- the watch loop ---------------------------------------------------------

    def watch_cursor(self, cluster: str) -> datetime | None:
        with self.lock:
            row = self._con.execute("SELECT cursor FROM watch WHERE cluster = ?", [cluster]).fetchone()
        return _py_time(row[0]) if row else None

    def set_watch_cursor(self, cluster: str, at: datetime) -> None:
        with self.lock:
            self._con.execute("INSERT OR REPLACE INTO watch VALUES (?, ?)", [cluster, _db_time(at)])

    def claim_detection(self, cluster: str, keys: list[str], trigger: dict[str, Any], *, at: datetime) -> str | None:
        """Open an incident for these failures unless one of them already has one.

        One transaction: after a crash the failure is either claimed with its incident, or
        not seen at all, so it is neither lost nor acted on twice."""
        with self.batch():
            marks = ", ".join("?" * len(keys))
            seen = self._con.execute(
                f'SELECT 1 FROM detections WHERE cluster = ? AND "key" IN ({marks}) LIMIT 1', [cluster, *keys]
            ).fetchone()
            if seen:
                return None
            incident_id = self.open_incident(cluster, "watch", trigger, at=at)
            self.update_incident(incident_id, status="detected", at=at)
            self._insert_many("detections", [[cluster, k, incident_id, _db_time(at)] for k in keys])
        return incident_id

    def save_tape(self, incident_id: str, tape_jsonl: str) -> None:
        """Every tool call of a live incident and its result, for replay and export."""
        with self.lock:
            self._con.execute("DELETE FROM tapes WHERE incident_id = ?", [incident_id])
            self._con.execute("INSERT INTO tapes VALUES (?, ?)", [incident_id, tape_jsonl])

    def load_tape(self, incident_id: str) -> str | None:
        with self.lock:
            row = self._con.execute("SELECT tape FROM tapes WHERE incident_id = ?", [incident_id]).fetchone()
        return row[0] if row else None

    def executed_action_ids(self, incident_id: str) -> set[str]:
        with self.lock:
            rows = self._con.execute(
                "SELECT DISTINCT action_id FROM actions WHERE incident_id = ?", [incident_id]
            ).fetchall()
        return {r[0] for r in rows}

    @staticmethod
    def _now(at: datetime | None) -> datetime:
        return at if at is not None else datetime.now(UTC)

    # --- incidents ------------------------------------------------------------

    def open_incident(
        self, cluster: str, source: str, trigger: dict[str, Any] | None = None,
        *, incident_id: str | None = None, at: datetime | None = None,
    ) -> str:
        incident_id = incident_id or f"inc-{uuid.uuid4().hex[:12]}"
        at = _db_time(self._now(at))
        with self.lock:
            if self._con.execute("SELECT 1 FROM incidents WHERE id = ?", [incident_id]).fetchone():
                raise StoreError(f"incident {incident_id!r} already exists")
            self._con.execute(
                "INSERT INTO incidents VALUES (?, ?, ?, ?, 'open', ?, ?, NULL, NULL)",
                [incident_id, cluster, source, _dumps(trigger), at, at],
            )
            self._con.execute("INSERT INTO incident_states VALUES (?, 'detected', ?)", [incident_id, at])
            self._status[incident_id] = "detected"
        return incident_id

    def update_incident(
        self, incident_id: str, *, status: str | None = None,
        diagnosis: dict[str, Any] | None = None, report: str | None = None,
        at: datetime | None = None,
    ) -> None:
        """Set the fields given; a field left None keeps its value."""
        with self.lock:
            updated = self._con.execute(
                "UPDATE incidents SET status = coalesce(?, status), diagnosis = coalesce(?, diagnosis),"
                " report = coalesce(?, report), updated_at = ? WHERE id = ? RETURNING id",
                [status, _dumps(diagnosis), report, _db_time(self._now(at)), incident_id],
            ).fetchall()
            if not updated:
                raise StoreError(f"unknown incident {incident_id!r}")
            if status is not None and self._last_status(incident_id) != status:
                self._con.execute("INSERT INTO incident_states VALUES (?, ?, ?)",
                                  [incident_id, status, _db_time(self._now(at))])
                self._status[incident_id] = status

    def _last_status(self, incident_id: str) -> str | None:
        if incident_id not in self._status:
            # Another process may have moved it on (an approval): ask once, then remember.
            row = self._con.execute(
                'SELECT status FROM incident_states WHERE incident_id = ? ORDER BY "at" DESC, rowid DESC LIMIT 1',
                [incident_id]).fetchone()
            self._status[incident_id] = row[0] if row else None
        return self._status[incident_id]

    def incident_history(self, incident_id: str) -> list[tuple[str, datetime]]:
        """The incident's life: each status it went through, and when."""
        with self.lock:
            rows = self._con.execute(
                'SELECT status, "at" FROM incident_states WHERE incident_id = ? ORDER BY "at", rowid',
                [incident_id]).fetchall()
        return [(status, _py_time(at)) for status, at in rows]

    def list_incidents(
        self, cluster: str | None = None, status: str | None = None, limit: int = 50
    ) -> list[Incident]:
        return self._rows(
            Incident,
            'SELECT * FROM incidents WHERE (? IS NULL OR cluster = ?) AND (? IS NULL OR status = ?)'
            " ORDER BY opened_at DESC, id LIMIT ?",
            [cluster, cluster, status, status, limit],
        )

    def get_incident(self, incident_id: str) -> IncidentDetail | None:
        with self.lock:  # one consistent picture, not rows from before and after another's write
            return self._get_incident(incident_id)

    def _get_incident(self, incident_id: str) -> IncidentDetail | None:
        found = self._rows(Incident, "SELECT * FROM incidents WHERE id = ?", [incident_id])
        if not found:
            return None
        by_incident = [incident_id]
        return IncidentDetail(
            incident=found[0],
            tool_calls=self._rows(
                ToolCallRecord, "SELECT * FROM tool_calls WHERE incident_id = ? ORDER BY seq", by_incident
            ),
            decisions=self.decisions(incident_id),
            actions=self._rows(
                ActionRecord, 'SELECT * FROM actions WHERE incident_id = ? ORDER BY "at"', by_incident
            ),
            approvals=self._rows(
                Approval, 'SELECT * FROM approvals WHERE incident_id = ? ORDER BY "at"', by_incident
            ),
            approval_attempts=self.approval_attempts(incident_id),
        )

    # --- the journal ----------------------------------------------------------

    def record_tool_call(
        self, incident_id: str, tool: str, args: dict[str, Any], effect: str, ok: bool,
        *, output_excerpt: str | None = None, error: str | None = None, at: datetime | None = None,
    ) -> int:
        excerpt = None if output_excerpt is None else output_excerpt[:MAX_EXCERPT_CHARS]
        with self.lock:
            seq = self._next_seq("tool_calls", incident_id)
            row = [incident_id, seq, tool, _dumps(args), effect, ok, excerpt, error, _db_time(self._now(at))]
            if self._batch_depth:
                # Written with the batch's commit, in one statement: a read's record is not
                # something an action waits on, and one INSERT per row is slow in DuckDB.
                self._pending_calls.append(row)
            else:
                self._insert_many("tool_calls", [row])
        return seq

    def _insert_many(self, table: str, rows: list[list[Any]]) -> None:
        if not rows:
            return
        marks = "(" + ", ".join("?" * len(rows[0])) + ")"
        self._con.execute(
            f"INSERT INTO {table} VALUES " + ", ".join([marks] * len(rows)),
            [v for row in rows for v in row],
        )

    def record_decision(
        self, cluster: str, incident_id: str, action_id: str, tool: str, args: dict[str, Any],
        decision: str, reason: str, rule: str, *, at: datetime,
        escalate_to: str | None = None, job: str | None = None, node: str | None = None,
        target: dict[str, Any] | None = None,
    ) -> int:
        """Journal a guard decision; committed when this returns, before anything runs."""
        with self.lock:
            seq = self._next_seq("decisions", incident_id)
            self._con.execute(
                "INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [cluster, incident_id, seq, action_id, tool, _dumps(args), decision, reason, rule,
                 escalate_to, job, node, _dumps(target), _db_time(at)],
            )
        return seq

    def decisions(self, incident_id: str, action_id: str | None = None) -> list[DecisionRecord]:
        return self._rows(
            DecisionRecord,
            "SELECT * FROM decisions WHERE incident_id = ? AND (? IS NULL OR action_id = ?) ORDER BY seq",
            [incident_id, action_id, action_id],
        )

    def last_decision(self, cluster: str, incident_id: str, action_id: str) -> DecisionRecord | None:
        rows = self._rows(
            DecisionRecord,
            "SELECT * FROM decisions WHERE cluster = ? AND incident_id = ? AND action_id = ?"
            " ORDER BY seq DESC LIMIT 1",
            [cluster, incident_id, action_id],
        )
        return rows[0] if rows else None

    def record_action(
        self, cluster: str, incident_id: str, action_id: str, tool: str, args: dict[str, Any],
        result: dict[str, Any] | None, *, at: datetime | None = None,
    ) -> None:
        with self.lock:
            # Deciding comes before acting: an action with no 'allow' behind it is a bug upstream.
            if not self._con.execute(
                "SELECT 1 FROM decisions WHERE cluster = ? AND incident_id = ? AND action_id = ?"
                " AND decision = 'allow' LIMIT 1",
                [cluster, incident_id, action_id],
            ).fetchone():
                raise StoreError(
                    f"{tool} {action_id} in incident {incident_id!r}: no 'allow' decision is journaled for it"
                )
            self._con.execute(
                "INSERT INTO actions VALUES (?, ?, ?, ?, ?, ?, ?)",
                [cluster, incident_id, action_id, tool, _dumps(args), _dumps(result),
                 _db_time(self._now(at))],
            )

    # --- what the guard counts ------------------------------------------------

    def drains_since(self, cluster: str, since: datetime) -> int:
        """Distinct node_drain actions executed, or decided 'allow', at or after `since`."""
        with self.lock:
            row = self._con.execute(
                "SELECT count(DISTINCT action_id) FROM ("
                " SELECT action_id FROM decisions WHERE cluster = ? AND tool = 'node_drain'"
                '  AND decision = \'allow\' AND "at" >= ?'
                ' UNION ALL SELECT action_id FROM actions WHERE cluster = ? AND tool = \'node_drain\''
                '  AND "at" >= ?)',
                [cluster, _db_time(since), cluster, _db_time(since)],
            ).fetchone()
        return int(row[0])

    def restarts_of(self, cluster: str, job: str, since: datetime | None = None) -> int:
        """Resubmits of `job` decided allow or dry_run (at or after `since`, when given)."""
        with self.lock:
            row = self._con.execute(
                "SELECT count(*) FROM decisions WHERE cluster = ? AND tool = 'resubmit' AND job = ?"
                " AND decision IN ('allow', 'dry_run') AND (? IS NULL OR \"at\" >= ?)",
                [cluster, job, _db_time(since), _db_time(since)],
            ).fetchone()
        return int(row[0])

    # --- the breaker ----------------------------------------------------------

    def breaker_state(self, cluster: str) -> BreakerState:
        rows = self._rows(BreakerState, "SELECT * FROM breaker WHERE cluster = ?", [cluster])
        return rows[0] if rows else BreakerState(cluster=cluster)

    def trip_breaker(self, cluster: str, reason: str, at: datetime, incident_id: str | None = None) -> BreakerState:
        with self.lock:
            # The first trip's reason is the one a person needs; a later one adds nothing.
            if not self.breaker_state(cluster).tripped:
                self._con.execute(
                    "INSERT INTO breaker (cluster, tripped, reason, tripped_at, incident_id)"
                    " VALUES (?, true, ?, ?, ?) ON CONFLICT (cluster) DO UPDATE"
                    " SET tripped = true, reason = excluded.reason, tripped_at = excluded.tripped_at,"
                    " reset_by = NULL, reset_at = NULL, incident_id = excluded.incident_id",
                    [cluster, reason, _db_time(at), incident_id],
                )
            return self.breaker_state(cluster)

    def reset_breaker(self, cluster: str, person: str, at: datetime) -> BreakerState:
        with self.lock:
            self._con.execute(
                "INSERT INTO breaker (cluster, tripped, reset_by, reset_at) VALUES (?, false, ?, ?)"
                " ON CONFLICT (cluster) DO UPDATE"
                " SET tripped = false, reset_by = excluded.reset_by, reset_at = excluded.reset_at",
                [cluster, person, _db_time(at)],
            )
            return self.breaker_state(cluster)

    def known_clusters(self) -> list[str]:
        """Every cluster the store has seen: an incident, a watch cursor or a breaker."""
        with self.lock:
            rows = self._con.execute(
                "SELECT cluster FROM incidents UNION SELECT cluster FROM watch"
                " UNION SELECT cluster FROM breaker ORDER BY cluster").fetchall()
        return [r[0] for r in rows]

    # --- approvals ------------------------------------------------------------

    def record_approval(
        self, action_id: str, incident_id: str, approver: str, approved: bool, at: datetime,
        *, tool: str | None = None, args: dict[str, Any] | None = None, policy_sha256: str | None = None,
        os_user: str | None = None, expires_at: datetime | None = None,
    ) -> None:
        with self.lock:
            self._con.execute(
                "INSERT INTO approvals (action_id, incident_id, approver, approved, \"at\", used, tool, args,"
                " policy_sha256, os_user, expires_at) VALUES (?, ?, ?, ?, ?, false, ?, ?, ?, ?, ?)",
                [action_id, incident_id, approver, approved, _db_time(at), tool, _dumps(args),
                 policy_sha256, os_user, _db_time(expires_at)],
            )

    def take_approval(
        self, action_id: str, incident_id: str, *, tool: str | None = None, args: dict[str, Any] | None = None,
        policy_sha256: str | None = None, now: datetime | None = None,
    ) -> Approval | None:
        """The latest unused answer for this action in this incident, marked used; None if none.

        Given the action (tool, args), the policy hash and the time, only an answer given for
        exactly that action under that policy, and not expired, is taken."""
        with self.lock:
            rows = self._rows(
                Approval,
                'SELECT * FROM approvals WHERE action_id = ? AND incident_id = ? AND NOT used ORDER BY "at" DESC',
                [action_id, incident_id],
            )
            rows = [
                a for a in rows
                if (tool is None or a.tool == tool) and (args is None or a.args == args)
                and (policy_sha256 is None or a.policy_sha256 == policy_sha256)
                and (now is None or a.expires_at is None or now < a.expires_at)
            ]
            if not rows:
                return None
            a = rows[0]
            self._con.execute(
                'UPDATE approvals SET used = true WHERE action_id = ? AND incident_id = ?'
                ' AND approver = ? AND "at" = ? AND NOT used',
                [action_id, incident_id, a.approver, _db_time(a.at)],
            )
            return a.model_copy(update={"used": True})

    def record_approval_attempt(
        self, incident_id: str, *, outcome: str, reason: str | None, at: datetime,
        action_id: str | None = None, tool: str | None = None, approver: str | None = None,
        os_user: str | None = None, approved: bool | None = None, policy_sha256: str | None = None,
        slack_user: str | None = None,
    ) -> None:
        """Journal who tried to answer what, and whether the guard accepted it (and why not)."""
        with self.lock:
            self._con.execute(
                "INSERT INTO approval_attempts (incident_id, action_id, tool, approver, os_user, approved,"
                ' outcome, reason, policy_sha256, "at", slack_user) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                [incident_id, action_id, tool, approver, os_user, approved, outcome, reason,
                 policy_sha256, _db_time(at), slack_user],
            )

    def approval_attempts(self, incident_id: str) -> list[ApprovalAttempt]:
        return self._rows(
            ApprovalAttempt, 'SELECT * FROM approval_attempts WHERE incident_id = ? ORDER BY "at", rowid',
            [incident_id],
        )

    # --- the incident's own policy and what its investigation saw ---------------------------

    def save_incident_policy(self, incident_id: str, mode: str, policy_json: str, sha256: str,
                             at: datetime) -> StoredPolicy:
        """Store the policy an incident runs under, once: a later save keeps the first."""
        with self.lock:
            self._con.execute(
                "INSERT OR IGNORE INTO incident_policies VALUES (?, ?, ?, ?, ?)",
                [incident_id, mode, policy_json, sha256, _db_time(at)],
            )
            return self.incident_policy(incident_id)

    def incident_policy(self, incident_id: str) -> StoredPolicy | None:
        rows = self._rows(StoredPolicy, "SELECT * FROM incident_policies WHERE incident_id = ?", [incident_id])
        return rows[0] if rows else None

    def latest_cluster_policy(self, cluster: str) -> StoredPolicy | None:
        """The policy of the cluster's most recent incident that stored one."""
        rows = self._rows(
            StoredPolicy,
            "SELECT p.* FROM incident_policies p JOIN incidents i ON i.id = p.incident_id"
            " WHERE i.cluster = ? ORDER BY i.opened_at DESC, p.\"at\" DESC LIMIT 1",
            [cluster],
        )
        return rows[0] if rows else None

    def trigger_of(self, incident_id: str) -> dict[str, Any] | None:
        with self.lock:
            row = self._con.execute('SELECT "trigger" FROM incidents WHERE id = ?', [incident_id]).fetchone()
        return _loads(row[0]) if row else None

    def record_observed(self, incident_id: str, *, jobs: Any = (), nodes: Any = ()) -> None:
        """Jobs and nodes the investigation saw in tool results: the only ones a write may name."""
        rows = [[incident_id, "job", str(j)] for j in jobs] + [[incident_id, "node", str(n)] for n in nodes]
        if not rows:
            return
        with self.lock:
            marks = ", ".join(["(?, ?, ?)"] * len(rows))
            self._con.execute(f"INSERT OR IGNORE INTO observed VALUES {marks}", [v for r in rows for v in r])

    def observed(self, incident_id: str) -> set[tuple[str, str]]:
        """(kind, name) pairs: ("job", "48213"), ("node", "gpu-b07")."""
        with self.lock:
            rows = self._con.execute("SELECT kind, name FROM observed WHERE incident_id = ?", [incident_id]).fetchall()
        return {(k, n) for k, n in rows}

    def record_policy_notes(self, incident_id: str, notes: list[dict[str, Any]], *, at: datetime | None = None) -> None:
        """What a policy said beside its tool calls (a model's turns, a handover), for
        `incidents show` and for `replay`, which plays the recorded model turns back."""
        if not notes:
            return
        with self.lock:
            rows = [[incident_id, self._next_seq("policy_notes", incident_id), n.get("policy"), n.get("kind"),
                     _dumps(n), _db_time(self._now(at))] for n in notes]
            self._insert_many("policy_notes", rows)

    def policy_notes(self, incident_id: str) -> list[dict[str, Any]]:
        with self.lock:
            rows = self._con.execute("SELECT note FROM policy_notes WHERE incident_id = ? ORDER BY seq",
                                     [incident_id]).fetchall()
        return [_loads(r[0]) for r in rows]

    # --- deliveries (agent/notify) --------------------------------------------

    def record_delivery(self, incident_id: str, action_id: str, notifier: str, kind: str, status: str,
                        attempts: int, payload: dict[str, Any], *, error: str | None = None,
                        at: datetime | None = None) -> None:
        with self.lock:
            self._con.execute(
                "INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [incident_id, action_id, notifier, kind, status, attempts, error, _dumps(payload),
                 _db_time(self._now(at))],
            )

    def deliveries(self, incident_id: str) -> list[Delivery]:
        return self._rows(Delivery, 'SELECT * FROM deliveries WHERE incident_id = ? ORDER BY "at", rowid',
                          [incident_id])

    def delivered_to(self, action_id: str) -> set[str]:
        """The notifiers that already delivered this action (a resumed incident does not send twice)."""
        with self.lock:
            rows = self._con.execute(
                "SELECT DISTINCT notifier FROM deliveries WHERE action_id = ? AND status = 'delivered'",
                [action_id]).fetchall()
        return {r[0] for r in rows}

    def page(self, incident_id: str, notifier: str) -> Page | None:
        rows = [p for p in self.pages(incident_id) if p.notifier == notifier]
        return rows[0] if rows else None

    def pages(self, incident_id: str) -> list[Page]:
        """Every message that pages people about this incident (one per notifier)."""
        return self._rows(Page, "SELECT * FROM pages WHERE incident_id = ? ORDER BY notifier", [incident_id])

    def save_page(self, incident_id: str, notifier: str, channel: str, ts: str, status: str, digest: str,
                  at: datetime | None = None) -> None:
        with self.lock:
            self._con.execute("INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?, ?, ?)",
                              [incident_id, notifier, channel, ts, status, digest, _db_time(self._now(at))])

    def undelivered_counts(self, incident_ids: list[str]) -> dict[str, int]:
        """Per incident, the deliveries (action and notifier) that ended in the dead-letter record and
        never got through, however often watch tried them again."""
        if not incident_ids:
            return {}
        marks = ", ".join("?" * len(incident_ids))
        with self.lock:
            rows = self._con.execute(
                f"SELECT incident_id, count(DISTINCT (action_id, notifier)) FROM deliveries d WHERE status = 'dead_letter'"
                f" AND incident_id IN ({marks}) AND NOT EXISTS (SELECT 1 FROM deliveries x"
                f" WHERE x.action_id = d.action_id AND x.notifier = d.notifier AND x.status = 'delivered')"
                f" GROUP BY incident_id", incident_ids).fetchall()
        return {r[0]: int(r[1]) for r in rows}
