"""Server-sent events: the page learns what changed instead of re-reading everything.

One `PendingWatch` per app looks at the store when it may have changed (the SQLite file
or its write-ahead log changed; at least every `RESCAN` seconds, for expiries) and keeps
the latest `Snapshot`: how many requests are pending, the ids of the oldest
`listing.WATCH_WINDOW` of them in order (one bounded `list_pending` page, never every
pending request), and the answers waiting to be applied among those. Each open page holds its own previous snapshot and is sent only the difference:

- ``hello`` ``{count}``: sent first; the page then lists what it shows.
- ``pending`` ``{count, added, ids}``: the number waiting changed (``added`` new ones,
  the first `MAX_IDS` of them named in ``ids``).
- ``answered`` ``{id, outcome, scope, reason, decided_by, channel, at}``: an answer was
  given (on this page, another tab, the CLI...) and waits for the agent to apply it.
- ``resolved`` ``{id, status, outcome, reason, decided_by, channel, at}``: the request
  is no longer pending: approved, denied, edited, timed out, cancelled.

Every event is small and about one thing; a page that falls behind is simply sent the
difference from where it was. Reading is shared: however many pages are open, the
store is read at most once per `INTERVAL`.
"""

from __future__ import annotations

import json
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from sandbox.approval.channels.web.listing import WATCH_WINDOW, pending_window
from sandbox.approval.display import escape_text
from sandbox.approval.store import ApprovalStore

INTERVAL = 0.25
RESCAN = 2.0
HEARTBEAT = 10.0
#: New ids named in one ``pending`` event (a page fetches a request it did not get by
#: paging: one parked by a slower process with an earlier creation time).
MAX_IDS = 100
Db = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Snapshot:
    version: int
    #: The oldest pending ids (up to `WATCH_WINDOW`), oldest first.
    order: dict[str, None]
    #: Every pending request, including those beyond the window.
    total: int = 0
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)


class PendingWatch:
    """The latest snapshot of pending requests, shared by every open page."""

    def __init__(self, store: ApprovalStore, db: Db) -> None:
        self.store = store
        self._db = db
        self._lock = anyio.Lock()
        self._snapshot: Snapshot | None = None
        self._taken = 0.0
        self._signature: object = None
        self._answered_at: dict[str, float] = {}
        self._decisions: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        self.closing = False

    def _file_signature(self) -> object:
        """What changes when another process commits to the store file (None: a store
        without a file, looked at every `INTERVAL`)."""
        path = self.store.path
        if path is None:
            return None
        out: list[tuple[int, int, int] | None] = []
        for suffix in ("", "-wal"):
            try:
                st = os.stat(f"{path}{suffix}")
            except OSError:
                out.append(None)
            else:
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    async def snapshot(self) -> Snapshot:
        async with self._lock:
            now = time.monotonic()
            current = self._snapshot
            if current is not None and now - self._taken < INTERVAL:
                return current
            signature = self._file_signature()
            if (current is not None and signature is not None and signature == self._signature
                    and now - self._taken < RESCAN):
                return current
            self._signature = signature
            self._taken = now
            order, total, answers = await self._db(self._read)
            if current is not None and (order, total, answers) == (
                    current.order, current.total, current.answers):
                return current
            self._snapshot = Snapshot((current.version + 1) if current else 1, order, total,
                                      answers)
            return self._snapshot

    def _read(self) -> tuple[dict[str, None], int, dict[str, dict[str, Any]]]:
        ids, total = pending_window(self.store)
        order = dict.fromkeys(ids)
        states = self.store.answer_states(list(order)) if order else {}
        answers: dict[str, dict[str, Any]] = {}
        now = time.time()
        for rid, (_status, answer) in states.items():
            if answer is not None:
                at = self._answered_at.setdefault(rid, now)
                answers[rid] = answer_view(answer, at)
        for rid in [r for r in self._answered_at if r not in order]:
            del self._answered_at[rid]
        return order, total, answers

    async def decision(self, request_id: str) -> dict[str, Any] | None:
        """How a request that left the pending list was decided (cached: it is final)."""
        if request_id in self._decisions:
            return self._decisions[request_id]
        raw = await self._db(self.store.request_decision, request_id)
        view = None if raw is None else decision_view(raw)
        if view is None or view.get("status") == "pending":
            return view  # not final yet: not kept
        self._decisions[request_id] = view
        if len(self._decisions) > 5000:
            self._decisions.popitem(last=False)
        return view

    async def stream(self) -> AsyncIterator[str]:
        """The events of one page, as text/event-stream."""
        previous = await self.snapshot()
        yield _event("hello", {"count": previous.total})
        quiet = time.monotonic()
        while not self.closing:
            await anyio.sleep(INTERVAL)
            current = await self.snapshot()
            if current.version != previous.version:
                for text in await self._changes(previous, current):
                    yield text
                previous = current
                quiet = time.monotonic()
            elif time.monotonic() - quiet > HEARTBEAT:
                yield ": still here\n\n"  # lets a closed connection be noticed
                quiet = time.monotonic()

    async def _changes(self, before: Snapshot, after: Snapshot) -> list[str]:
        out: list[str] = []
        added = [rid for rid in after.order if rid not in before.order]
        for rid, answer in after.answers.items():
            if before.answers.get(rid) != answer:
                out.append(_event("answered", {"id": rid, **answer}))
        left = [rid for rid in before.order if rid not in after.order]
        if left and len(after.order) >= WATCH_WINDOW:
            # A full window also loses ids to older requests parked late (a slower
            # process): only those no longer pending were resolved.
            states = await self._db(self.store.answer_states, left)
            left = [rid for rid in left if states.get(rid, ("gone", None))[0] != "pending"]
        for rid in left:
            decided = await self.decision(rid)
            out.append(_event("resolved", {"id": rid, **(decided or {"status": "gone"})}))
        if added or after.total != before.total:
            # ``added``: new ones among the oldest, or more waiting beyond them.
            beyond = max(0, after.total - len(after.order)) - max(
                0, before.total - len(before.order))
            out.append(_event("pending", {"count": after.total,
                                          "added": len(added) + max(0, beyond),
                                          "ids": added[:MAX_IDS]}))
        return out


def answer_view(answer: dict[str, Any], at: float | None) -> dict[str, Any]:
    """An answer waiting to be applied, as the page shows it (text escaped)."""
    return {
        "outcome": answer.get("outcome"),
        "scope": answer.get("scope", "once"),
        "reason": _text(answer.get("reason")),
        "decided_by": _text(answer.get("decided_by")),
        "channel": _text(answer.get("channel")),
        "at": at,
    }


def decision_view(decision: dict[str, Any]) -> dict[str, Any]:
    """A final decision (`ApprovalStore.request_decision`), as the page shows it."""
    recorded = decision.get("decision") if isinstance(decision.get("decision"), dict) else {}
    decided_at = decision.get("decided_at")
    return {
        "status": decision.get("status"),
        "outcome": decision.get("outcome"),
        "scope": recorded.get("scope", "once") if recorded else "once",
        "reason": _text(decision.get("reason")),
        "decided_by": _text(decision.get("decided_by")),
        "channel": _text(decision.get("channel")),
        "at": decided_at.timestamp() if decided_at is not None else None,
    }


def _text(value: Any) -> str | None:
    return None if value is None else escape_text(str(value))[:500]


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
