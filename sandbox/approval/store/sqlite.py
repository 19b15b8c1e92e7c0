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

import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...errors import (
    ConfirmationStateError,
    ConfirmationTimedOutError,
    StoreError,
    UnknownCallError,
    UnknownConfirmationError,
)
from ..models import ConfirmationRequest, Rule, canonical_json
from ..providers import parse_answer
from .base import MAX_PENDING_PER_SESSION, ApprovalStore
from .protocol import Page
from .records import (
    HUMAN_OUTCOMES,
    PRUNABLE_STATES,
    REQUEST_COLUMNS,
    CallRecord,
    Owner,
    check_waiting_answer,
    clock,
    dt,
    dump,
    new_id,
    request_from_row,
    timed_out_message,
)
from .states import HELD, IN_PROGRESS, PARKABLE, sql_list

SCHEMA_VERSION = "2"  # 2: calls.note and the journal triggers (1 is migrated on open)

#: UPDATE ... RETURNING (SQLite 3.35+) lets a decision read what it needs in the
#: statement that makes it; older libraries read it first, in the same transaction.
_HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)

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

#: The columns of a rule row.
RULE_COLUMNS = (
    "id, tool, kind, words, prefix, args, digest, scope, session_id, created, expires, "
    "created_by, channel, request_id, revoked, revoked_by, uses, last_used"
)

