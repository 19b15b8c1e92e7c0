"""`StoreBase`: what every approval store backend derives from, written once in terms of
the Protocol's operations only. A leaf: it imports no backend (`open_store`, in
store/opening.py, is what picks one for a reference, and `ApprovalStore` is its public
name).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sandbox.approval.models import ConfirmationRequest
from sandbox.approval.store.protocol import MAX_PAGE, StoreProtocol
from sandbox.approval.store.records import built_request
from sandbox.errors import StoreError

#: Pending requests one session may have at once (a runner's session id).
MAX_PENDING_PER_SESSION = 1_000


class StoreBase(StoreProtocol):
    """The base of every approval store backend (`MemoryApprovalStore`,
    `SQLiteApprovalStore`, `PostgresApprovalStore`). Open one with `open_store` or
    ``ApprovalStore(ref)``; ``isinstance(store, ApprovalStore)`` is true of each."""

    if TYPE_CHECKING:
        # What ``ApprovalStore(ref, **options)`` accepts (`open_store`'s arguments), as
        # the type checker sees it: there `ApprovalStore` is this class.
        def __init__(self, ref: Any = None, /, **options: Any) -> None: ...

    @property
    def blocking(self) -> bool:
        return self.path is not None

    def __enter__(self) -> StoreBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_request(self, *, call_id: str, tool: str, args: dict[str, Any], digest: str,
                    hint: str, payload: Any, kind: str, expires_at: float | None,
                    details: dict[str, Any] | None = None, edited_from: str | None = None,
                    session_id: str | None = None) -> ConfirmationRequest:
        """`park`, returning the request model."""
        rid, now = self.park(
            call_id=call_id, tool=tool, args=args, digest=digest, hint=hint, payload=payload,
            kind=kind, expires_at=expires_at, details=details, edited_from=edited_from,
            session_id=session_id)
        return built_request(rid, now, call_id=call_id, tool=tool, args=args, digest=digest,
                             hint=hint, payload=payload, kind=kind, expires_at=expires_at,
                             details=details, edited_from=edited_from, session_id=session_id)

    # Names the gate used before the Protocol existed.
    def _add_request(self, **kwargs: Any) -> tuple[str, float]:
        return self.park(**kwargs)

    _built_request = staticmethod(built_request)

    def answer_cursor(self) -> int | None:
        """None: this store sends no answer notifications; waiters poll it."""
        return None

    def wait_answers(self, cursor: int, timeout: float
                     ) -> tuple[int, frozenset[str] | None]:
        time.sleep(timeout)
        return cursor, None

    def sweep(self) -> list[Any]:
        """`in_doubt` under the Protocol's name for it."""
        return self.in_doubt()

    @staticmethod
    def _check_page(limit: int) -> None:
        if not 1 <= limit <= MAX_PAGE:
            raise StoreError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")
