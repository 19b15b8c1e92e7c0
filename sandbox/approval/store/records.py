"""What every approval store backend shares: the call record, the worker identity, the
request row format and the messages of refusals. Public names only: a backend uses
these, never another backend's private parts."""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]
from json.encoder import encode_basestring as _encode_basestring
from typing import Any

from sandbox.approval.models import ConfirmationRequest
from sandbox.approval.store.states import PRUNABLE, TERMINAL
from sandbox.errors import StoreError
from sandbox.text import escape_surrogates

#: Call states a call never leaves (``in_doubt`` and ``abandoned`` included).
TERMINAL_STATES = frozenset(str(s) for s in TERMINAL)
PRUNABLE_STATES = frozenset(str(s) for s in PRUNABLE)

@dataclass(frozen=True)
class CallRecord:
    call_id: str
    tool: str
    digest: str
    args: dict[str, Any]
    state: str
    request_id: str | None
    owner: str | None
    result: Any
    session_id: str | None
    created: float
    updated: float


def checked_bounds(max_pending: int, max_pending_per_session: int | None,
                   max_history: int | None, *, unbounded_history: int | None
                   ) -> int | None:  # fmt: skip
    """Check a store's size bounds (a clear error naming the bad one); return its
    ``max_history``, where -1 means the backend's default ``unbounded_history``."""
    if max_pending_per_session is not None and max_pending_per_session < 1:
        raise StoreError("max_pending_per_session must be at least 1 or None, got "
                         f"{max_pending_per_session}")
    if max_pending < 1:
        raise StoreError(f"max_pending must be at least 1, got {max_pending}")
    if max_history == -1:
        max_history = unbounded_history
    if max_history is not None and max_history < 1:
        raise StoreError(f"max_history must be at least 1 or None, got {max_history}")
    return max_history


def clock() -> float:
    return time.time()


def host_id() -> str:
    """This worker's host id: ``$SANDBOX_HOST_ID``, or the host name.

    Workers sharing a store tell each other apart by it; two containers on one machine
    with the same host name should set it.
    """
    return os.environ.get("SANDBOX_HOST_ID") or socket.gethostname()


def dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


class Owner:
    """Identifies this process so that another can tell, later, whether it still lives.

    A pid alone is not enough: pids are reused. The process start time makes the pair
    unique on one host; the hostname keeps two machines sharing a file apart.
    """

    _pid = -1
    _token = ""

    @classmethod
    def token(cls) -> str:
        token = cls._token
        if token:  # dropped in a forked child (below), so never the parent's
            return token
        import psutil  # type: ignore[import-untyped, unused-ignore]  # ~10 ms, when used

        pid = os.getpid()
        start = psutil.Process(pid).create_time()
        cls._pid, cls._token = pid, f"{host_id()}:{pid}:{start:.3f}"
        return cls._token

    @classmethod
    def _forget(cls) -> None:
        cls._pid, cls._token = -1, ""

    @staticmethod
    def alive(token: str | None) -> bool | None:
        """True/False for an owner on this host; None when it cannot be told from here."""
        if not token:
            return False
        try:
            host, pid_text, start_text = token.rsplit(":", 2)
            pid, start = int(pid_text), float(start_text)
        except ValueError:
            return None
        if host != host_id():
            return None
        import psutil  # type: ignore[import-untyped, unused-ignore]

        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                # Killed but not yet reaped by its parent: it will never record an end.
                return False
            return bool(abs(proc.create_time() - start) < 0.01)
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:
            return None


os.register_at_fork(after_in_child=Owner._forget)


class _Ids:
    """Ids of 96 random bits each (as ``secrets.token_hex(12)`` draws them), taken from
    a buffer of ``os.urandom`` output filled a few hundred ids at a time: one system
    call per id costs more than the rest of the id. Unpredictable, so that nobody who
    has seen one id can guess the next; the buffer is dropped in a forked child, which
    would otherwise repeat its parent's ids."""

    _BATCH = 256
    _SIZE = 12

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self._buffer = b""
        self._at = 0

    def next(self, prefix: str) -> str:
        with self._lock:
            at = self._at
            if at >= len(self._buffer):
                self._buffer = secrets.token_bytes(self._SIZE * self._BATCH)
                at = 0
            self._at = at + self._SIZE
            chunk = self._buffer[at:at + self._SIZE]
        return f"{prefix}_{chunk.hex()}"


_IDS = _Ids()
os.register_at_fork(after_in_child=_IDS.reset)
new_id = _IDS.next



def built_request(
    rid: str, now: float, *, call_id: str, tool: str, args: dict[str, Any], digest: str,
    hint: str, payload: Any, kind: str, expires_at: float | None,
    details: dict[str, Any] | None, edited_from: str | None, session_id: str | None,
) -> ConfirmationRequest:
    """The request just parked, built from the values written (already validated)."""
    # Built from the values just written, which the runner validated: constructing
    # without re-validation is a hot-path saving. `args` is copied so that a caller
    # mutating its dict cannot change what the request says was asked.
    return ConfirmationRequest.model_construct(
        id=rid, call_id=call_id, tool=tool, args=dict(args), hint=hint, payload=payload,
        digest=digest, kind=kind, created_at=datetime.fromtimestamp(now, tz=UTC),
        expires_at=dt(expires_at), status="pending", edited_from=edited_from,
        session_id=session_id, details=details or {},
    )


REQUEST_COLUMNS = (
    "id, call_id, tool, args, digest, hint, payload, kind, details, status, created, expires, "
    "edited_from, session_id"
)


def request_from_row(row: tuple[Any, ...]) -> ConfirmationRequest:
    return ConfirmationRequest(
        id=row[0], call_id=row[1], tool=row[2], args=json.loads(row[3]), digest=row[4],
        hint=row[5], payload=None if row[6] is None else json.loads(row[6]), kind=row[7],
        details={} if row[8] is None else json.loads(row[8]), status=row[9],
        created_at=datetime.fromtimestamp(row[10], tz=UTC),
        expires_at=dt(row[11]), edited_from=row[12],
        session_id=row[13],
    )


DUMP_ENCODER = json.JSONEncoder(ensure_ascii=False, default=repr)  # = json.dumps(v, these options)


# The C encoder `DUMP_ENCODER.encode` makes on every call, made once (no circular
# reference bookkeeping: a cycle ends in RecursionError, and `DUMP_ENCODER` then names it).
_C_DUMP = None if _c_make_encoder is None else _c_make_encoder(
    None, repr, _encode_basestring, None, ": ", ", ", False, False, True)


class Dumped:
    """A value already encoded as `dump` encodes it (built a slice at a time off the
    event loop's long steps, see `transitions.dump_sliced`): `dump` returns its text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def dump(value: Any) -> str | None:
    if value is None:
        return None
    if type(value) is Dumped:
        return value.text
    if _C_DUMP is not None and type(value) is not str:
        try:
            return escape_surrogates("".join(_C_DUMP(value, 0)))
        except RecursionError:
            pass
    return escape_surrogates(DUMP_ENCODER.encode(value))