class SQLiteApprovalStore(ApprovalStore):
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
    ) -> None:
        if max_pending_per_session is not None and max_pending_per_session < 1:
            raise StoreError("max_pending_per_session must be at least 1 or None, got "
                             f"{max_pending_per_session}")
        self.max_pending_per_session = max_pending_per_session
        if max_pending < 1:
            raise StoreError(f"max_pending must be at least 1, got {max_pending}")
        self.path = None if path is None or str(path) == ":memory:" else Path(path)
        self.max_pending = max_pending
        # Finished calls are kept so that a repeated call id is answered from its record
        # instead of running again. In memory that record must be bounded; a file keeps
        # everything unless told otherwise (-1 means: 100,000 in memory, unbounded on disk).
        if max_history == -1:
            max_history = 100_000 if self.path is None else None
        if max_history is not None and max_history < 1:
            raise StoreError(f"max_history must be at least 1 or None, got {max_history}")
        self.max_history = max_history
        self._opened = 0
        self._lock = threading.RLock()
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
        try:
            self._db = sqlite3.connect(
                target, timeout=busy_timeout, isolation_level=None, check_same_thread=False,
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
                # checkpoint. What a power cut may lose is the same: commits since the
                # last checkpoint (NORMAL's trade, above).
                self._db.execute("PRAGMA wal_autocheckpoint = 10000")
                self._db.execute(f"PRAGMA journal_size_limit = {64 << 20}")
            self._db.executescript(_SCHEMA)
            with self._tx():  # one process sets up (or migrates) the file at a time
                row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta(key, value) VALUES('schema', ?)",
                                     (SCHEMA_VERSION,))
                elif row[0] == "1":
                    # Version 1 journalled each transition with its own INSERT; the
                    # triggers do it now. A version-1 library refuses the migrated file
                    # (it would journal every transition twice).
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

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self) -> _Transaction:
        return _Transaction(self)

    def _journal(self, call_id: str, state: str, owner: str | None, detail: str | None = None,
                 at: float | None = None) -> None:
        """A journal row that is not a call transition (an answer waiting to be applied);
        transitions are journalled by the triggers on ``calls``."""
        self._db.execute(
            "INSERT INTO journal(call_id, state, at, owner, detail) VALUES (?,?,?,?,?)",
            (call_id, state, at or clock(), owner, detail),
        )

    # -- calls -----------------------------------------------------------------------

    def open_call(
        self, call_id: str, tool: str, digest: str, args: dict[str, Any],
        session_id: str | None = None, *, args_json: str | None = None,
    ) -> CallRecord | None:
        """Record a new call; return the existing record instead if the id is known.

        ``args_json``: ``canonical_json(args)``, when the caller has it already.
        """
        now = clock()
        owner = Owner.token()
        text = canonical_json(args) if args_json is None else args_json
        with self._lock:
            # One statement (journalled by its trigger): a new id is the common case.
            cur = self._db.execute(
                "INSERT OR IGNORE INTO calls(call_id, tool, digest, args, state, owner, "
                "session_id, created, updated) VALUES (?,?,?,?,'new',?,?,?,?)",
                (call_id, tool, digest, text, owner, session_id, now, now),
            )
            if cur.rowcount == 1:
                self._opened += 1
                if self.max_history is not None and self._opened % 1024 == 0:
                    with self._tx():
                        self._prune(self.max_history)
                return None
        with self._tx():
            existing = self._get_call(call_id)
            assert existing is not None
            never_started = existing.state == "abandoned" or (
                existing.state in ("new", "editing") and Owner.alive(existing.owner) is False)
            if never_started and (existing.tool, existing.digest) == (tool, digest):
                # Never ran: its process died before starting it. Start over (the gate
                # asks again). Other arguments under this id stay a duplicate call.
                self._db.execute(
                    "UPDATE calls SET state='new', owner=?, updated=?, note=? WHERE call_id=?",
                    (owner, now, "reopened: owner died before start", call_id),
                )
                return None
            return existing

    def _prune(self, keep: int) -> None:
        """Forget the oldest finished calls beyond `keep` (never pending or running ones)."""
        terminal = sql_list(PRUNABLE_STATES)
        (count,) = self._db.execute(
            f"SELECT COUNT(*) FROM calls WHERE state IN ({terminal})"
        ).fetchone()
        excess = count - keep
        if excess <= 0:
            return
        victims = f"SELECT call_id FROM calls WHERE state IN ({terminal}) ORDER BY updated LIMIT ?"
        for table, column in (("journal", "call_id"), ("requests", "call_id")):
            self._db.execute(f"DELETE FROM {table} WHERE {column} IN ({victims})", (excess,))
        self._db.execute(f"DELETE FROM calls WHERE call_id IN ({victims})", (excess,))

    def get_call(self, call_id: str) -> CallRecord:
        with self._lock:
            rec = self._get_call(call_id)
        if rec is None:
            raise UnknownCallError(
                f"unknown call id {call_id!r}: no call with this id was made through this store"
            )
        return rec

    def _get_call(self, call_id: str) -> CallRecord | None:
        row = self._db.execute(
            "SELECT call_id, tool, digest, args, state, request_id, owner, result, session_id, "
            "created, updated FROM calls WHERE call_id=?",
            (call_id,),
        ).fetchone()
        if row is None:
            return None
        return CallRecord(
            call_id=row[0], tool=row[1], digest=row[2], args=json.loads(row[3]), state=row[4],
            request_id=row[5], owner=row[6],
            result=None if row[7] is None else json.loads(row[7]), session_id=row[8],
            created=row[9], updated=row[10],
        )

    def start(self, call_id: str, digest: str) -> bool:
        """Claim the right to run: True for exactly one caller, and only for `digest`."""
        owner = Owner.token()
        now = clock()
        with self._lock:  # one guarded statement: atomic without a transaction
            return self._claim(call_id, digest, owner, now)

    def _claim(self, call_id: str, digest: str, owner: str, now: float) -> bool:
        # The grant is cleared in the statement that uses it: single use.
        cur = self._db.execute(
            "UPDATE calls SET state='started', owner=?, grant_digest=NULL, updated=?, note=? "
            "WHERE call_id=? AND ((state='approved' AND grant_digest=?) "
            "OR (state='new' AND digest=? AND owner=?))",
            (owner, now, digest, call_id, digest, digest, owner),
        )
        return bool(cur.rowcount == 1)

    def finish(self, call_id: str, state: str, result: Any) -> None:
        """Record the end of a call this process started (or refused before starting)."""
        owner = Owner.token()
        now = clock()
        text = dump(result)
        with self._lock:
            self._db.execute(
                "UPDATE calls SET state=?, result=?, updated=?, note=NULL WHERE call_id=? "
                f"AND owner=? AND state IN ({sql_list(IN_PROGRESS)})",
                (state, text, now, call_id, owner),
            )

    def grant(self, call_id: str, digest: str, run_args: dict[str, Any]) -> None:
        """Turn an `editing` call into an `approved` one bound to the edited digest."""
        owner = Owner.token()
        text = canonical_json(run_args)
        with self._lock:
            cur = self._db.execute(
                "UPDATE calls SET state='approved', grant_digest=?, run_args=?, updated=?, "
                "note=? WHERE call_id=? AND state='editing' AND owner=?",
                (digest, text, clock(), digest, call_id, owner),
            )
        if cur.rowcount != 1:
            raise ConfirmationStateError(f"call {call_id} is no longer being edited here")

    def in_doubt(self) -> list[CallRecord]:
        """Mark calls whose starter died as in doubt, and return every in-doubt call."""
        with self._tx():
            for call_id, owner in self._db.execute(
                f"SELECT call_id, owner FROM calls WHERE state IN ({sql_list(HELD)})"
            ).fetchall():
                if Owner.alive(owner) is False:
                    state = self._db.execute(
                        "SELECT state FROM calls WHERE call_id=?", (call_id,)
                    ).fetchone()[0]
                    new_state = "in_doubt" if state == "started" else "abandoned"
                    self._db.execute(
                        "UPDATE calls SET state=?, updated=?, note='owner process is gone' "
                        "WHERE call_id=? AND owner=?",
                        (new_state, clock(), call_id, owner),
                    )
            rows = self._db.execute(
                "SELECT call_id FROM calls WHERE state='in_doubt' ORDER BY updated"
            ).fetchall()
            return [rec for (cid,) in rows if (rec := self._get_call(cid)) is not None]

    def count_requests(self, call_id: str) -> int:
        with self._lock:
            (n,) = self._db.execute(
                "SELECT COUNT(*) FROM requests WHERE call_id=?", (call_id,)
            ).fetchone()
        return int(n)

    def journal(self, call_id: str) -> list[tuple[str, float, str | None]]:
        with self._lock:
            return [
                (state, at, detail)
                for state, at, detail in self._db.execute(
                    "SELECT state, at, detail FROM journal WHERE call_id=? ORDER BY seq",
                    (call_id,),
                )
            ]

    # -- requests --------------------------------------------------------------------

    def park(
        self, *, call_id: str, tool: str, args: dict[str, Any], digest: str, hint: str,
        payload: Any, kind: str, expires_at: float | None,
        details: dict[str, Any] | None = None, edited_from: str | None = None,
        session_id: str | None = None, args_json: str | None = None,
    ) -> tuple[str, float]:
        """Park a confirmation request for a call in progress here: its id and creation time."""
        rid = new_id("cf")
        now = clock()
        owner = Owner.token()
        text = canonical_json(args) if args_json is None else args_json
        row = (rid, call_id, tool, text, digest, hint, dump(payload), kind,
               dump(details) if details else "{}", now, expires_at, edited_from, session_id)
        with self._tx():
            # The bound on pending requests is checked in the guarded update itself.
            cur = self._db.execute(
                "UPDATE calls SET state='awaiting', request_id=?, owner=?, updated=?, note=? "
                f"WHERE call_id=? AND state IN ({sql_list(PARKABLE)}) AND owner=? "
                "AND (SELECT COUNT(*) FROM requests WHERE status='pending') < ?",
                (rid, owner, now, rid, call_id, owner, self.max_pending),
            )
            if cur.rowcount == 1 and session_id is not None and (
                    self.max_pending_per_session is not None):
                (mine,) = self._db.execute(
                    "SELECT COUNT(*) FROM requests WHERE status='pending' AND session_id=?",
                    (session_id,)).fetchone()
                if mine >= self.max_pending_per_session:
                    raise ConfirmationStateError(  # raised inside: the update rolls back
                        f"session {session_id} already has {mine} confirmation requests "
                        f"pending (max_pending_per_session={self.max_pending_per_session}); "
                        "answer or expire some first")
            if cur.rowcount != 1:
                (count,) = self._db.execute(
                    "SELECT COUNT(*) FROM requests WHERE status='pending'"
                ).fetchone()
                if count >= self.max_pending:
                    raise ConfirmationStateError(
                        f"{count} confirmation requests are already pending (max_pending="
                        f"{self.max_pending}); answer or expire some, or raise max_pending"
                    )
                raise ConfirmationStateError(
                    f"call {call_id} cannot wait for confirmation: it is not in progress here"
                )
            self._db.execute(
                "INSERT INTO requests(id, call_id, tool, args, digest, hint, payload, kind, "
                "details, status, created, expires, edited_from, session_id) "
                "VALUES (?,?,?,?,?,?,?,?,?,'pending',?,?,?,?)",
                row,
            )
        return rid, now

    def decide(
        self,
        request_id: str,
        *,
        status: str,
        outcome: str | None = None,
        reason: str | None = None,
        decided_by: str | None = None,
        channel: str | None = None,
        decision: dict[str, Any] | str | None = None,
        call_result: Any = None,
        start: bool = False,
    ) -> None:
        """Record the one decision a pending request gets; raise if it already has one.

        ``status`` is the request's final status (approved, denied, timed_out, error,
        edited). Approving also grants the call, bound to the request's digest; an edit
        leaves the call ``editing`` until `grant` or `add_request` continues it.

        ``start=True`` with an approval also claims that grant for this process in the
        same transaction (what `start` does), for a caller that runs the call right
        away: the journal still reads approved → started, and no other process can
        claim the grant in between.

        ``decision`` is the decision as a JSON-able dict, or already as JSON text.
        """
        now = clock()
        owner = Owner.token()
        decision_text = decision if isinstance(decision, str) else dump(decision)
        result_text = dump(call_result)
        with self._tx():
            if outcome in HUMAN_OUTCOMES:
                # A human's answer recorded first by another channel wins over this one.
                row = self._db.execute(
                    "SELECT a.decision, a.decided_by, a.channel FROM answers a JOIN requests "
                    "r ON r.id = a.request_id WHERE a.request_id=? AND r.status='pending'",
                    (request_id,)).fetchone()
                if row is not None:
                    check_waiting_answer(request_id, outcome, row[0], row[1] or row[2])
            # The common case in one guarded statement: a pending, unexpired request.
            values = (status, now, outcome, reason, decided_by, channel, decision_text,
                      request_id)
            hit: tuple[str, str] | None = None
            if _HAS_RETURNING:
                rows = self._db.execute(
                    "UPDATE requests SET status=?, decided=?, outcome=?, reason=?, "
                    "decided_by=?, channel=?, decision=? WHERE id=? AND status='pending' "
                    "AND (expires IS NULL OR ? <= expires) RETURNING call_id, digest",
                    (*values, now),
                ).fetchall()
                hit = rows[0] if rows else None
            else:
                row = self._db.execute(
                    "SELECT status, expires, call_id, digest FROM requests WHERE id=?",
                    (request_id,),
                ).fetchone()
                if row is not None and row[0] == "pending" and (row[1] is None
                                                                or now <= row[1]):
                    self._db.execute(
                        "UPDATE requests SET status=?, decided=?, outcome=?, reason=?, "
                        "decided_by=?, channel=?, decision=? WHERE id=? AND status='pending'",
                        values,
                    )
                    hit = (row[2], row[3])
            if hit is not None:
                call_id, digest = hit
                self._decide_call(request_id, call_id, digest, now, owner, status=status,
                                  by=decided_by or channel, call_result=result_text)
                if start and status == "approved" and not self._claim(call_id, digest, owner,
                                                                       now):
                    # Raised inside the transaction: the decision is rolled back too.
                    raise ConfirmationStateError(
                        f"call {call_id} of confirmation {request_id} is no longer waiting "
                        "for it; nothing was run"
                    )
                return
            req = self._get_request(request_id)
            if req is None:
                raise UnknownConfirmationError(
                    f"unknown confirmation id {request_id!r}: it was never issued by this "
                    "store (check the id, and that you opened the same store file)"
                )
            if req.status == "timed_out":
                raise ConfirmationTimedOutError(timed_out_message(req))
            if req.status != "pending":
                row = self._db.execute(
                    "SELECT decided_by, channel, decided FROM requests WHERE id=?", (request_id,)
                ).fetchone()
                who = row[0] or row[1] or "another decider"
                raise ConfirmationStateError(
                    f"confirmation {request_id} was already answered ({req.status}, by {who}); "
                    "a confirmation is answered once and a grant is used once"
                )
            expired = req.expires_at is not None and now > req.expires_at.timestamp() and (
                status in ("approved", "denied", "edited"))
            if expired:
                # Recorded (committed) as timed out before the refusal is raised.
                self._expire(req, now)
            else:
                # Pending and expired, but the status recorded is itself a failure
                # (timed_out, error): record it as given.
                self._db.execute(
                    "UPDATE requests SET status=?, decided=?, outcome=?, reason=?, "
                    "decided_by=?, channel=?, decision=? WHERE id=? AND status='pending'",
                    values,
                )
                self._decide_call(req.id, req.call_id, req.digest, now, owner, status=status,
                                  by=decided_by or channel, call_result=result_text)
        if expired:
            raise ConfirmationTimedOutError(timed_out_message(req))

    def _decide_call(self, request_id: str, call_id: str, digest: str, now: float,
                     owner: str, *, status: str, by: str | None,
                     call_result: str | None) -> None:
        """Move the call waiting on a just-decided request (approving grants `digest`)."""
        if status == "approved":
            call_state, grant = "approved", digest
        elif status == "edited":
            call_state, grant = "editing", None
        else:
            call_state, grant = status, None
        self._db.execute(
            "UPDATE calls SET state=?, grant_digest=?, owner=?, result=?, updated=?, note=? "
            "WHERE call_id=? AND state='awaiting' AND request_id=?",
            (call_state, grant, owner, call_result, now, f"{request_id} by {by}", call_id,
             request_id),
        )

    def _expire(self, req: ConfirmationRequest, now: float) -> None:
        self._db.execute(
            "UPDATE requests SET status='timed_out', decided=?, outcome='timeout', "
            "reason='expired before an answer' WHERE id=? AND status='pending'",
            (now, req.id),
        )
        result = {"status": "timed_out", "error": f"Confirmation timed out: {req.id} expired "
                  "before anyone answered it. The tool was not run."}
        self._db.execute(
            "UPDATE calls SET state='timed_out', result=?, updated=?, note=? WHERE call_id=? "
            "AND state='awaiting' AND request_id=?",
            (dump(result), now, f"{req.id} expired", req.call_id, req.id),
        )

    # -- answers from other processes --------------------------------------------------

    def submit_answer(self, request_id: str, decision: Any, *,
                      decided_by: str | None = None, channel: str | None = None) -> None:
        """Record a human's answer for the process that holds the tool to apply.

        Channels that do not hold the tool (a web page, the CLI, another process) answer
        here; the first answer wins and any later one is refused with a clear error. The
        answer takes effect when the runner owning the call applies it (its provider is
        waiting for it, or `ToolRunner.resume`/`apply_answers` is called).

        ``decision`` is a `Decision`, a `ToolConfirmation`, a bool, or a dict / JSON text
        in either shape. It is checked here: a malformed answer raises
        `ConfigurationError` and is not recorded, so it cannot block the real one.
        """
        checked = parse_answer(decision, channel=channel or "answer")
        if decided_by is not None and checked.decided_by is None:
            checked = checked.model_copy(update={"decided_by": decided_by})
        decision = checked.model_dump(mode="json", exclude_none=True)
        now = clock()
        with self._tx():
            req = self._get_request(request_id)
            if req is None:
                raise UnknownConfirmationError(
                    f"unknown confirmation id {request_id!r}: it was never issued by this store"
                )
            if req.status == "timed_out":
                raise ConfirmationTimedOutError(timed_out_message(req))
            if req.status != "pending":
                raise ConfirmationStateError(
                    f"confirmation {request_id} was already answered ({req.status})"
                )
            expired = req.expires_at is not None and now > req.expires_at.timestamp()
            if expired:
                # Recorded (committed) as timed out before the refusal is raised.
                self._expire(req, now)
            else:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO answers(request_id, decision, decided_by, channel, "
                    "at) VALUES (?,?,?,?,?)",
                    (request_id, canonical_json(decision), decided_by, channel, now),
                )
                if cur.rowcount != 1:
                    raise ConfirmationStateError(
                        f"confirmation {request_id} already has an answer waiting to be "
                        "applied; a confirmation is answered once"
                    )
                self._journal(req.call_id, "answered", None,
                              f"{request_id} by {decided_by or channel}", now)
        if expired:
            raise ConfirmationTimedOutError(timed_out_message(req))

    def get_answer(self, request_id: str) -> dict[str, Any] | None:
        """The answer submitted for a request and not yet applied, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT a.decision, a.decided_by, a.channel FROM answers a "
                "JOIN requests r ON r.id = a.request_id WHERE a.request_id=? AND r.status='pending'",
                (request_id,),
            ).fetchone()
        if row is None:
            return None
        decision = dict(json.loads(row[0]))
        decision.setdefault("decided_by", row[1])
        decision.setdefault("channel", row[2])
        return {k: v for k, v in decision.items() if v is not None}

    def answer_states(self, request_ids: Sequence[str]) -> dict[str, tuple[str, dict[str, Any] | None]]:
        """For each known id: its status and the answer waiting to be applied, if any.

        One query for many waiters: what a provider polling the store for answers uses.
        """
        out: dict[str, tuple[str, dict[str, Any] | None]] = {}
        ids = list(request_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            with self._lock:
                rows = self._db.execute(
                    "SELECT r.id, r.status, a.decision, a.decided_by, a.channel FROM requests r "
                    f"LEFT JOIN answers a ON a.request_id = r.id WHERE r.id IN ({marks})",
                    chunk,
                ).fetchall()
            for rid, status, raw, decided_by, channel in rows:
                answer: dict[str, Any] | None = None
                if raw is not None and status == "pending":
                    answer = dict(json.loads(raw))
                    answer.setdefault("decided_by", decided_by)
                    answer.setdefault("channel", channel)
                    answer = {k: v for k, v in answer.items() if v is not None}
                out[rid] = (status, answer)
        return out

    def answered_requests(self) -> list[ConfirmationRequest]:
        """Pending requests that have an answer waiting to be applied."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {REQUEST_COLUMNS.replace('id,', 'r.id,', 1)} FROM requests r "
                "JOIN answers a ON a.request_id = r.id WHERE r.status='pending' "
                "ORDER BY a.at"
            ).fetchall()
        return [request_from_row(r) for r in rows]

    def get_request(self, request_id: str) -> ConfirmationRequest:
        with self._lock:
            req = self._get_request(request_id)
        if req is None:
            raise UnknownConfirmationError(
                f"unknown confirmation id {request_id!r}: it was never issued by this store"
            )
        return req

    def request_decision(self, request_id: str) -> dict[str, Any] | None:
        """The recorded decision of an answered request (outcome, reason, who, channel)."""
        with self._lock:
            row = self._db.execute(
                "SELECT status, outcome, reason, decided_by, channel, decided, decision "
                "FROM requests WHERE id=?",
                (request_id,),
            ).fetchone()
        if row is None or row[0] == "pending":
            return None
        return {
            "status": row[0], "outcome": row[1], "reason": row[2], "decided_by": row[3],
            "channel": row[4], "decided_at": dt(row[5]),
            "decision": None if row[6] is None else json.loads(row[6]),
        }

    def _get_request(self, request_id: str) -> ConfirmationRequest | None:
        row = self._db.execute(
            f"SELECT {REQUEST_COLUMNS} FROM requests WHERE id=?", (request_id,)
        ).fetchone()
        return None if row is None else request_from_row(row)

    def pending(self, *, session_id: str | None = None) -> list[ConfirmationRequest]:
        """Requests still waiting for an answer, oldest first; expired ones are closed."""
        now = clock()
        with self._tx():
            for row in self._db.execute(
                f"SELECT {REQUEST_COLUMNS} FROM requests WHERE status='pending' "
                "AND expires IS NOT NULL AND expires < ?",
                (now,),
            ).fetchall():
                self._expire(request_from_row(row), now)
            query = f"SELECT {REQUEST_COLUMNS} FROM requests WHERE status='pending'"
            params: tuple[Any, ...] = ()
            if session_id is not None:
                query += " AND session_id=?"
                params = (session_id,)
            rows = self._db.execute(query + " ORDER BY created, id", params).fetchall()
        return [request_from_row(r) for r in rows]


    def list_pending(self, *, limit: int, after: str | None = None,
                     session_id: str | None = None) -> Page:
        self._check_page(limit)
        now = clock()
        where = "status='pending'"
        params: list[Any] = []
        if session_id is not None:
            where += " AND session_id=?"
            params.append(session_id)
        with self._tx():
            for row in self._db.execute(
                f"SELECT {REQUEST_COLUMNS} FROM requests WHERE status='pending' "
                "AND expires IS NOT NULL AND expires < ?", (now,),
            ).fetchall():
                self._expire(request_from_row(row), now)
            (total,) = self._db.execute(
                f"SELECT COUNT(*) FROM requests WHERE {where}", params).fetchone()
            query = f"SELECT {REQUEST_COLUMNS} FROM requests WHERE {where}"
            if after is not None:
                query += " AND (created, id) > (SELECT created, id FROM requests WHERE id=?)"
                params.append(after)
            rows = self._db.execute(query + " ORDER BY created, id LIMIT ?",
                                    (*params, limit + 1)).fetchall()
        items = [request_from_row(r) for r in rows[:limit]]
        return Page(items=items, next=items[-1].id if len(rows) > limit else None,
                    total=int(total))

    # -- rules ---------------------------------------------------------------------------

    def add_rules(self, rules: Sequence[Rule]) -> None:
        with self._tx():
            self._db.executemany(
                f"INSERT INTO rules({RULE_COLUMNS}) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [_rule_row(rule) for rule in rules],
            )

    def active_rules(self, tool: str, session_id: str | None, now: float) -> list[Rule]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {RULE_COLUMNS} FROM rules WHERE tool=? AND revoked IS NULL "
                "AND expires>? AND (scope='always' OR session_id=?) ORDER BY created",
                (tool, now, session_id or ""),
            ).fetchall()
        return [_rule_from_row(r) for r in rows]

    def mark_rules_used(self, rule_ids: Sequence[str], now: float) -> None:
        with self._tx():
            for rule_id in rule_ids:
                self._db.execute(
                    "UPDATE rules SET uses=uses+1, last_used=? WHERE id=?", (now, rule_id))

    def get_rule(self, rule_id: str) -> Rule | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {RULE_COLUMNS} FROM rules WHERE id=?", (rule_id,)).fetchone()
        return None if row is None else _rule_from_row(row)

    def list_rules(self, *, include_inactive: bool, tool: str | None,
                   now: float) -> list[Rule]:
        query = f"SELECT {RULE_COLUMNS} FROM rules"
        where: list[str] = []
        params: list[Any] = []
        if not include_inactive:
            where.append("revoked IS NULL AND expires>?")
            params.append(now)
        if tool is not None:
            where.append("tool=?")
            params.append(tool)
        if where:
            query += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created, id", params).fetchall()
        return [_rule_from_row(r) for r in rows]

    def revoke_rule(self, rule_id: str, by: str | None, now: float) -> bool:
        """Revoke a rule (once); False when no rule has this id."""
        with self._tx():
            cur = self._db.execute(
                "UPDATE rules SET revoked=?, revoked_by=? WHERE id=? AND revoked IS NULL",
                (now, by, rule_id),
            )
            return cur.rowcount == 1 or self._db.execute(
                "SELECT 1 FROM rules WHERE id=?", (rule_id,)).fetchone() is not None

    # -- the audit anchor ------------------------------------------------------------------

    def audit_head(self, log: str) -> tuple[int, str] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM meta WHERE key=?", (f"audit:{log}",)).fetchone()
        if row is None:
            return None
        count, last_hash = str(row[0]).split(":", 1)
        return int(count), last_hash

    def anchor_audit(self, log: str, count: int, last_hash: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                "SET value=excluded.value", (f"audit:{log}", f"{count}:{last_hash}"))


