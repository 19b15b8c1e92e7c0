"""What every approval store backend shares: the call record, the worker identity, the
request row format and the messages of refusals. Public names only: a backend uses
these, never another backend's private parts."""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]

from ...errors import ConfirmationStateError
from ..models import ConfirmationRequest
from .states import PRUNABLE, TERMINAL

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


def clock() -> float:
    return time.time()


def host_id() -> str:
    """This worker's host id: ``$SANDBOX_HOST_ID``, or the host name.

    Workers sharing a store tell each other apart by it; two containers on one machine
    with the same host name should set it.
    """
    return os.environ.get("SANDBOX_HOST_ID") or socket.gethostname()


def dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=timezone.utc)


class Owner:
    """Identifies this process so that another can tell, later, whether it still lives.

    A pid alone is not enough: pids are reused. The process start time makes the pair
    unique on one host; the hostname keeps two machines sharing a file apart.
    """

    _pid = -1
    _token = ""

    @classmethod
    def token(cls) -> str:
        pid = os.getpid()
        if pid != cls._pid:  # recomputed after fork
            start = psutil.Process(pid).create_time()
            cls._pid, cls._token = pid, f"{host_id()}:{pid}:{start:.3f}"
        return cls._token

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


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"



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
        digest=digest, kind=kind, created_at=datetime.fromtimestamp(now, tz=timezone.utc),
        expires_at=dt(expires_at), status="pending", edited_from=edited_from,
        session_id=session_id, details=details or {},
    )


HUMAN_OUTCOMES = frozenset({"approve", "deny", "edit"})


def check_waiting_answer(request_id: str, outcome: str, answer_json: str,
                          by: str | None) -> None:
    """Refuse a decision that contradicts an answer another channel recorded first.

    `submit_answer` promises the first answer wins: a denial given on the web page or
    with the CLI must not be overridden by a later approval from the channel that holds
    the call (an MCP client, ADK's client, a provider). Nothing is recorded; the waiting
    answer is still there to be applied (`ToolRunner.resume(id)`, `apply_answers`).
    """
    recorded = json.loads(answer_json).get("outcome")
    if recorded != outcome:
        raise ConfirmationStateError(
            f"confirmation {request_id} already has an answer waiting to be applied "
            f"({recorded}, by {by or 'another channel'}), recorded before this {outcome}; "
            "the first answer wins"
        )


def timed_out_message(req: ConfirmationRequest) -> str:
    when = f" (it expired at {req.expires_at.isoformat()})" if req.expires_at else ""
    return (f"confirmation {req.id} timed out{when} and was recorded as timed out; "
            "it can no longer be answered. Make the call again to ask anew")


REQUEST_COLUMNS = (
    "id, call_id, tool, args, digest, hint, payload, kind, details, status, created, expires, "
    "edited_from, session_id"
)


def request_from_row(row: tuple[Any, ...]) -> ConfirmationRequest:
    return ConfirmationRequest(
        id=row[0], call_id=row[1], tool=row[2], args=json.loads(row[3]), digest=row[4],
        hint=row[5], payload=None if row[6] is None else json.loads(row[6]), kind=row[7],
        details={} if row[8] is None else json.loads(row[8]), status=row[9],
        created_at=datetime.fromtimestamp(row[10], tz=timezone.utc),
        expires_at=dt(row[11]), edited_from=row[12],
        session_id=row[13],
    )


DUMP_ENCODER = json.JSONEncoder(ensure_ascii=False, default=repr)  # = json.dumps(v, these options)


def dump(value: Any) -> str | None:
    if value is None:
        return None
    return DUMP_ENCODER.encode(value)

