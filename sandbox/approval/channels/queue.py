"""`QueueConfirmationProvider`: wait for an answer that another channel records in the store.

The process that holds the tool asks; a human answers somewhere else — the web page,
``sandbox approvals approve ID``, another program calling `ApprovalStore.submit_answer`
— in this process or any other sharing the store. The provider polls the store for
every request it is waiting on with one query per interval, however many calls wait in
parallel, so a thousand pending approvals cost one query, not a thousand. A store that
sends notifications (PostgreSQL: LISTEN/NOTIFY, `StoreProtocol.answer_cursor`) is not
polled: the provider sleeps until an answer is recorded and then reads only the requests
named in the notifications (and the ones that began waiting since), looking at all of
them again every `EVENT_RECHECK` seconds (expiries send no notification).

A request that expires while waiting ends the wait as a timeout: the runner records it
as timed out, never as denied or approved.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import anyio.to_thread

from sandbox.approval.models import ConfirmationRequest, Decision
from sandbox.approval.providers import OnTimeout, _check_timeout, parse_answer
from sandbox.approval.store import ApprovalStore, open_store
from sandbox.approval.store.capabilities import location
from sandbox.errors import ConfigurationError, ConfirmationStateError, ConfirmationTimedOutError

#: With a notifying store, the longest wait between two looks at the store.
EVENT_RECHECK = 1.0


class _Closed:
    """A waited-on request that was closed without an answer for us (expired, say)."""

    def __init__(self, status: str) -> None:
        self.status = status


class QueueConfirmationProvider:
    """Answers each request with the decision a human records in the store.

    ``store`` is an `ApprovalStore` or the path of its file (the provider then opens its
    own connection). ``poll_interval`` bounds how late an answer is noticed. With
    ``on_timeout="pending"`` a wait that runs out leaves the request in the store, to be
    applied later with `ToolRunner.resume` or `ToolRunner.apply_answers`.
    """

    def __init__(
        self,
        store: ApprovalStore | str | os.PathLike[str],
        *,
        poll_interval: float = 0.1,
        timeout: float | None = 600.0,
        on_timeout: OnTimeout = "deny",
        name: str = "queue",
    ) -> None:
        _check_timeout(timeout, on_timeout)
        if not 0 < poll_interval <= 60:
            raise ConfigurationError(
                f"poll_interval must be between 0 and 60 seconds, got {poll_interval!r}"
            )
        self.store = store if isinstance(store, ApprovalStore) else open_store(store)
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout
        self.name = name
        self._waiting: dict[str, ConfirmationRequest] = {}
        self._results: dict[str, dict[str, Any] | _Closed] = {}
        self._poll_lock = anyio.Lock()
        self._next_poll = 0.0
        self._cursor: int | None = None
        self._events: bool | None = None  # does the store notify? (asked once)
        self._fresh: set[str] = set()  # began waiting since the last look
        self._full_at = 0.0  # when every waiting request was last looked at

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        self._waiting[request.id] = request
        self._fresh.add(request.id)
        try:
            result = await self._wait(request.id)
        finally:
            self._waiting.pop(request.id, None)
            self._results.pop(request.id, None)
        if isinstance(result, _Closed):
            if result.status == "timed_out":
                raise ConfirmationTimedOutError(
                    f"confirmation {request.id} expired before an answer")
            raise ConfirmationStateError(
                f"confirmation {request.id} was closed ({result.status}) while waiting"
            )
        return parse_answer(result, channel=self.name)

    async def _wait(self, request_id: str) -> dict[str, Any] | _Closed:
        while True:
            if request_id in self._results:
                return self._results[request_id]
            # One waiter polls for all; the others find their answer when it is done.
            async with self._poll_lock:
                if request_id in self._results:
                    continue
                only: set[str] | None = None  # None: look at every waiting request
                if self._events is None:
                    self._cursor = await self._call(self.store.answer_cursor)
                    self._events = self._cursor is not None
                elif self._events and self._cursor is not None:
                    # Sleep until an answer is recorded (the cursor taken before the last
                    # look: one recorded since returns at once), or the recheck is due;
                    # then look at the requests named, unless a full look is due.
                    self._cursor, named = await anyio.to_thread.run_sync(
                        self.store.wait_answers, self._cursor, self._recheck(),
                        abandon_on_cancel=True)
                    if named is not None and time.monotonic() - self._full_at < EVENT_RECHECK:
                        only = set(named) | self._fresh
                else:
                    delay = self._next_poll - time.monotonic()
                    if delay > 0:
                        await anyio.sleep(delay)
                await self._poll(only)
                self._next_poll = time.monotonic() + self.poll_interval

    async def _call(self, fn: Any, *args: Any) -> Any:
        if not self.store.blocking:
            return fn(*args)
        return await anyio.to_thread.run_sync(fn, *args)

    def _recheck(self) -> float:
        """How long to sleep for answers: until the soonest expiry, at most EVENT_RECHECK."""
        now = time.time()
        soonest = min((r.expires_at.timestamp() for r in self._waiting.values()
                       if r.expires_at is not None), default=now + EVENT_RECHECK)
        return max(0.0, min(EVENT_RECHECK, soonest - now + 0.01))

    async def _poll(self, only: set[str] | None = None) -> None:
        """Look up the waiting requests (``only``: just these) in one query."""
        if only is None:
            self._full_at = time.monotonic()
            ids = list(self._waiting)
        else:
            ids = [rid for rid in only if rid in self._waiting]
        self._fresh.difference_update(ids)
        states = {}
        if ids:
            if not self.store.blocking:
                states = self.store.answer_states(ids)
            else:
                states = await anyio.to_thread.run_sync(self.store.answer_states, ids)
        now = time.time()
        for rid in ids:
            status, answer = states.get(rid, ("missing", None))
            if answer is not None:
                self._results[rid] = answer
            elif status != "pending":
                self._results[rid] = _Closed(status)
        for rid, req in list(self._waiting.items()):  # expiry needs no query
            if rid not in self._results and req.expires_at is not None and (
                    now > req.expires_at.timestamp()):
                self._results[rid] = _Closed("timed_out")

    def __repr__(self) -> str:
        where = location(self.store) or ":memory:"
        return f"{type(self).__name__}(store={where}, name={self.name!r})"