def _rule_row(rule: Rule) -> tuple[Any, ...]:
    def ts(value: datetime | None) -> float | None:
        return None if value is None else value.timestamp()

    return (
        rule.id, rule.tool, rule.kind,
        None if rule.words is None else json.dumps(list(rule.words), ensure_ascii=False),
        int(rule.prefix), None if rule.args is None else canonical_json(rule.args),
        rule.digest, rule.scope, rule.session_id, ts(rule.created_at), ts(rule.expires_at),
        rule.created_by, rule.channel, rule.request_id, ts(rule.revoked_at), rule.revoked_by,
        rule.uses, ts(rule.last_used_at),
    )


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def _rule_from_row(row: tuple[Any, ...]) -> Rule:
    return Rule(
        id=row[0], tool=row[1], kind=row[2],
        words=None if row[3] is None else tuple(json.loads(row[3])), prefix=bool(row[4]),
        args=None if row[5] is None else json.loads(row[5]), digest=row[6], scope=row[7],
        session_id=row[8], created_at=_utc(row[9]), expires_at=_utc(row[10]),
        created_by=row[11], channel=row[12], request_id=row[13], revoked_at=dt(row[14]),
        revoked_by=row[15], uses=row[16], last_used_at=dt(row[17]),
    )


class _Transaction:
    """`BEGIN IMMEDIATE` ... `COMMIT` under the store's thread lock.

    IMMEDIATE takes SQLite's write lock up front, so a read-then-write sequence cannot
    interleave with another process's; the thread lock does the same for threads that
    share this connection.
    """

    def __init__(self, store: SQLiteApprovalStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        self._store._lock.acquire()
        try:
            self._store._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._store._lock.release()
            raise

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._store._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._store._lock.release()
