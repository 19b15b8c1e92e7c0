"""The decision rules of every approval store backend, written once.

Pure functions over plain data (strings, floats, JSON text): each backend applies them
to its own rows — `MemoryApprovalStore` to its objects under its lock, the SQL backends
inside their transactions — so that a request is decided, expired and answered by the
same rules, with the same errors, whichever backend holds it:

- a request is decided while it is ``pending`` and not expired (`decidable`); the call
  waiting on it moves to the state its status gives (`call_state`), an approval also
  granting the request's digest;
- a decision that comes too late (`late_decision`): refused with the status it already
  has (`already_decided`, `timed_out`), or, when the request is pending but expired, the
  request is first recorded as timed out (`TIMEOUT_OUTCOME`, `TIMEOUT_REASON`,
  `timed_out_result`) and a human's decision refused, while a failure status given late
  (timed_out, error, cancelled) is recorded as given;
- a human's decision that disagrees with an answer another channel recorded first is
  refused (`check_waiting_answer`): the first answer wins;
- `submit_answer` accepts one answer per pending, unexpired request (`answerable`),
  checked and normalised first (`answer_text`), and reads back as `answer_view`.

The SQL statements that apply a rule in one guarded step carry its SQL form
(`DECIDABLE_SQL`); the server-side functions of the PostgreSQL store (pg_schema.py)
repeat them in PL/pgSQL.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sandbox.approval.models import canonical_json
from sandbox.approval.store.answers import parse_answer
from sandbox.errors import (
    ConfirmationStateError,
    ConfirmationTimedOutError,
    UnknownCallError,
    UnknownConfirmationError,
)

#: The outcomes of a human's decision (an answer another channel recorded must agree).
HUMAN_OUTCOMES = frozenset({"approve", "deny", "edit"})
#: Statuses a decision given after its request expired is refused with: the request is
#: recorded as timed out instead. Any other (timed_out, error, cancelled) is recorded.
LATE_REFUSED = frozenset({"approved", "denied", "edited"})

#: How a request that expired before an answer is recorded.
TIMEOUT_OUTCOME = "timeout"
TIMEOUT_REASON = "expired before an answer"

#: `decidable` as a SQL guard on ``requests`` (one parameter: now).
DECIDABLE_SQL = "status='pending' AND (expires IS NULL OR ? <= expires)"


def expired(expires: float | None, now: float) -> bool:
    return expires is not None and now > expires


def decidable(status: str, expires: float | None, now: float) -> bool:
    """Whether a request with this status and expiry takes a decision now."""
    return status == "pending" and (expires is None or now <= expires)


def call_state(status: str) -> tuple[str, bool]:
    """The state the call waiting on a request moves to when the request is decided with
    ``status``, and whether the request's digest is granted (approved: the call may run
    exactly those arguments, once; edited: the call waits in ``editing`` for `grant`)."""
    if status == "approved":
        return "approved", True
    if status == "edited":
        return "editing", False
    return status, False


def decision_note(request_id: str, decided_by: str | None, channel: str | None) -> str:
    """The journal's detail of a decision's transition (and of an answer recorded)."""
    return f"{request_id} by {decided_by or channel}"


def expiry_note(request_id: str) -> str:
    return f"{request_id} expired"


def timed_out_result(request_id: str) -> dict[str, str]:
    """The result recorded for a call whose request expired before an answer."""
    return {"status": "timed_out", "error": f"Confirmation timed out: {request_id} expired "
            "before anyone answered it. The tool was not run."}


def late_decision(request_id: str, *, current: str, expires: float | None, now: float,
                  status: str, decided_by: str | None, channel: str | None) -> bool:
    """A decision (``status``) for a request that was not `decidable`: raise when the
    request was answered already or timed out; True when it is pending but expired and
    the decision is refused (record the request as timed out, then raise `timed_out`);
    False when the decision is recorded as given (a failure status given late)."""
    if current == "timed_out":
        raise timed_out(request_id, expires)
    if current != "pending":
        raise already_decided(request_id, current, decided_by, channel)
    return expired(expires, now) and status in LATE_REFUSED


def answerable(request_id: str, *, current: str, expires: float | None,
               now: float) -> bool:
    """Whether a request can take a submitted answer: raise when it was answered already
    or timed out; False when it is pending but expired (record it as timed out, then
    raise `timed_out`); True when the answer may be recorded."""
    if current == "timed_out":
        raise timed_out(request_id, expires)
    if current != "pending":
        raise ConfirmationStateError(
            f"confirmation {request_id} was already answered ({current})")
    return not expired(expires, now)


def answer_text(decision: Any, *, decided_by: str | None, channel: str | None) -> str:
    """A submitted answer, checked (`parse_answer`: a malformed one raises
    `ConfigurationError` and is not recorded) and as the store records it."""
    checked = parse_answer(decision, channel=channel or "answer")
    if decided_by is not None and checked.decided_by is None:
        checked = checked.model_copy(update={"decided_by": decided_by})
    return canonical_json(checked.model_dump(mode="json", exclude_none=True))


def answer_view(text: str, decided_by: str | None, channel: str | None) -> dict[str, Any]:
    """A recorded answer as `get_answer` / `answer_states` return it."""
    decision = dict(json.loads(text))
    decision.setdefault("decided_by", decided_by)
    decision.setdefault("channel", channel)
    return {k: v for k, v in decision.items() if v is not None}


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


# -- the errors ----------------------------------------------------------------------------

def timed_out_message(request_id: str, expires: float | None) -> str:
    when = "" if expires is None else (
        f" (it expired at {datetime.fromtimestamp(expires, tz=UTC).isoformat()})")
    return (f"confirmation {request_id} timed out{when} and was recorded as timed out; "
            "it can no longer be answered. Make the call again to ask anew")


def timed_out(request_id: str, expires: float | None) -> ConfirmationTimedOutError:
    return ConfirmationTimedOutError(timed_out_message(request_id, expires))


def already_decided(request_id: str, status: str, decided_by: str | None,
                    channel: str | None) -> ConfirmationStateError:
    who = decided_by or channel or "another decider"
    return ConfirmationStateError(
        f"confirmation {request_id} was already answered ({status}, by {who}); "
        "a confirmation is answered once and a grant is used once")


def unknown_call(call_id: str) -> UnknownCallError:
    return UnknownCallError(
        f"unknown call id {call_id!r}: no call with this id was made through this store")


def unknown_request(request_id: str, *, deciding: bool = False) -> UnknownConfirmationError:
    hint = " (check the id, and that you opened the same store file)" if deciding else ""
    return UnknownConfirmationError(
        f"unknown confirmation id {request_id!r}: it was never issued by this store{hint}")


def not_waiting(call_id: str, request_id: str) -> ConfirmationStateError:
    """An approval that was to claim its grant at once, for a call no longer waiting
    on the request: nothing is recorded."""
    return ConfirmationStateError(
        f"call {call_id} of confirmation {request_id} is no longer waiting for it; "
        "nothing was run")


def answer_waiting(request_id: str) -> ConfirmationStateError:
    return ConfirmationStateError(
        f"confirmation {request_id} already has an answer waiting to be applied; a "
        "confirmation is answered once")


def too_many_pending(count: int, max_pending: int) -> ConfirmationStateError:
    return ConfirmationStateError(
        f"{count} confirmation requests are already pending (max_pending={max_pending}); "
        "answer or expire some, or raise max_pending")


def session_full(session_id: str, count: int, cap: int | None) -> ConfirmationStateError:
    return ConfirmationStateError(
        f"session {session_id} already has {count} confirmation requests pending "
        f"(max_pending_per_session={cap}); answer or expire some first")


def not_parkable(call_id: str) -> ConfirmationStateError:
    return ConfirmationStateError(
        f"call {call_id} cannot wait for confirmation: it is not in progress here")


def not_editing(call_id: str) -> ConfirmationStateError:
    return ConfirmationStateError(f"call {call_id} is no longer being edited here")
