"""`StoreProtocol`: the operations the gate needs from an approval store, and nothing else.

Every backend (`MemoryApprovalStore`, `SQLiteApprovalStore`, `PostgresApprovalStore`) implements exactly these;
the gate, the rule book, the providers, the web page and the CLI use only these. A
backend's guarantees are the same whichever it is: a request is decided once, a grant
is claimed once and only for its digest, every call transition follows
`states.TRANSITIONS` and is journalled, and a call whose worker died after starting it
is reported ``in_doubt`` by `in_doubt` and never started again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandbox.approval.models import ConfirmationRequest, Rule
from sandbox.approval.store.records import CallRecord

#: The largest page `list_pending` returns.
MAX_PAGE = 500


@dataclass(frozen=True)
class Page:
    """One page of pending requests, oldest first. ``next``: pass it as ``after`` for
    the following page (None on the last page). ``total``: pending requests in all."""

    items: list[ConfirmationRequest] = field(default_factory=list)
    next: str | None = None
    total: int = 0


class StoreProtocol(Protocol):
    path: Path | None
    max_pending: int
    max_pending_per_session: int | None

    @property
    def blocking(self) -> bool:
        """Whether operations may wait on I/O or another process (run them in a thread)."""
        ...

    # -- calls -------------------------------------------------------------------------
    def open_call(self, call_id: str, tool: str, digest: str, args: dict[str, Any],
                  session_id: str | None = None, *,
                  args_json: str | None = None) -> CallRecord | None:
        """Record a new call; return the existing record instead if the id is known."""
        ...

    def start(self, call_id: str, digest: str) -> bool:
        """Claim the right to run: True for exactly one caller, only for ``digest``."""
        ...

    def finish(self, call_id: str, state: str, result: Any) -> None:
        """Record the end of a call this worker holds."""
        ...

    def grant(self, call_id: str, digest: str, run_args: dict[str, Any]) -> None:
        """Turn an ``editing`` call into an ``approved`` one bound to the edited digest."""
        ...

    def in_doubt(self) -> list[CallRecord]:
        """The sweep: mark calls of dead workers (``started`` → ``in_doubt``, never-started
        ones ``abandoned``), and return every call in doubt."""
        ...

    def get_call(self, call_id: str) -> CallRecord: ...

    def count_requests(self, call_id: str) -> int: ...

    def journal(self, call_id: str) -> list[tuple[str, float, str | None]]: ...

    # -- requests ----------------------------------------------------------------------
    def park(self, *, call_id: str, tool: str, args: dict[str, Any], digest: str, hint: str,
             payload: Any, kind: str, expires_at: float | None,
             details: dict[str, Any] | None = None, edited_from: str | None = None,
             session_id: str | None = None,
             args_json: str | None = None) -> tuple[str, float]:
        """Park a request for a call in progress here: its id and creation time."""
        ...

    def decide(self, request_id: str, *, status: str, outcome: str | None = None,
               reason: str | None = None, decided_by: str | None = None,
               channel: str | None = None, decision: dict[str, Any] | str | None = None,
               call_result: Any = None, start: bool = False) -> None:
        """Record a request's one decision; ``start=True`` with an approval also claims
        the grant in the same step."""
        ...

    def submit_answer(self, request_id: str, decision: Any, *,
                      decided_by: str | None = None, channel: str | None = None) -> None:
        """Record a human's answer for the worker holding the call to apply."""
        ...

    def get_answer(self, request_id: str) -> dict[str, Any] | None: ...

    def answer_states(self, request_ids: Sequence[str]
                      ) -> dict[str, tuple[str, dict[str, Any] | None]]: ...

    def answered_requests(self) -> list[ConfirmationRequest]: ...

    def answer_cursor(self) -> int | None:
        """Optional wait hook. None: the store sends no notifications and a waiter polls
        `answer_states`. Otherwise a mark for `wait_answers` (PostgreSQL: LISTEN)."""
        ...

    def wait_answers(self, cursor: int, timeout: float
                     ) -> tuple[int, frozenset[str] | None]:
        """Block until an answer or decision is recorded after ``cursor``, or ``timeout``
        seconds pass. Returns the new mark and the ids of the requests answered or
        decided since ``cursor`` (None: not known, any may have been; look at all).
        Read their state with `answer_states` after it returns."""
        ...

    def get_request(self, request_id: str) -> ConfirmationRequest: ...

    def request_decision(self, request_id: str) -> dict[str, Any] | None: ...

    def list_pending(self, *, limit: int, after: str | None = None,
                     session_id: str | None = None) -> Page:
        """A page of pending requests, oldest first, at most ``limit`` (≤ `MAX_PAGE`)."""
        ...

    def pending(self, *, session_id: str | None = None) -> list[ConfirmationRequest]: ...

    # -- rules -------------------------------------------------------------------------
    def add_rules(self, rules: Sequence[Rule]) -> None:
        """Save rules, all or none."""
        ...

    def active_rules(self, tool: str, session_id: str | None, now: float) -> list[Rule]: ...

    def mark_rules_used(self, rule_ids: Sequence[str], now: float) -> None: ...

    def get_rule(self, rule_id: str) -> Rule | None: ...

    def list_rules(self, *, include_inactive: bool, tool: str | None,
                   now: float) -> list[Rule]: ...

    def revoke_rule(self, rule_id: str, by: str | None, now: float) -> bool: ...

    # -- the audit anchor ----------------------------------------------------------------
    def audit_head(self, log: str) -> tuple[int, str] | None:
        """The record count and last hash of audit log ``log``, as last anchored."""
        ...

    def anchor_audit(self, log: str, count: int, last_hash: str) -> None: ...

    def close(self) -> None: ...
