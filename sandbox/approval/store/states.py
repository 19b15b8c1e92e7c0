"""The states of a call and of a confirmation request, and the call's transition table.

The table is data: every backend reads it (the memory store checks each transition
against it; the SQL stores build the ``state IN (...)`` guards of their statements from
it), so a transition one backend allows, all of them allow.

A call's life::

    new ──► started ──► done | failed | in_doubt
     │         └──► awaiting (the tool asked from inside)
     ├──► awaiting ──► approved ──► started
     │        ├──► editing ──► approved | awaiting | rejected | blocked | error
     │        └──► denied | timed_out | error | rejected | cancelled
     ├──► blocked | error | rejected          (refused before anything ran)
     └──► abandoned ──► new                   (its worker died before starting it)

``in_doubt``: started by a worker whose lease ran out before it recorded the end; the
call may or may not have had its effect, and it is never started again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum


class CallState(StrEnum):
    NEW = "new"
    AWAITING = "awaiting"
    APPROVED = "approved"
    EDITING = "editing"
    STARTED = "started"
    DONE = "done"
    FAILED = "failed"
    DENIED = "denied"
    BLOCKED = "blocked"
    REJECTED = "rejected"
    TIMED_OUT = "timed_out"
    ERROR = "error"
    IN_DOUBT = "in_doubt"
    ABANDONED = "abandoned"
    CANCELLED = "cancelled"


class RequestStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EDITED = "edited"
    TIMED_OUT = "timed_out"
    ERROR = "error"
    CANCELLED = "cancelled"


C = CallState

#: Outcomes a call can be ended with by `finish` (its worker recording how it went).
ENDINGS = frozenset({C.DONE, C.FAILED, C.DENIED, C.BLOCKED, C.REJECTED, C.TIMED_OUT,
                     C.ERROR, C.IN_DOUBT, C.CANCELLED})

#: Every allowed move: state -> the states it may go to.
TRANSITIONS: Mapping[CallState, frozenset[CallState]] = {
    C.NEW: frozenset({C.STARTED, C.AWAITING, C.ABANDONED, C.NEW}) | ENDINGS,
    C.STARTED: frozenset({C.AWAITING}) | ENDINGS,
    C.AWAITING: frozenset({C.APPROVED, C.EDITING}) | ENDINGS,
    C.EDITING: frozenset({C.APPROVED, C.AWAITING, C.ABANDONED}) | ENDINGS,
    C.APPROVED: frozenset({C.STARTED}),
    C.ABANDONED: frozenset({C.NEW}),
    **{s: frozenset() for s in ENDINGS},
}

#: States a call never leaves. A finished call's record answers a repeated call id.
TERMINAL = frozenset(s for s, moves in TRANSITIONS.items() if not moves) | {C.ABANDONED}
#: Finished calls a store may forget (``in_doubt`` ones are kept for a human to check).
PRUNABLE = TERMINAL - {C.IN_DOUBT}


def sources(target: CallState) -> frozenset[CallState]:
    """Every state from which a call may move to ``target``."""
    return frozenset(s for s, moves in TRANSITIONS.items() if target in moves)


#: States in which a worker is working on the call: `finish` applies to these.
IN_PROGRESS = frozenset({C.NEW, C.STARTED, C.EDITING, C.AWAITING})
#: States from which a call can go on to wait for a human.
PARKABLE = sources(C.AWAITING)
#: States a sweep looks at: held by a worker that may have died.
HELD = frozenset({C.NEW, C.STARTED, C.EDITING})


#: `TRANSITIONS` as (old, new) pairs of plain strings: one set lookup per transition.
_ALLOWED = frozenset((str(old), str(new)) for old, moves in TRANSITIONS.items()
                     for new in moves)


def allowed(old: str, new: str) -> bool:
    return (old, new) in _ALLOWED


def sql_list(states: Iterable[str]) -> str:
    """``'a','b'`` for a SQL ``IN (...)`` guard (state names are fixed identifiers)."""
    return ",".join(f"'{s}'" for s in sorted(str(s) for s in states))


assert PARKABLE == {C.NEW, C.STARTED, C.EDITING}
assert IN_PROGRESS <= {s for s in TRANSITIONS if ENDINGS <= TRANSITIONS[s]}
