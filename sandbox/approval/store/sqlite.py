"""`SQLiteApprovalStore`: pending requests, single-use grants and the execution journal, in SQLite.

Exactly-once rests on two guarded updates, each atomic in SQLite whatever the number of
threads or processes sharing the file:

- deciding a request moves it from ``pending`` to a final status only if it is still
  ``pending`` (so two humans approving at once produce one decision, not two), and
- starting a call moves it to ``started`` only from ``approved`` with a grant for
  exactly the digest about to run (the grant is cleared in the same statement, so it is
  single-use), or from ``new`` when no confirmation was needed.

Every transition is also appended to ``journal``, by a trigger on ``calls.state`` (so the
journal row is written by the very statement that makes the transition, with the detail
that statement put in ``calls.note``). A call left ``started`` by a process that no
longer exists is reported as ``in_doubt`` and never started again.

A guarded statement that is one transition by itself (open a call, claim a grant,
finish, grant an edit) runs on its own — SQLite makes a statement and its trigger
atomic; steps that read and then write, or write two tables, run in ``BEGIN IMMEDIATE``.

``ApprovalStore(path)`` is SQLite in a file that several processes may share;
``ApprovalStore(":memory:")`` is SQLite in memory. The operations are `StoreProtocol`'s.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sandbox.approval.store.base import MAX_PENDING_PER_SESSION
from sandbox.approval.store.records import checked_bounds, clock
from sandbox.approval.store.sql import SQLApprovalStore, lease_seconds
from sandbox.approval.store.sql_rules import RULE_COLUMNS
from sandbox.errors import StoreError

# 2: calls.note and the journal triggers; 3: worker leases (1 and 2 are migrated on open)
SCHEMA_VERSION = "3"

#: UPDATE ... RETURNING (SQLite 3.35+) lets a decision read what it needs in the
#: statement that makes it; older libraries read it first, in the same transaction.
_HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)

#: Pages in the write-ahead log before it is copied back into the file (a checkpoint).
_AUTOCHECKPOINT = 10_000
#: Of the steps `run_now` could run, every this many-th goes to the worker thread
#: instead: its commit runs the checkpoint when the log has grown past _AUTOCHECKPOINT.
_NOW_PER_CHECKPOINT_CHANCE = 512

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    call_id      TEXT PRIMARY KEY,
    tool         TEXT NOT NULL,
    digest       TEXT NOT NULL,
    args         TEXT NOT NULL,
    state        TEXT NOT NULL,
    request_id   TEXT,
    grant_digest TEXT,
    run_args     TEXT,
    owner        TEXT,
    result       TEXT,
    session_id   TEXT,
    created      REAL NOT NULL,
    updated      REAL NOT NULL,
    note         TEXT
);
CREATE TABLE IF NOT EXISTS requests (
    id          TEXT PRIMARY KEY,
    call_id     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    args        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    hint        TEXT NOT NULL,
    payload     TEXT,
    kind        TEXT NOT NULL,
    details     TEXT,
    status      TEXT NOT NULL,
    created     REAL NOT NULL,
    expires     REAL,
    decided     REAL,
    outcome     TEXT,
    reason      TEXT,
    decided_by  TEXT,
    channel     TEXT,
    decision    TEXT,
    edited_from TEXT,
    session_id  TEXT
);
CREATE INDEX IF NOT EXISTS requests_by_status ON requests(status, created);
CREATE INDEX IF NOT EXISTS requests_by_call ON requests(call_id);
CREATE TABLE IF NOT EXISTS answers (
    request_id  TEXT PRIMARY KEY,
    decision    TEXT NOT NULL,
    decided_by  TEXT,
    channel     TEXT,
    at          REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS journal (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    call_id TEXT NOT NULL,
    state   TEXT NOT NULL,
    at      REAL NOT NULL,
    owner   TEXT,
    detail  TEXT
);
CREATE TABLE IF NOT EXISTS rules (
    id          TEXT PRIMARY KEY,
    tool        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    words       TEXT,
    prefix      INTEGER NOT NULL DEFAULT 0,
    args        TEXT,
    digest      TEXT,
    scope       TEXT NOT NULL,
    session_id  TEXT,
    created     REAL NOT NULL,
    expires     REAL NOT NULL,
    created_by  TEXT,
    channel     TEXT,
    request_id  TEXT,
    revoked     REAL,
    revoked_by  TEXT,
    uses        INTEGER NOT NULL DEFAULT 0,
    last_used   REAL
);
CREATE INDEX IF NOT EXISTS rules_by_tool ON rules(tool, revoked, expires);
CREATE TABLE IF NOT EXISTS leases (
    worker  TEXT PRIMARY KEY,
    host    TEXT NOT NULL,
    expires REAL NOT NULL
);
"""

