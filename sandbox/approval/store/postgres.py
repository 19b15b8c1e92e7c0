"""`PostgresApprovalStore`: the approval store in PostgreSQL, shared by the workers, pages
and command lines of many hosts.

``open_store("postgresql://user@host/db")`` (any libpq URL or ``postgres://``; a
``?options=-csearch_path%3Dname`` picks the schema, so one database can hold several
stores). Needs the ``postgres`` extra: ``pip install 'sandbox[postgres]'`` (psycopg 3).

The operations are `SQLApprovalStore`'s (store/sql.py), the same statements SQLite runs,
except the gate's hot steps, which are server-side functions (migration 2) so that each
is one round trip: ``sandbox_open_park`` (open a call and park its request),
``sandbox_park``, and ``sandbox_decide`` (the common case of a decision, claiming the
grant with it; with the row a request was parked with, it decides only while the stored
request is still exactly that row, so `ToolRunner.resume` need not read it back). They
take the same advisory lock and guards as the statements they replace, and anything
outside their common case writes nothing and runs the general SQL path. Over a unix
socket a step may run on the caller's thread (`run_now`) while it waits for nothing.

- claims are guarded ``UPDATE ... WHERE state=... [RETURNING]``: under READ COMMITTED a
  second claimer blocks on the row and re-checks the guard against the committed row, so
  exactly one wins;
- steps that read and then write run in a transaction holding a transaction-level
  advisory lock of the store's schema (what ``BEGIN IMMEDIATE`` is to SQLite);
- an answer or a decision sends ``NOTIFY`` in its transaction (delivered on commit);
  `answer_cursor` / `wait_answers` let a waiter sleep until one arrives instead of
  polling (`QueueConfirmationProvider` does);
- worker leases are written and compared on the server's clock, so hosts whose clocks
  disagree still agree on whose lease ran out.

Schema migrations are numbered (`MIGRATIONS`), recorded in ``schema_version`` and
applied in one transaction under an advisory lock; a database whose schema is newer
than this library knows is refused with a clear error.

Connections: the store holds one connection (and one more for LISTEN once something
waits for answers). If the server restarts, the next operation notices the dead
connection before sending anything and reconnects (retrying for ``reconnect_timeout``
seconds). A connection lost while a statement was in flight is retried for reads; for a
write it raises `StoreError` (a transaction is rolled back by the server, never half
written; only a lost ``COMMIT`` reply leaves the outcome unknown, and the error says so).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import os
import re
import select
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sandbox.approval.models import ConfirmationRequest, Rule, canonical_json
from sandbox.approval.store import decisions
from sandbox.approval.store.base import MAX_PENDING_PER_SESSION
from sandbox.approval.store.pg_schema import MIGRATIONS, SCHEMA_VERSION
from sandbox.approval.store.records import (
    CallRecord,
    Owner,
    checked_bounds,
    dump,
    new_id,
    request_from_row,
)
from sandbox.approval.store.sql import SQLApprovalStore, lease_seconds
from sandbox.approval.store.states import PARKABLE
from sandbox.errors import ConfirmationStateError, StoreError

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Advisory lock classes (the first key of the two-key form; the second is the schema's).
_TX_LOCK = 0x5A1D
_MIGRATE_LOCK = 0x5A1E

#: Answer notifications remembered for waiters that fall behind (then they look at all).
_KEEP = 100_000

# A read may be sent again on a new connection; pg_notify and our functions write.
_READ = re.compile(r"\s*SELECT\b(?![^;]*\b(?:pg_notify|sandbox_\w+)\s*\()", re.IGNORECASE)

#: How long a park's "no rule of this tool is active" stands in for the rule lookup
#: that follows it in the same gate step (seconds; see `PostgresApprovalStore.park`).
_RULES_HINT_SECONDS = 0.5

#: Requests parked here whose rows are remembered for `parked_request` (the newest;
#: arguments longer than _PARKED_MAX_ARGS characters are not remembered).
_PARKED_KEEP = 1024
_PARKED_MAX_ARGS = 4096

#: The states a call may wait for a human from, as sandbox_park takes them.
_PARKABLE = sorted(str(state) for state in PARKABLE)


#: What the server says while it cannot take connections yet (SQLSTATE 57P03).
_STARTING = ("the database system is starting up", "the database system is not yet accepting",
             "the database system is shutting down", "the database system is in recovery")


class _Starting(Exception):
    pass


class _WouldWait(BaseException):
    """Raised inside `PostgresApprovalStore.run_now` before anything is written, where
    the step would wait (a lock another process holds, a reconnect): the step is run on
    the worker thread instead. A BaseException: no handler in a step may swallow it."""


def redacted(url: str) -> str:
    """The URL without its password (in the authority or a ``password=`` parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = parts.query
    if "password" in query.lower():
        query = urlencode([(k, "***" if k.lower() == "password" else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _passwords(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        found = [parts.password or ""] + [v for k, v in parse_qsl(parts.query)
                                          if k.lower() == "password"]
    except ValueError:
        found = []
    # Read by hand too: a URL Python cannot split (libpq quotes it whole in its error)
    # or one without "//" still carries them.
    userinfo = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:(?://)?([^/?#]*)@", url)
    if userinfo and ":" in userinfo.group(1):
        found.append(userinfo.group(1).split(":", 1)[1])
    found += re.findall(r"(?i)password=([^&#\s\"']+)", url)
    return sorted({p for p in found if p}, key=len, reverse=True)


def scrubbed(text: str, url: str) -> str:
    """``text`` with every password ``url`` carries written as ``***``."""
    for secret in _passwords(url):
        text = text.replace(secret, "***")
    return text


def is_postgres_url(ref: object) -> bool:
    return isinstance(ref, str) and ref.startswith(("postgresql://", "postgres://"))


def _driver() -> Any:
    try:
        import psycopg
    except ModuleNotFoundError:
        raise StoreError(
            "the PostgreSQL approval store needs psycopg 3, which is not installed: "
            "pip install 'sandbox[postgres]'") from None
    return psycopg


class PostgresApprovalStore(SQLApprovalStore):
    """The approval store in a PostgreSQL database (``postgresql://`` URL)."""

    _SQL_NOW = "extract(epoch from clock_timestamp())::float8"
    # A decision notifies its waiters in the statement that records it.
    _RETURNING_NOTIFY = ", pg_notify(?, id)"

    def __init__(
        self,
        url: str,
        *,
        max_pending: int = 10_000,
        max_history: int | None = None,
        max_pending_per_session: int | None = MAX_PENDING_PER_SESSION,
        lease_seconds: float | None = None,
        connect_timeout: float = 10.0,
        reconnect_timeout: float = 30.0,
        busy_timeout: float | None = None,
    ) -> None:
        max_history = checked_bounds(max_pending, max_pending_per_session, max_history,
                                     unbounded_history=None)
        if not is_postgres_url(url):
            raise StoreError(f"{redacted(str(url))} is not a postgresql:// URL")
        self.path = None
        self.url = redacted(url)
        self._url = url
        self.max_pending = max_pending
        self.max_pending_per_session = max_pending_per_session
        self.max_history = max_history
        self.lease = _lease(lease_seconds)
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        # Like SQLite's busy_timeout: how long a step waits for another process's
        # transaction before it gives up with a StoreError.
        self.busy_timeout = 10.0 if busy_timeout is None else float(busy_timeout)
        if not 0 < self.busy_timeout <= 3600:
            raise StoreError(f"busy_timeout must be between 0 and 3600 s, got {busy_timeout!r}")
        self._opened = 0
        self._lock = threading.RLock()
        self._in_tx = False
        self._queries: dict[str, str] = {}
        self._closed = False
        self._pg = _driver()
        self._conn: Any = None
        # Answer notifications: the request ids notified, in order (None: not known,
        # after the listener reconnected); a waiter's cursor is a position in it.
        self._events = 0
        self._notified: collections.deque[str | None] = collections.deque(maxlen=_KEEP)
        self._cond = threading.Condition()
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        self._listen_error: str | None = None
        # (thread, tool, monotonic deadline): a park found no active rule of this tool.
        self._no_rules: tuple[int, str, float] | None = None
        # `run_now`: a step is running on the caller's thread; whether it wrote yet.
        self._inline = False
        self._inline_wrote = False
        # The rows of requests this store parked, as written (`parked_request`).
        self._parked: collections.OrderedDict[str, tuple[Any, ...]] = (
            collections.OrderedDict())
        conn = self._connect(wait_for_start=True)
        self._conn = conn
        try:
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
        except self._pg.Error as exc:
            self._drop()
            raise StoreError(f"cannot open approval store {self.url}: {exc}") from None
        if schema is None:
            self._drop()
            raise StoreError(
                f"cannot open approval store {self.url}: its search_path names no schema "
                "that exists; create the schema first (CREATE SCHEMA ...)")
        # A server on this host, reached over a unix socket (`run_now`).
        self._local = str(conn.info.host or "").startswith("/")
        self.schema = str(schema)
        digest = hashlib.sha256(self.schema.encode()).digest()
        self._key = int.from_bytes(digest[:4], "big", signed=True)
        self._channel = f"sandbox_answers_{digest[:8].hex()}"
        self._answer_channel = self._channel
        try:
            self._migrate()
        except BaseException:
            self._drop()
            raise

    def __repr__(self) -> str:
        return f"PostgresApprovalStore({self.url!r})"

    @property
    def blocking(self) -> bool:
        return True

    # -- connections -------------------------------------------------------------------

    def _connect(self, *, wait_for_start: bool = False) -> Any:
        """A new connection. ``wait_for_start``: a server that is up but starting up or
        restarting is waited for (``connect_timeout``); any other failure is at once."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                return self._connect_once()
            except _Starting:
                if not wait_for_start or time.monotonic() >= deadline:
                    raise StoreError(
                        f"cannot connect to approval store {self.url}: the database server "
                        "is starting up or shutting down; try again shortly") from None
                time.sleep(0.1)

    def _connect_once(self) -> Any:
        try:
            conn = self._pg.connect(
                self._url, autocommit=True, connect_timeout=max(1, round(self.connect_timeout)),
                application_name=f"sandbox-approvals:{os.getpid()}")
            # A step waits at most busy_timeout for another's lock; a transaction left
            # open by a stalled process is ended by the server, releasing its locks.
            conn.execute(f"SET lock_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute(f"SET idle_in_transaction_session_timeout = "
                         f"{int(max(60.0, self.busy_timeout * 6) * 1000)}")
            return conn
        except self._pg.Error as exc:
            if any(m in str(exc) for m in _STARTING):
                raise _Starting from None
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            cause = scrubbed(cause, self._url)
            raise StoreError(
                f"cannot connect to approval store {self.url}: {cause} (check the URL, that "
                "the server is running and reachable, and the user's permissions)") from None

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _healthy(self, conn: Any) -> bool:
        """Whether ``conn`` still works, without a round trip. The store's connection
        listens to nothing, so an idle one has nothing to read: if its socket is
        readable, the server said goodbye (a restart) or closed it; use a new one."""
        if conn is None or conn.closed or conn.broken:
            return False
        if conn.pgconn.status != self._pg.pq.ConnStatus.OK:
            return False
        try:
            readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    def _live(self) -> Any:
        """The connection, reconnected if the server restarted since it was last used."""
        if self._closed:
            raise StoreError(f"approval store {self.url} was closed; open a new one")
        if self._healthy(self._conn):
            return self._conn
        if self._inline and not self._inline_wrote:
            raise _WouldWait  # reconnecting waits: on the worker thread
        self._drop()
        deadline = time.monotonic() + self.reconnect_timeout
        while True:
            try:
                self._conn = self._connect()
                _log.info("reconnected to approval store %s", self.url)
                return self._conn
            except StoreError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def _lost(self, exc: BaseException, what: str) -> StoreError:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(f"approval store {self.url}: the connection was lost {what} "
                          f"({cause})")

    def _query(self, sql: str) -> str:
        """``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
        q = self._queries.get(sql)
        if q is None:
            q = self._queries[sql] = sql.replace("%", "%%").replace("?", "%s")
        return q

    def _busy(self, exc: BaseException) -> StoreError:
        return StoreError(
            f"approval store {self.url} is busy: another process held its lock for more "
            f"than {self.busy_timeout:g} s ({str(exc).strip().splitlines()[0]}); try again, "
            "or raise busy_timeout")

    def _x(self, sql: str, params: Sequence[Any] = (), *, retry: bool = False) -> Any:
        self._no_rules = None  # any other statement in between: the hint is stale
        args = tuple(params) or None
        q = self._query(sql) if args else sql
        with self._lock:
            if self._in_tx:
                return self._conn.execute(q, args)
            conn = self._live()
            if self._inline and not _READ.match(sql):
                self._inline_wrote = True  # (from here on the step cannot move)
            try:
                return conn.execute(q, args)
            except self._pg.errors.LockNotAvailable as exc:
                raise self._busy(exc) from None
            except self._pg.OperationalError as exc:
                self._drop()
                if not (retry or _READ.match(sql)):
                    raise self._lost(exc, "while a write was in flight; it may or may not "
                                     "have been recorded (check the call's journal)") from None
            try:  # a read, or a write that may run twice: again on a new connection
                return self._live().execute(q, args)
            except self._pg.OperationalError as exc:
                self._drop()
                raise self._lost(exc, "twice while reading") from None

    def _xmany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._no_rules = None
        with self._lock:
            conn = self._conn if self._in_tx else self._live()
            self._inline_wrote = self._inline_wrote or self._inline
            with conn.cursor() as cur:
                cur.executemany(self._query(sql), [tuple(r) for r in rows])

    @contextlib.contextmanager
    def _tx(self, lock: int = _TX_LOCK) -> Iterator[None]:
        self._no_rules = None
        with self._lock:
            if self._in_tx:  # nested: part of the enclosing transaction
                yield
                return
            if self._inline:
                if not self._inline_wrote:
                    raise _WouldWait  # its lock may wait: on the worker thread
                self._inline_wrote = True
            for attempt in (1, 2):  # nothing ran yet: a lost connection is tried again
                conn = self._live()
                try:
                    # One round trip: without parameters psycopg sends the simple query
                    # protocol, which takes both statements (the keys are our own ints).
                    conn.execute(f"BEGIN; SELECT pg_advisory_xact_lock({int(lock)}, "
                                 f"{int(self._key)})")
                    break
                except self._pg.errors.LockNotAvailable as exc:
                    with contextlib.suppress(self._pg.Error):
                        conn.execute("ROLLBACK")
                    raise self._busy(exc) from None
                except self._pg.OperationalError as exc:
                    self._drop()  # (a transaction the server saw begin ends with it)
                    if attempt == 2:
                        raise self._lost(exc, "before a transaction began; nothing was "
                                         "written") from None
            self._in_tx = True
            try:
                yield
            except BaseException as exc:
                self._in_tx = False
                if isinstance(exc, self._pg.errors.LockNotAvailable):
                    with contextlib.suppress(self._pg.Error):
                        conn.execute("ROLLBACK")
                    raise self._busy(exc) from None
                if isinstance(exc, self._pg.OperationalError):
                    self._drop()
                    raise self._lost(exc, "during a transaction; the server rolled it back, "
                                     "nothing of it was written") from None
                try:
                    conn.execute("ROLLBACK")
                except self._pg.Error:
                    self._drop()
                raise
            self._in_tx = False
            try:
                conn.execute("COMMIT")
            except self._pg.OperationalError as exc:
                self._drop()
                raise self._lost(exc, "waiting for a COMMIT's reply; the transaction may "
                                 "or may not have been recorded") from None

    def _migrate(self) -> None:
        """Bring the schema to `SCHEMA_VERSION`, one process at a time."""
        with self._tx(_MIGRATE_LOCK):
            self._x("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                    "applied DOUBLE PRECISION NOT NULL)")
            (current,) = self._x("SELECT COALESCE(MAX(version), 0) FROM schema_version"
                                 ).fetchone()
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"approval store {self.url} (schema {self.schema}) has schema version "
                    f"{current}, newer than this library's {SCHEMA_VERSION}; upgrade sandbox "
                    "or use another schema")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version - 1]:
                    self._conn.execute(statement)
                self._x(f"INSERT INTO schema_version(version, applied) VALUES (?, "
                        f"{self._SQL_NOW})", (version,))

    # -- the gate's steps, one round trip each (migration 2's functions) --------------

    def run_now(self, body: Callable[[], T]) -> tuple[bool, T | None]:
        """Run ``body`` (a gate step: one to three round trips) right here, on the
        caller's thread, when that does not wait on anything but the local server's
        reply: ``(True, its result)``; ``(False, None)``, with nothing written, when it
        would (the caller then runs it on the store's worker thread).

        Only over a unix socket (a server on this host: a round trip is tens of µs;
        over TCP the worker thread keeps the event loop free while the network
        answers), only when no other thread is using the connection and it is healthy
        (a reconnect waits). Inside, until the step has written something, the store's
        lock is only tried (``pg_try_advisory_xact_lock``), never waited for, and a
        transaction that would take it (the general paths) moves the step to the
        worker thread instead; after a write the step cannot move and finishes here
        (the fast path of each step is one statement, so that is after its last
        write or a rule's bookkeeping). A row lock held by another process's one
        statement is still waited for (bounded by ``busy_timeout``), as on the worker.
        """
        if not self._local or self._closed or not self._lock.acquire(blocking=False):
            return False, None
        try:
            if self._in_tx or self._inline or not self._healthy(self._conn):
                return False, None
            self._inline, self._inline_wrote = True, False
            try:
                return True, body()
            except _WouldWait:
                return False, None
            finally:
                self._inline = False
        finally:
            self._lock.release()

    def park(
        self, *, call_id: str, tool: str, args: dict[str, Any], digest: str, hint: str,
        payload: Any, kind: str, expires_at: float | None,
        details: dict[str, Any] | None = None, edited_from: str | None = None,
        session_id: str | None = None, args_json: str | None = None,
    ) -> tuple[str, float]:
        """`SQLApprovalStore.park` as one statement: ``sandbox_park`` runs its
        transaction on the server (the same lock, bounds, guarded update and insert).

        It also reports whether any rule of ``tool`` is active; when none is, the rule
        lookup the gate makes next on this thread (`active_rules`, within
        `_RULES_HINT_SECONDS`, with no other statement in between) answers "none"
        without a round trip: a rule added in that instant is as if added just after.
        """
        parked = self._park_fn(
            "sandbox_park", call_id=call_id, tool=tool, args=args, digest=digest,
            hint=hint, payload=payload, kind=kind, expires_at=expires_at, details=details,
            edited_from=edited_from, session_id=session_id, args_json=args_json)
        assert parked is not None
        return parked

    def open_and_park(
        self, *, call_id: str, tool: str, digest: str, args: dict[str, Any],
        session_id: str | None, args_json: str | None, hint: str, payload: Any, kind: str,
        expires_at: float | None, details: dict[str, Any] | None,
        edited_from: str | None,
    ) -> CallRecord | tuple[str, float]:
        """`open_call` then `park`, in one round trip when the call id is new (what a
        gate step that asks a human does first): the existing record when the id is
        known, else the request's id and creation time. The call is recorded (``new``)
        even when parking it is refused, as with the two operations one by one."""
        parked = self._park_fn(
            "sandbox_open_park", call_id=call_id, tool=tool, args=args, digest=digest,
            hint=hint, payload=payload, kind=kind, expires_at=expires_at, details=details,
            edited_from=edited_from, session_id=session_id, args_json=args_json)
        if parked is not None:
            self._opened += 1
            if self.max_history is not None and self._opened % 1024 == 0:
                with self._tx():
                    self._prune(self.max_history)
            return parked
        rec = self.open_call(call_id, tool, digest, args, session_id, args_json=args_json)
        if rec is not None:
            return rec
        return self.park(call_id=call_id, tool=tool, args=args, digest=digest, hint=hint,
                         payload=payload, kind=kind, expires_at=expires_at,
                         details=details, edited_from=edited_from, session_id=session_id,
                         args_json=args_json)

    def _park_fn(
        self, function: str, *, call_id: str, tool: str, args: dict[str, Any], digest: str,
        hint: str, payload: Any, kind: str, expires_at: float | None,
        details: dict[str, Any] | None, edited_from: str | None, session_id: str | None,
        args_json: str | None,
    ) -> tuple[str, float] | None:
        """Run ``sandbox_park`` or ``sandbox_open_park``: the request's id and creation
        time; None when the call id is known already (nothing written)."""
        rid = new_id("cf")
        now = self._clock()
        owner = Owner.token()
        self._hold(owner)
        text = canonical_json(args) if args_json is None else args_json
        cap = self.max_pending_per_session if session_id is not None else None
        with self._lock:
            wrote = self._inline_wrote
            try_lock = self._inline and not wrote
            code, n, has_rules = self._x(
                f"SELECT code, n, has_rules FROM {function}(?::int, ?::int, ?::boolean, "
                "?::text[], "
                "?::bigint, ?::bigint, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::float8, ?::float8, "
                "?, ?)",
                (_TX_LOCK, self._key, try_lock, _PARKABLE, self.max_pending, cap, owner, rid,
                 call_id, tool, text, digest, hint, dump(payload), kind,
                 dump(details) if details else "{}", now, expires_at, edited_from,
                 session_id)).fetchone()
            if code == 0:
                if not has_rules:
                    self._no_rules = (threading.get_ident(), tool,
                                      time.monotonic() + _RULES_HINT_SECONDS)
                if len(text) <= _PARKED_MAX_ARGS:
                    self._parked[rid] = (
                        rid, call_id, tool, text, digest, hint, dump(payload), kind,
                        dump(details) if details else "{}", "pending", now, expires_at,
                        edited_from, session_id)
                    if len(self._parked) > _PARKED_KEEP:
                        self._parked.popitem(last=False)
                return rid, now
            if code in (4, 9) or function == "sandbox_park":
                self._inline_wrote = wrote  # nothing was (sandbox_open_park's other
                # refusals leave the call it recorded)
        if code == 9:
            raise _WouldWait
        if code == 4:
            return None
        if code == 1:
            raise decisions.too_many_pending(n, self.max_pending)
        if code == 3:
            assert session_id is not None  # (the session's cap is checked only with one)
            raise decisions.session_full(session_id, n, self.max_pending_per_session)
        raise decisions.not_parkable(call_id)

    def active_rules(self, tool: str, session_id: str | None, now: float) -> list[Rule]:
        with self._lock:
            hint, self._no_rules = self._no_rules, None
            if hint is not None and hint[:2] == (threading.get_ident(), tool) and (
                    time.monotonic() < hint[2]):
                return []
            return super().active_rules(tool, session_id, now)

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
        """`SQLApprovalStore.decide`: its common case (a pending, unexpired request; for
        a human's decision, no answer waiting from another channel) is one statement,
        ``sandbox_decide``; anything else writes nothing there and runs the general
        transaction."""
        with self._lock:
            if self._decide_fn(request_id, None, status=status, outcome=outcome,
                               reason=reason, decided_by=decided_by, channel=channel,
                               decision=decision, call_result=call_result, start=start):
                return
            super().decide(request_id, status=status, outcome=outcome, reason=reason,
                           decided_by=decided_by, channel=channel, decision=decision,
                           call_result=call_result, start=start)

    def parked_request(self, request_id: str) -> ConfirmationRequest | None:
        """The request as this store parked it, when it parked it (recently), without a
        round trip; None otherwise. Its status says ``pending`` whatever it is now: use
        it only with `decide_parked`, which records a decision only while the stored
        request is still exactly this one, and pending."""
        row = self._parked.get(request_id)
        return None if row is None else request_from_row(row)

    def decide_parked(
        self, request_id: str, *, status: str, outcome: str | None = None,
        reason: str | None = None, decided_by: str | None = None,
        channel: str | None = None, decision: dict[str, Any] | str | None = None,
        call_result: Any = None, start: bool = False,
    ) -> bool:
        """`decide` for a decision judged on `parked_request`, in one round trip: True
        when recorded; False, with nothing written, unless the stored request is still
        pending, unexpired, unanswered by another channel (for a human's decision) and
        in every column what `parked_request` returned (then judge the request read
        from the store and `decide`, as for any other). Raises ConfirmationStateError
        (nothing recorded) when ``start`` and the grant cannot be claimed."""
        row = self._parked.get(request_id)
        if row is None:
            return False
        with self._lock:
            done = self._decide_fn(request_id, row, status=status, outcome=outcome,
                                   reason=reason, decided_by=decided_by, channel=channel,
                                   decision=decision, call_result=call_result, start=start)
            if done:
                self._parked.pop(request_id, None)
        return done

    def _decide_fn(
        self, request_id: str, expect: tuple[Any, ...] | None, *, status: str,
        outcome: str | None, reason: str | None, decided_by: str | None,
        channel: str | None, decision: dict[str, Any] | str | None, call_result: Any,
        start: bool,
    ) -> bool:
        """``sandbox_decide``: True when it recorded the decision, False when it wrote
        nothing (not the common case, or the request is not ``expect``'s row)."""
        now = self._clock()
        owner = Owner.token()
        self._hold(owner)
        decision_text = decision if isinstance(decision, str) else dump(decision)
        call_state, granted = decisions.call_state(status)
        e = expect[1:9] + expect[10:] if expect is not None else (None,) * 12
        wrote = self._inline_wrote
        try:
            (code,) = self._x(
                "SELECT code FROM sandbox_decide(?::int, ?::int, ?::boolean, ?, ?, "
                "?::float8, ?, ?, "
                "?, ?, ?, ?::boolean, ?, ?, ?::boolean, ?, ?, ?, ?::boolean, ?::boolean, "
                "?, ?, ?, ?, ?, ?, ?, ?, ?::float8, ?::float8, ?, ?)",
                (_TX_LOCK, self._key, self._inline and not wrote, request_id, status, now,
                 outcome, reason, decided_by, channel, decision_text,
                 outcome in decisions.HUMAN_OUTCOMES, self._channel, call_state, granted, owner,
                 dump(call_result), decisions.decision_note(request_id, decided_by, channel),
                 bool(start and status == "approved"), expect is not None, *e)).fetchone()
        except self._pg.Error as exc:
            if getattr(exc, "sqlstate", None) != "SB001":
                raise
            raise ConfirmationStateError(  # the statement, decision too, rolled back
                f"{exc.diag.message_primary or exc}; nothing was run") from None
        if code == 9:
            raise _WouldWait
        if code != 0:
            self._inline_wrote = wrote  # (nothing was)
        return bool(code == 0)

    def close(self) -> None:
        if self._closed:
            return
        self._stop_heartbeat()
        self._closed = True
        with self._cond:
            self._cond.notify_all()
        listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join(timeout=5)
        with self._lock:
            self._drop()

    # -- answers: NOTIFY, and waiting for one --------------------------------------------

    def _notify_answer(self, request_id: str) -> None:
        self._x("SELECT pg_notify(?, ?)", (self._channel, request_id))

    def answer_cursor(self) -> int | None:
        """A mark to pass to `wait_answers`; starts listening (once) before returning."""
        if self._listener is None:
            with self._lock:
                if self._listener is None:
                    self._listener = threading.Thread(
                        target=self._listen, daemon=True, name="sandbox-answers-listen")
                    self._listener.start()
        if not self._listening.wait(self.reconnect_timeout):
            raise StoreError(f"approval store {self.url}: cannot LISTEN for answers "
                             f"({self._listen_error or 'timed out'})")
        with self._cond:
            return self._events

    def wait_answers(self, cursor: int, timeout: float
                     ) -> tuple[int, frozenset[str] | None]:
        """Block until an answer or decision is recorded after ``cursor`` (by any process),
        or ``timeout`` seconds pass: the new mark, and the request ids notified since
        ``cursor`` (None when not known: the listener reconnected, or too many)."""
        with self._cond:
            self._cond.wait_for(lambda: self._events != cursor or self._closed,
                                timeout=max(0.0, timeout))
            now = self._events
            missed = now - cursor
            if missed > len(self._notified) or missed < 0:
                return now, None
            named = [self._notified[i] for i in range(len(self._notified) - missed,
                                                       len(self._notified))]
            if any(rid is None for rid in named):
                return now, None
            return now, frozenset(rid for rid in named if rid is not None)

    def _note(self, request_id: str | None) -> None:
        with self._cond:
            self._events += 1
            self._notified.append(request_id)
            self._cond.notify_all()

    def _listen(self) -> None:
        while not self._closed:
            conn = None
            try:
                conn = self._connect()
                conn.execute(f"LISTEN {self._channel}")
                self._note(None)  # answers may have come while not listening: look again
                self._listening.set()
                while not self._closed:
                    for notice in conn.notifies(timeout=0.5):
                        self._note(notice.payload or None)
            except Exception as exc:
                self._listening.clear()
                self._listen_error = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
                _log.info("approval store %s: listening for answers: %s", self.url, exc)
                time.sleep(0.2)
            finally:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()


_lease = lease_seconds
