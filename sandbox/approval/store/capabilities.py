"""What some approval stores can do beyond `StoreProtocol`, each declared as a Protocol of
its own: the gate asks ``isinstance(store, Capability)`` once, when it is set up, and
uses the capability where the store has it (the operations of `StoreProtocol` do the
same work where it has not).

==================  =========================================  ==========================
capability          what it offers                             backends
==================  =========================================  ==========================
`Batching`          one transaction for a gate step's          SQLite
                    several operations (`batch`)
`RunsNow`           a step run on the caller's thread when     SQLite file; PostgreSQL
                    it would not wait (`run_now`)              (over a unix socket)
`OpensAndParks`     open a call and park its request in one    PostgreSQL
                    operation (`open_and_park`)
`DecidesParked`     decide on the request as parked, without   PostgreSQL
                    reading it back (`parked_request`,
                    `decide_parked`)
`Located`           a store reached by a URL (`url`, its       PostgreSQL
                    password redacted)
`DecidesAtOnce`     open, park, approve and start a call in    memory
                    one step, for an answer known before
                    asking (`open_decided`)
==================  =========================================  ==========================

`location` names where any store keeps its data (its file, its URL), for messages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from sandbox.approval.models import ConfirmationRequest
from sandbox.approval.store.protocol import StoreProtocol
from sandbox.approval.store.records import CallRecord

T = TypeVar("T")


@runtime_checkable
class Batching(Protocol):
    """A store whose commits cost more than its statements."""

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """One transaction for the several operations of one gate step; each operation
        stays atomic by itself inside it (a failing one is rolled back alone), and what
        they recorded is committed at the end even when the step raised."""
        ...


@runtime_checkable
class RunsNow(Protocol):
    """A store whose operations may wait (`StoreProtocol.blocking`) but that can tell
    when a step would not."""

    def run_now(self, body: Callable[[], T]) -> tuple[bool, T | None]:
        """Run ``body`` (a gate step of a few operations) here, on the caller's thread,
        if that cannot wait: ``(True, its result)``; ``(False, None)``, with nothing
        done, when it could (the caller then runs it on the store's worker thread)."""
        ...


@runtime_checkable
class OpensAndParks(Protocol):
    """A store that opens a call and parks its request in one operation."""

    def open_and_park(
        self, *, call_id: str, tool: str, digest: str, args: dict[str, Any],
        session_id: str | None, args_json: str | None, hint: str, payload: Any, kind: str,
        expires_at: float | None, details: dict[str, Any] | None,
        edited_from: str | None,
    ) -> CallRecord | tuple[str, float]:
        """`open_call` then `park`: the existing record when the call id is known, else
        the request's id and creation time."""
        ...


@runtime_checkable
class DecidesParked(Protocol):
    """A store that remembers the requests it parked and records a decision judged on
    one only while the stored request is still exactly it."""

    def parked_request(self, request_id: str) -> ConfirmationRequest | None:
        """The request as this store parked it (recently), without reading it back;
        None otherwise. Use it only with `decide_parked`."""
        ...

    def decide_parked(
        self, request_id: str, *, status: str, outcome: str | None = None,
        reason: str | None = None, decided_by: str | None = None,
        channel: str | None = None, decision: dict[str, Any] | str | None = None,
        call_result: Any = None, start: bool = False,
    ) -> bool:
        """`decide` for a decision judged on `parked_request`: True when recorded;
        False, with nothing written, unless the stored request is still that one,
        pending and unexpired."""
        ...


@runtime_checkable
class DecidesAtOnce(Protocol):
    """A store that records a call approved before its request was parked (an
    `AutoApprove`, remembered rules) in one step: `open_call`, `park` and `decide`
    (approved, started) under one lock, with the same records and journal."""

    def open_decided(
        self, *, call_id: str, tool: str, digest: str, args_json: str,
        session_id: str | None, hint: str, kind: str, expires_at: float | None,
        details: dict[str, Any] | None, reason: str | None, decided_by: str | None,
        channel: str | None, decision: dict[str, Any] | str,
    ) -> str | None:
        """The request id, or None with nothing recorded when the three steps would not
        simply succeed (the caller then takes them one by one)."""
        ...


@runtime_checkable
class Located(Protocol):
    """A store reached by a URL."""

    #: The URL, its password redacted.
    url: str


def location(store: StoreProtocol) -> str | None:
    """Where ``store`` keeps its data, for a message: its file, its URL (password
    redacted), or None (this process's memory)."""
    if store.path is not None:
        return str(store.path)
    if isinstance(store, Located):
        return store.url
    return None
