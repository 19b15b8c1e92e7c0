"""`SQLApprovalStore`: the operations of `StoreProtocol` written once in SQL, for every
SQL backend (`SQLiteApprovalStore`, `PostgresApprovalStore`).

The statements are written with ``?`` placeholders in the SQL both dialects share
(``INSERT ... ON CONFLICT``, ``UPDATE ... RETURNING``, row-value comparisons); a backend
provides only the plumbing:

- ``_x(sql, params)`` / ``_xmany``: run one statement (PostgreSQL rewrites ``?`` to
  ``%s``), on its own when outside a transaction;
- ``_tx()``: a transaction that read-then-write steps run in, serialized against every
  other such transaction on the store (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a
  transaction-level advisory lock), under ``_lock`` for the threads sharing the
  connection;
- ``_SQL_NOW``: the database's clock as epoch seconds (worker leases are compared on
  one clock, whichever host wrote them);
- ``_notify_answer``: tell waiters an answer or decision was recorded (PostgreSQL
  NOTIFY; SQLite waiters poll).

Exactly-once rests on guarded updates: a request moves from ``pending`` only while it
is still ``pending``; a call moves to ``started`` only from ``approved`` with a grant for
exactly the digest about to run (cleared in the same statement: single use) or from
``new`` by the worker that opened it. Every transition is journalled by a trigger on
``calls.state``.

Worker leases: a worker that holds calls keeps a row in ``leases`` (its owner token,
host and expiry on the database clock), renewed by a heartbeat thread every third of
the lease. The sweep (`in_doubt`) treats a call's worker as gone when its process is
known dead on this host, or — on any host — when its lease ran out: ``started`` calls
become ``in_doubt`` (never run again), never-started ones ``abandoned``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

from sandbox.approval.models import ConfirmationRequest, canonical_json
from sandbox.approval.store import decisions
from sandbox.approval.store.base import StoreBase
from sandbox.approval.store.protocol import Page
from sandbox.approval.store.records import (
    PRUNABLE_STATES,
    REQUEST_COLUMNS,
    CallRecord,
    Owner,
    clock,
    dt,
    dump,
    host_id,
    new_id,
    request_from_row,
)
from sandbox.approval.store.sql_rules import SQLRules
from sandbox.approval.store.states import HELD, IN_PROGRESS, PARKABLE, sql_list
from sandbox.errors import (
    StoreError,
)

_log = logging.getLogger(__name__)


#: Default worker lease, in seconds (``lease_seconds=`` or ``$SANDBOX_LEASE_SECONDS``).
DEFAULT_LEASE = 30.0


def lease_seconds(value: float | None) -> float:
    """The lease length to use: ``value``, else ``$SANDBOX_LEASE_SECONDS``, else 30 s."""
    if value is None:
        text = os.environ.get("SANDBOX_LEASE_SECONDS")
        try:
            value = float(text) if text else DEFAULT_LEASE
        except ValueError:
            raise StoreError(f"SANDBOX_LEASE_SECONDS must be a number of seconds, got {text!r}"
                             ) from None
    if not 0.2 <= value <= 86_400:
        raise StoreError(f"lease_seconds must be between 0.2 and 86400, got {value!r}")
    return float(value)


def _beat(ref: weakref.ref[SQLApprovalStore], owner: str, closing: threading.Event,
          period: float, pid: int) -> None:
    """A worker's heartbeat: renew its lease every ``period`` seconds until the store is
    closed or collected."""
    while not closing.wait(period):
        store = ref()
        if store is None or os.getpid() != pid:
            return
        try:
            store._renew(owner)
        except Exception as exc:  # the next beat tries again; the sweep is the judge
            _log.warning("worker lease %s not renewed: %s", owner, exc)
        del store


class SQLApprovalStore(SQLRules, StoreBase):
    """What the SQL backends share. Not constructed directly."""

    #: The database clock as epoch seconds, in this dialect.
    _SQL_NOW: ClassVar[str]
    max_history: int | None
    lease: float
    _opened: int
    _lock: threading.RLock
    _lease_pid: int = -1
    _heartbeat: threading.Thread | None = None
    _closing: threading.Event | None = None
    #: Whether workers of other processes can share this store (and so need leases).
    _shared = True

    # -- plumbing a backend provides -------------------------------------------------

    def _x(self, sql: str, params: Sequence[Any] = (), *, retry: bool = False) -> Any:
        """Run one statement. ``retry``: it may safely run twice (a backend whose
        connection can drop mid-statement runs it again on a new one)."""
        raise NotImplementedError

    def _xmany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def _tx(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    @property
    def _returning(self) -> bool:
        return True

    def _clock(self) -> float:
        return clock()

    #: A column for a decision's ``UPDATE ... RETURNING`` that sends the answer
    #: notification in that same statement (one parameter: `_answer_channel`); empty
    #: when the dialect has none (then `_notify_answer` runs, if it does anything).
    _RETURNING_NOTIFY: ClassVar[str] = ""
    _answer_channel = ""

    def _notify_answer(self, request_id: str) -> None:
        """Called inside the transaction that records an answer or a decision."""

    # -- worker leases ---------------------------------------------------------------

    def _hold(self, owner: str) -> None:
        """This process is about to hold calls as ``owner``: make sure its lease exists
        and a heartbeat renews it (once per process; again after a fork)."""
        if self._lease_pid == os.getpid() or not self._shared:
            return
        with self._lock:
            if self._lease_pid == os.getpid():
                return
            self._renew(owner)
            self._lease_pid = os.getpid()
            self._closing = threading.Event()
            # The thread holds the store weakly: a store dropped without close() is still
            # collected (and its connection closed); the heartbeat then stops.
            self._heartbeat = threading.Thread(
                target=_beat, args=(weakref.ref(self), owner, self._closing,
                                    self.lease / 3, os.getpid()),
                daemon=True, name=f"sandbox-lease-{owner}")
            self._heartbeat.start()

    def _renew(self, owner: str) -> None:
        with self._lock:
            self._x(
                "INSERT INTO leases(worker, host, expires) "
                f"VALUES (?, ?, {self._SQL_NOW} + ?) "
                "ON CONFLICT(worker) DO UPDATE SET expires=excluded.expires",
                (owner, host_id(), self.lease), retry=True)

    def _stop_heartbeat(self) -> None:
        if self._closing is not None:
            self._closing.set()
        beat = self._heartbeat
        if beat is not None and beat is not threading.current_thread() and (
                self._lease_pid == os.getpid()):
            beat.join(timeout=5)
        self._heartbeat = None
        self._lease_pid = -1

    def _gone(self, owner: str | None, live: set[str] | None = None) -> bool:
        """Whether the worker ``owner`` is gone: known dead on this host, or (on any
        host) holding no unexpired lease. ``live``: the workers holding one, if read."""
        alive = Owner.alive(owner)
        if alive is not None:
            return not alive
        if owner is None:
            return True
        if live is None:
            live = self._live_workers()
        return owner not in live

    def _live_workers(self) -> set[str]:
        return {w for (w,) in self._x(
            f"SELECT worker FROM leases WHERE expires > {self._SQL_NOW}").fetchall()}


    # -- the journal -------------------------------------------------------------------

    def _journal(self, call_id: str, state: str, owner: str | None, detail: str | None = None,
                 at: float | None = None) -> None:
        """A journal row that is not a call transition (an answer waiting to be applied);
        transitions are journalled by the triggers on ``calls``."""
        self._x(
            "INSERT INTO journal(call_id, state, at, owner, detail) VALUES (?,?,?,?,?)",
            (call_id, state, at or self._clock(), owner, detail),
        )

    # -- calls -----------------------------------------------------------------------

    def open_call(
        self, call_id: str, tool: str, digest: str, args: dict[str, Any],
        session_id: str | None = None, *, args_json: str | None = None,
    ) -> CallRecord | None:
        """Record a new call; return the existing record instead if the id is known.

        ``args_json``: ``canonical_json(args)``, when the caller has it already.
        """
        now = self._clock()
        owner = Owner.token()
        self._hold(owner)
        text = canonical_json(args) if args_json is None else args_json
        with self._lock:
            # One statement (journalled by its trigger): a new id is the common case.
            cur = self._x(
                "INSERT INTO calls(call_id, tool, digest, args, state, owner, "
                "session_id, created, updated) VALUES (?,?,?,?,'new',?,?,?,?) "
                "ON CONFLICT DO NOTHING",
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
                existing.state in ("new", "editing") and self._gone(existing.owner))
            if never_started and (existing.tool, existing.digest) == (tool, digest):
                # Never ran: its process died before starting it. Start over (the gate
                # asks again). Other arguments under this id stay a duplicate call.
                self._x(
                    "UPDATE calls SET state='new', owner=?, updated=?, note=? WHERE call_id=?",
                    (owner, now, "reopened: owner died before start", call_id),
                )
                return None
            return existing

    def _prune(self, keep: int) -> None:
        """Forget the oldest finished calls beyond `keep` (never pending or running ones)."""
        terminal = sql_list(PRUNABLE_STATES)
        (count,) = self._x(
            f"SELECT COUNT(*) FROM calls WHERE state IN ({terminal})"
        ).fetchone()
        excess = count - keep
        if excess <= 0:
            return
        victims = f"SELECT call_id FROM calls WHERE state IN ({terminal}) ORDER BY updated LIMIT ?"
        for table, column in (("journal", "call_id"), ("requests", "call_id")):
            self._x(f"DELETE FROM {table} WHERE {column} IN ({victims})", (excess,))
        self._x(f"DELETE FROM calls WHERE call_id IN ({victims})", (excess,))

    def get_call(self, call_id: str) -> CallRecord:
        with self._lock:
            rec = self._get_call(call_id)
        if rec is None:
            raise decisions.unknown_call(call_id)
        return rec

    def _get_call(self, call_id: str) -> CallRecord | None:
        row = self._x(
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
        self._hold(owner)
        now = self._clock()
        with self._lock:  # one guarded statement: atomic without a transaction
            return self._claim(call_id, digest, owner, now)

    def _claim(self, call_id: str, digest: str, owner: str, now: float) -> bool:
        # The grant is cleared in the statement that uses it: single use.
        cur = self._x(
            "UPDATE calls SET state='started', owner=?, grant_digest=NULL, updated=?, note=? "
            "WHERE call_id=? AND ((state='approved' AND grant_digest=?) "
            "OR (state='new' AND digest=? AND owner=?))",
            (owner, now, digest, call_id, digest, digest, owner),
        )
        return bool(cur.rowcount == 1)

    def finish(self, call_id: str, state: str, result: Any) -> None:
        """Record the end of a call this process started (or refused before starting)."""
        owner = Owner.token()
        now = self._clock()
        text = dump(result)
        with self._lock:
            self._x(  # idempotent: a second run finds the call no longer in progress
                "UPDATE calls SET state=?, result=?, updated=?, note=NULL WHERE call_id=? "
                f"AND owner=? AND state IN ({sql_list(IN_PROGRESS)})",
                (state, text, now, call_id, owner), retry=True,
            )

    def grant(self, call_id: str, digest: str, run_args: dict[str, Any]) -> None:
        """Turn an `editing` call into an `approved` one bound to the edited digest."""
        owner = Owner.token()
        self._hold(owner)
        text = canonical_json(run_args)
        with self._lock:
            cur = self._x(
                "UPDATE calls SET state='approved', grant_digest=?, run_args=?, updated=?, "
                "note=? WHERE call_id=? AND state='editing' AND owner=?",
                (digest, text, self._clock(), digest, call_id, owner),
            )
        if cur.rowcount != 1:
            raise decisions.not_editing(call_id)

    def in_doubt(self) -> list[CallRecord]:
        """Mark calls whose worker is gone (its process dead on this host, or its lease
        expired, seen from any host) — ``started`` ones ``in_doubt``, never-started ones
        ``abandoned`` — and return every call in doubt."""
        with self._tx():
            live: set[str] | None = None
            for call_id, owner, state in self._x(
                f"SELECT call_id, owner, state FROM calls WHERE state IN ({sql_list(HELD)})"
            ).fetchall():
                if Owner.alive(owner) is None and live is None:
                    live = self._live_workers()
                if self._gone(owner, live):
                    why = ("owner process is gone" if Owner.alive(owner) is False
                           else "owner's lease expired")
                    # Guarded on the state read: a worker that finishes meanwhile wins.
                    self._x(
                        "UPDATE calls SET state=?, updated=?, note=? "
                        "WHERE call_id=? AND owner=? AND state=?",
                        ("in_doubt" if state == "started" else "abandoned", self._clock(),
                         why, call_id, owner, state),
                    )
            # Leases of workers gone for a day: an absent lease counts as expired too.
            self._x(f"DELETE FROM leases WHERE expires < {self._SQL_NOW} - 86400")
            rows = self._x(
                "SELECT call_id FROM calls WHERE state='in_doubt' ORDER BY updated"
            ).fetchall()
            return [rec for (cid,) in rows if (rec := self._get_call(cid)) is not None]

    def count_requests(self, call_id: str) -> int:
        with self._lock:
            (n,) = self._x(
                "SELECT COUNT(*) FROM requests WHERE call_id=?", (call_id,)
            ).fetchone()
        return int(n)

    def journal(self, call_id: str) -> list[tuple[str, float, str | None]]:
        with self._lock:
            return [
                (state, at, detail)
                for state, at, detail in self._x(
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
        now = self._clock()
        owner = Owner.token()
        self._hold(owner)
        text = canonical_json(args) if args_json is None else args_json
        row = (rid, call_id, tool, text, digest, hint, dump(payload), kind,
               dump(details) if details else "{}", now, expires_at, edited_from, session_id)
        with self._tx():
            # The bound on pending requests is checked in the guarded update itself.
            cur = self._x(
                "UPDATE calls SET state='awaiting', request_id=?, owner=?, updated=?, note=? "
                f"WHERE call_id=? AND state IN ({sql_list(PARKABLE)}) AND owner=? "
                "AND (SELECT COUNT(*) FROM requests WHERE status='pending') < ?",
                (rid, owner, now, rid, call_id, owner, self.max_pending),
            )
            if cur.rowcount == 1 and session_id is not None and (
                    self.max_pending_per_session is not None):
                (mine,) = self._x(
                    "SELECT COUNT(*) FROM requests WHERE status='pending' AND session_id=?",
                    (session_id,)).fetchone()
                if mine >= self.max_pending_per_session:
                    # Raised inside: the update rolls back.
                    raise decisions.session_full(session_id, mine, self.max_pending_per_session)
            if cur.rowcount != 1:
                (count,) = self._x(
                    "SELECT COUNT(*) FROM requests WHERE status='pending'"
                ).fetchone()
                if count >= self.max_pending:
                    raise decisions.too_many_pending(count, self.max_pending)
                raise decisions.not_parkable(call_id)
            self._x(
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
        now = self._clock()
        owner = Owner.token()
        self._hold(owner)
        decision_text = decision if isinstance(decision, str) else dump(decision)
        result_text = dump(call_result)
        with self._tx():
            human = outcome in decisions.HUMAN_OUTCOMES
            values = (status, now, outcome, reason, decided_by, channel, decision_text,
                      request_id)
            hit: tuple[str, str] | None = None
            notified = False
            if self._returning:
                # The common case in one guarded statement: a pending, unexpired request
                # with no answer waiting from another channel (which would have to agree).
                update = ("UPDATE requests SET status=?, decided=?, outcome=?, reason=?, "
                          "decided_by=?, channel=?, decision=? WHERE id=? AND "
                          + decisions.DECIDABLE_SQL)
                waiting = " AND NOT EXISTS (SELECT 1 FROM answers WHERE request_id=?)"
                returning = " RETURNING call_id, digest" + self._RETURNING_NOTIFY
                notify = (self._answer_channel,) if self._RETURNING_NOTIFY else ()
                rows = self._x(update + (waiting if human else "") + returning,
                               (*values, now, *((request_id,) if human else ()), *notify)
                               ).fetchall()
                if not rows and human:
                    # A human's answer recorded first by another channel wins over this one.
                    row = self._x(
                        "SELECT a.decision, a.decided_by, a.channel FROM answers a JOIN "
                        "requests r ON r.id = a.request_id WHERE a.request_id=? AND "
                        "r.status='pending'", (request_id,)).fetchone()
                    if row is not None:
                        decisions.check_waiting_answer(request_id, outcome or "", row[0],
                                                   row[1] or row[2])
                        rows = self._x(update + returning, (*values, now, *notify)).fetchall()
                hit = (rows[0][0], rows[0][1]) if rows else None
                notified = bool(rows and notify)
            else:
                if human:
                    # A human's answer recorded first by another channel wins over this one.
                    row = self._x(
                        "SELECT a.decision, a.decided_by, a.channel FROM answers a JOIN "
                        "requests r ON r.id = a.request_id WHERE a.request_id=? AND "
                        "r.status='pending'", (request_id,)).fetchone()
                    if row is not None:
                        decisions.check_waiting_answer(request_id, outcome or "", row[0],
                                                   row[1] or row[2])
                row = self._x(
                    "SELECT status, expires, call_id, digest FROM requests WHERE id=?",
                    (request_id,),
                ).fetchone()
                if row is not None and decisions.decidable(row[0], row[1], now):
                    self._x(
                        "UPDATE requests SET status=?, decided=?, outcome=?, reason=?, "
                        "decided_by=?, channel=?, decision=? WHERE id=? AND status='pending'",
                        values,
                    )
                    hit = (row[2], row[3])
            if hit is not None:
                call_id, digest = hit
                self._decide_call(request_id, call_id, digest, now, owner, status=status,
                                  by=decided_by or channel, call_result=result_text,
                                  notified=notified)
                if start and status == "approved" and not self._claim(call_id, digest, owner,
                                                                       now):
                    # Raised inside the transaction: the decision is rolled back too.
                    raise decisions.not_waiting(call_id, request_id)
                return
            req = self._get_request(request_id)
            if req is None:
                raise decisions.unknown_request(request_id, deciding=True)
            expires = None if req.expires_at is None else req.expires_at.timestamp()
            late_by = (None, None)
            if req.status not in ("pending", "timed_out"):
                late_by = self._x("SELECT decided_by, channel FROM requests WHERE id=?",
                                  (request_id,)).fetchone()
            expired = decisions.late_decision(
                request_id, current=req.status, expires=expires, now=now, status=status,
                decided_by=late_by[0], channel=late_by[1])
            if expired:
                # Recorded (committed) as timed out before the refusal is raised.
                self._expire(req, now)
            else:
                # Pending and expired, but the status recorded is itself a failure
                # (timed_out, error): record it as given.
                self._x(
                    "UPDATE requests SET status=?, decided=?, outcome=?, reason=?, "
                    "decided_by=?, channel=?, decision=? WHERE id=? AND status='pending'",
                    values,
                )
                self._decide_call(req.id, req.call_id, req.digest, now, owner, status=status,
                                  by=decided_by or channel, call_result=result_text)
        if expired:
            raise decisions.timed_out(request_id, expires)

    def _decide_call(self, request_id: str, call_id: str, digest: str, now: float,
                     owner: str, *, status: str, by: str | None,
                     call_result: str | None, notified: bool = False) -> None:
        """Move the call waiting on a just-decided request (approving grants `digest`).
        ``notified``: the statement that decided it also sent the answer notification."""
        if not notified:
            self._notify_answer(request_id)
        call_state, granted = decisions.call_state(status)
        self._x(
            "UPDATE calls SET state=?, grant_digest=?, owner=?, result=?, updated=?, note=? "
            "WHERE call_id=? AND state='awaiting' AND request_id=?",
            (call_state, digest if granted else None, owner, call_result, now,
             decisions.decision_note(request_id, by, None), call_id, request_id),
        )

    def _expire(self, req: ConfirmationRequest, now: float) -> None:
        self._notify_answer(req.id)
        self._x(
            "UPDATE requests SET status='timed_out', decided=?, outcome=?, reason=? "
            "WHERE id=? AND status='pending'",
            (now, decisions.TIMEOUT_OUTCOME, decisions.TIMEOUT_REASON, req.id),
        )
        self._x(
            "UPDATE calls SET state='timed_out', result=?, updated=?, note=? WHERE call_id=? "
            "AND state='awaiting' AND request_id=?",
            (dump(decisions.timed_out_result(req.id)), now, decisions.expiry_note(req.id),
             req.call_id, req.id),
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
        text = decisions.answer_text(decision, decided_by=decided_by, channel=channel)
        now = self._clock()
        with self._tx():
            req = self._get_request(request_id)
            if req is None:
                raise decisions.unknown_request(request_id)
            expires = None if req.expires_at is None else req.expires_at.timestamp()
            expired = not decisions.answerable(request_id, current=req.status, expires=expires,
                                           now=now)
            if expired:
                # Recorded (committed) as timed out before the refusal is raised.
                self._expire(req, now)
            else:
                cur = self._x(
                    "INSERT INTO answers(request_id, decision, decided_by, channel, "
                    "at) VALUES (?,?,?,?,?) ON CONFLICT DO NOTHING",
                    (request_id, text, decided_by, channel, now),
                )
                if cur.rowcount != 1:
                    raise decisions.answer_waiting(request_id)
                self._journal(req.call_id, "answered", None,
                              decisions.decision_note(request_id, decided_by, channel), now)
                self._notify_answer(request_id)
        if expired:
            raise decisions.timed_out(request_id, expires)

    def get_answer(self, request_id: str) -> dict[str, Any] | None:
        """The answer submitted for a request and not yet applied, if any."""
        with self._lock:
            row = self._x(
                "SELECT a.decision, a.decided_by, a.channel FROM answers a "
                "JOIN requests r ON r.id = a.request_id WHERE a.request_id=? AND r.status='pending'",
                (request_id,),
            ).fetchone()
        if row is None:
            return None
        return decisions.answer_view(row[0], row[1], row[2])

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
                rows = self._x(
                    "SELECT r.id, r.status, a.decision, a.decided_by, a.channel FROM requests r "
                    f"LEFT JOIN answers a ON a.request_id = r.id WHERE r.id IN ({marks})",
                    chunk,
                ).fetchall()
            for rid, status, raw, decided_by, channel in rows:
                answer: dict[str, Any] | None = None
                if raw is not None and status == "pending":
                    answer = decisions.answer_view(raw, decided_by, channel)
                out[rid] = (status, answer)
        return out

    def answered_requests(self) -> list[ConfirmationRequest]:
        """Pending requests that have an answer waiting to be applied."""
        with self._lock:
            rows = self._x(
                f"SELECT {REQUEST_COLUMNS.replace('id,', 'r.id,', 1)} FROM requests r "
                "JOIN answers a ON a.request_id = r.id WHERE r.status='pending' "
                "ORDER BY a.at"
            ).fetchall()
        return [request_from_row(r) for r in rows]

    def get_request(self, request_id: str) -> ConfirmationRequest:
        with self._lock:
            req = self._get_request(request_id)
        if req is None:
            raise decisions.unknown_request(request_id)
        return req

    def request_decision(self, request_id: str) -> dict[str, Any] | None:
        """The recorded decision of an answered request (outcome, reason, who, channel)."""
        with self._lock:
            row = self._x(
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
        row = self._x(
            f"SELECT {REQUEST_COLUMNS} FROM requests WHERE id=?", (request_id,)
        ).fetchone()
        return None if row is None else request_from_row(row)

    def pending(self, *, session_id: str | None = None) -> list[ConfirmationRequest]:
        """Requests still waiting for an answer, oldest first; expired ones are closed."""
        now = self._clock()
        with self._tx():
            for row in self._x(
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
            rows = self._x(query + " ORDER BY created, id", params).fetchall()
        return [request_from_row(r) for r in rows]


    def list_pending(self, *, limit: int, after: str | None = None,
                     session_id: str | None = None) -> Page:
        self._check_page(limit)
        now = self._clock()
        where = "status='pending'"
        params: list[Any] = []
        if session_id is not None:
            where += " AND session_id=?"
            params.append(session_id)
        with self._tx():
            for row in self._x(
                f"SELECT {REQUEST_COLUMNS} FROM requests WHERE status='pending' "
                "AND expires IS NOT NULL AND expires < ?", (now,),
            ).fetchall():
                self._expire(request_from_row(row), now)
            (total,) = self._x(
                f"SELECT COUNT(*) FROM requests WHERE {where}", params).fetchone()
            query = f"SELECT {REQUEST_COLUMNS} FROM requests WHERE {where}"
            if after is not None:
                query += " AND (created, id) > (SELECT created, id FROM requests WHERE id=?)"
                params.append(after)
            rows = self._x(query + " ORDER BY created, id LIMIT ?",
                                    (*params, limit + 1)).fetchall()
        items = [request_from_row(r) for r in rows[:limit]]
        return Page(items=items, next=items[-1].id if len(rows) > limit else None,
                    total=int(total))