# Every statement that sets calls.state also sets calls.updated and calls.note (the
# journal's detail for this transition, NULL when there is none).
_TRIGGERS = tuple(
    f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON calls BEGIN "
    "INSERT INTO journal(call_id, state, at, owner, detail) "
    "VALUES (NEW.call_id, NEW.state, NEW.updated, NEW.owner, NEW.note); END"
    for name, event in (("calls_journal_new", "INSERT"),
                        ("calls_journal_state", "UPDATE OF state"))
)

assert RULE_COLUMNS  # the rules table above has exactly these columns


class SQLiteApprovalStore(SQLApprovalStore):
    """SQLite-backed store of calls, confirmation requests, rules and the journal.

    ``SQLiteApprovalStore(path)`` (or ``ApprovalStore(path)``) uses a file that several
    processes of one host may share: pending requests survive restarts and can be
    answered from another process. ``":memory:"`` is SQLite in this process's memory.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_pending: int = 10_000,
        max_history: int | None = -1,
        busy_timeout: float = 10.0,
        max_pending_per_session: int | None = MAX_PENDING_PER_SESSION,
        lease_seconds: float | None = None,
    ) -> None:
        self.path = None if path is None or str(path) == ":memory:" else Path(path)
        # Finished calls are kept so that a repeated call id is answered from its record
        # instead of running again. In memory that record must be bounded; a file keeps
        # everything unless told otherwise (-1 means: 100,000 in memory, unbounded on disk).
        self.max_history = checked_bounds(
            max_pending, max_pending_per_session, max_history,
            unbounded_history=100_000 if self.path is None else None)
        self.max_pending_per_session = max_pending_per_session
        self.max_pending = max_pending
        self.lease = _lease(lease_seconds)
        self._shared = self.path is not None  # ":memory:" is this process's alone
        self._opened = 0
        self._lock = threading.RLock()
        self._depth = 0  # open transactions and batches (savepoints inside the first)
        self._busy_ms = int(busy_timeout * 1000)
        self._now_count = 0
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            if not self.path.parent.exists():
                raise StoreError(
                    f"cannot open approval store {self.path}: directory "
                    f"{self.path.parent} does not exist; create it first"
                )
            # The store decides what may run: keep it private to this user. Create it
            # only if it is missing: closing any descriptor of a file drops every POSIX
            # lock this process holds on it, so opening and closing an existing store
            # would silently release the SQLite locks of this process's other
            # connections (another process could then checkpoint and delete the WAL
            # under them, and the processes would see diverging data).
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass
            else:
                os.close(fd)
        # SQLite built with SQLITE_USE_URI (Debian's) reads a name beginning with "file:"
        # as a URI even without uri=True: "file:x.db" opened x.db (with the umask's mode),
        # "file:x.db?mode=memory" no file at all. The file named is the one opened.
        name = target if not target.startswith("file:") else os.path.join(".", target)
        try:
            self._db = sqlite3.connect(
                name, timeout=busy_timeout, isolation_level=None, check_same_thread=False,
                cached_statements=256,  # every statement the store runs stays prepared
            )
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode = WAL")
                # WAL + NORMAL survives a killed process (not a power cut) and keeps a
                # commit at tens of microseconds instead of an fsync per write.
                self._db.execute("PRAGMA synchronous = NORMAL")
                # Checkpoint every 10,000 pages (about 40 MB of log) instead of 1,000: the
                # few pages every step rewrites (a table's last leaf, its indexes) are
                # copied back once per checkpoint, not once per 1,000 pages, which more
                # than halves a round trip's cost. The log is cut back to 64 MB after a
                # checkpoint. A power cut may lose the commits since the last checkpoint
                # (NORMAL's trade, above): now up to 10,000 pages of them, not 1,000.
                self._db.execute(f"PRAGMA wal_autocheckpoint = {_AUTOCHECKPOINT}")
                self._db.execute(f"PRAGMA journal_size_limit = {64 << 20}")
            self._db.executescript(_SCHEMA)
            with self._tx():  # one process sets up (or migrates) the file at a time
                row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta(key, value) VALUES('schema', ?)",
                                     (SCHEMA_VERSION,))
                elif row[0] in ("1", "2"):
                    # Version 1 journalled each transition with its own INSERT; the
                    # triggers do it now. A version-1 library refuses the migrated file
                    # (it would journal every transition twice). Version 3 adds the
                    # leases table (created above); a version-2 library, which does not
                    # renew leases, refuses it.
                    if row[0] == "1":
                        self._db.execute("ALTER TABLE calls ADD COLUMN note TEXT")
                    self._db.execute("UPDATE meta SET value=? WHERE key='schema'",
                                     (SCHEMA_VERSION,))
                elif row[0] != SCHEMA_VERSION:
                    raise StoreError(
                        f"approval store {target} has schema version {row[0]}, this library "
                        f"uses {SCHEMA_VERSION}; use a new file or a matching library version"
                    )
                for trigger in _TRIGGERS:
                    self._db.execute(trigger)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open approval store {target}: {exc}") from None

    # -- plumbing --------------------------------------------------------------------

    #: Now, in epoch seconds, on SQLite's clock (the host's: one host shares a file).
    _SQL_NOW = "((julianday('now') - 2440587.5) * 86400.0)"

    def close(self) -> None:
        self._stop_heartbeat()
        with self._lock:
            self._db.close()

    def _tx(self) -> _Transaction:
        return _Transaction(self)

    def batch(self) -> _Batch:
        """One transaction (one commit) for the several operations of one gate step
        (`capabilities.Batching`: a SQLite commit costs more than a statement); see
        `_Batch`."""
        return _Batch(self)

    def run_now(self, body: Callable[[], T]) -> tuple[bool, T | None]:
        """Run ``body`` (a gate step: a few statements) as one batch right here, if that
        cannot wait: ``(True, its result)``; ``(False, None)``, with nothing done, when
        it could (the caller then runs it on the store's worker thread).

        It cannot wait when no other thread is using the connection and SQLite's write
        lock is free: ``BEGIN IMMEDIATE`` is tried with a busy timeout of 0, and once it
        holds the lock nothing in the transaction waits (WAL: readers never block the
        writer). Its commit does not run the log's checkpoint (which copies pages back
        and may take milliseconds): every `_NOW_PER_CHECKPOINT_CHANCE`-th step goes
        through the worker thread, whose commits do. ``body``'s exceptions are raised
        after what it recorded is committed, as in `batch`.
        """
        if self.path is None or not self._lock.acquire(blocking=False):
            return False, None
        db = self._db
        try:
            if self._depth or db.in_transaction:
                return False, None
            self._now_count += 1
            if self._now_count % _NOW_PER_CHECKPOINT_CHANCE == 0:
                return False, None
            db.execute("PRAGMA wal_autocheckpoint = 0")
            try:
                db.execute("PRAGMA busy_timeout = 0")
                try:
                    db.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError:  # another process is writing
                    return False, None
                finally:
                    db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                self._depth = 1
                try:
                    result = body()
                finally:
                    self._depth = 0
                    if db.in_transaction:
                        db.execute("COMMIT")
                return True, result
            finally:
                db.execute(f"PRAGMA wal_autocheckpoint = {_AUTOCHECKPOINT}")
        finally:
            self._lock.release()

    def _x(self, sql: str, params: Sequence[Any] = (), *,
           retry: bool = False) -> sqlite3.Cursor:
        return self._db.execute(sql, params)

    def _xmany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._db.executemany(sql, rows)

    @property
    def _returning(self) -> bool:
        return _HAS_RETURNING

    def _clock(self) -> float:
        return clock()

_lease = lease_seconds


class _Transaction:
    """`BEGIN IMMEDIATE` ... `COMMIT` under the store's thread lock; inside a `batch`
    (or another transaction) a ``SAVEPOINT``, rolled back alone if its block raises.

    IMMEDIATE takes SQLite's write lock up front, so a read-then-write sequence cannot
    interleave with another process's; the thread lock does the same for threads that
    share this connection.
    """

    __slots__ = ("_store",)

    def __init__(self, store: SQLiteApprovalStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        store = self._store
        store._lock.acquire()
        try:
            if store._depth:
                store._db.execute(f"SAVEPOINT tx{store._depth}")
            else:
                store._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            store._lock.release()
            raise
        store._depth += 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        store = self._store
        store._depth -= 1
        db = store._db
        try:
            if store._depth:
                name = f"tx{store._depth}"
                if exc_type and db.in_transaction:
                    db.execute(f"ROLLBACK TO {name}")
                if db.in_transaction:
                    db.execute(f"RELEASE {name}")
            elif db.in_transaction:  # an I/O error may have rolled it back already
                db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            store._lock.release()


class _Batch:
    """One transaction for all the operations of one gate step (`SQLiteApprovalStore.batch`).

    Each operation inside keeps its own atomicity: its transaction becomes a savepoint
    (rolled back alone when it raises), a lone statement stays one statement. At the end
    the batch commits what the operations committed, also when the step raised: exactly
    what running them one by one would have left, in one commit instead of one each (a
    crash in between now loses the whole step, never half of it).
    """

    __slots__ = ("_store",)

    def __init__(self, store: SQLiteApprovalStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        store = self._store
        store._lock.acquire()
        if store._depth:  # inside a batch or a transaction already: part of it
            store._depth += 1
            return
        try:
            store._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            store._lock.release()
            raise
        store._depth = 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        store = self._store
        store._depth -= 1
        try:
            if store._depth == 0 and store._db.in_transaction:
                store._db.execute("COMMIT")
        finally:
            store._lock.release()
