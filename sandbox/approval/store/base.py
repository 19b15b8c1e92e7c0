"""`ApprovalStore`: the base every backend derives from, and `open_store`, which opens
a store from a reference.

``ApprovalStore()`` is a `MemoryApprovalStore`; ``ApprovalStore(path)`` and
``ApprovalStore(":memory:")`` are a `SQLiteApprovalStore`. What the backends share is
written once here, in terms of the Protocol's operations only.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from sandbox.approval.models import ConfirmationRequest
from sandbox.approval.store.protocol import MAX_PAGE, StoreProtocol
from sandbox.approval.store.records import built_request
from sandbox.errors import StoreError

#: Pending requests one session may have at once (a runner's session id).
MAX_PENDING_PER_SESSION = 1_000


class ApprovalStore(StoreProtocol):
    """An approval store. Construct one with `open_store` or ``ApprovalStore(ref)``."""

    def __new__(cls, path: str | os.PathLike[str] | None = None,
                **kwargs: Any) -> ApprovalStore:
        if cls is ApprovalStore:
            return object.__new__(_backend_for(path))
        return object.__new__(cls)

    @property
    def blocking(self) -> bool:
        return self.path is not None

    #: Whether `batch` does anything (a backend whose commits cost more than its
    #: statements groups a step's operations in one transaction).
    batches = False

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """One transaction for the several operations of one gate step, where the
        backend has one; each operation stays atomic by itself inside it."""
        return contextlib.nullcontext()

    def __enter__(self) -> ApprovalStore:
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


def _backend_for(ref: str | os.PathLike[str] | None) -> type[ApprovalStore]:
    if ref is None:
        from sandbox.approval.store.memory import MemoryApprovalStore

        return MemoryApprovalStore
    text = str(ref)
    if text.startswith(("postgresql:", "postgres:")):
        from sandbox.approval.store.postgres import PostgresApprovalStore, redacted

        if not text.startswith(("postgresql://", "postgres://")):
            raise StoreError(f"{redacted(text)}: a PostgreSQL store is named by a URL, "
                             "postgresql://user@host/database")
        return PostgresApprovalStore
    if "://" in text:
        raise StoreError(
            f"{text.split('://', 1)[0]}://…: unknown kind of approval store; use a SQLite "
            "file path, ':memory:', or a postgresql:// URL")
    from sandbox.approval.store.sqlite import SQLiteApprovalStore

    return SQLiteApprovalStore


def open_store(ref: str | os.PathLike[str] | None = None, **options: Any) -> ApprovalStore:
    """Open the store a reference names: None (memory, this process), ``":memory:"``
    (SQLite in memory), a file path (SQLite, shared by the processes of one host) or a
    ``postgresql://`` URL (PostgreSQL, shared by many hosts; ``pip install
    'sandbox[postgres]'``).

    ``options`` go to the backend (``max_pending``, ``max_pending_per_session``, ...).
    """
    backend = _backend_for(ref)
    if ref is None:
        return backend(**options)
    return backend(ref, **options)
