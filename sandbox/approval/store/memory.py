"""`MemoryApprovalStore`: the approval store of one process, in plain Python objects.

It keeps the SQLite store's methods, states, errors and guarantees — a decision moves a
request out of ``pending`` once; a grant is bound to a call id and a digest and is used
once; every transition is journalled; expired requests are recorded as timed out — with
every check and change made under one lock, so threads racing on it behave like
processes racing on a file. What it cannot do is outlive its process or be shared with
another one: use ``ApprovalStore(path)`` for that.

Arguments, payloads, results and answers are kept as the same JSON text the SQLite store
writes and parsed on the way out, so a caller never shares a mutable object with the
store, and what is read back is exactly what a file would have returned.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from sandbox.approval.models import ConfirmationRequest, Rule, canonical_json
from sandbox.approval.store import decisions
from sandbox.approval.store.base import MAX_PENDING_PER_SESSION, StoreBase
from sandbox.approval.store.protocol import Page
from sandbox.approval.store.records import (
    PRUNABLE_STATES,
    CallRecord,
    Owner,
    checked_bounds,
    clock,
    dt,
    dump,
    new_id,
    request_from_row,
)
from sandbox.approval.store.states import HELD, IN_PROGRESS, PARKABLE, allowed
from sandbox.errors import StoreError

_PRUNABLE = PRUNABLE_STATES
_OPEN_STATES = IN_PROGRESS
_EMPTY_DETAILS = "{}"


class _Call:
    # A call's journal and request ids are tuples of strings and floats: the garbage
    # collector stops tracking those, which keeps a full store cheap to collect.
    __slots__ = ("args", "call_id", "created", "digest", "grant_digest", "journal", "owner",
                 "request_id", "requests", "result", "run_args", "session_id", "state", "tool",
                 "updated")

    def __init__(self, call_id: str, tool: str, digest: str, args: str, owner: str,
                 session_id: str | None, now: float) -> None:
        self.call_id = call_id
        self.tool = tool
        self.digest = digest
        self.args = args  # canonical JSON text
        self.state = "new"
        self.request_id: str | None = None
        self.grant_digest: str | None = None
        self.run_args: str | None = None
        self.owner: str | None = owner
        self.result: str | None = None  # JSON text
        self.session_id = session_id
        self.created = now
        self.updated = now
        self.journal: tuple[tuple[str, float, str | None, str | None], ...] = (
            ("new", now, owner, None),)
        self.requests: tuple[str, ...] = ()

    def record(self) -> CallRecord:
        return CallRecord(
            call_id=self.call_id, tool=self.tool, digest=self.digest,
            args=json.loads(self.args), state=self.state, request_id=self.request_id,
            owner=self.owner, result=None if self.result is None else json.loads(self.result),
            session_id=self.session_id, created=self.created, updated=self.updated,
        )


class _Request:
    __slots__ = ("args", "call_id", "channel", "created", "decided", "decided_by", "decision",
                 "details", "digest", "edited_from", "expires", "hint", "id", "kind", "outcome",
                 "payload", "reason", "session_id", "status", "tool")

    def __init__(self, rid: str, call_id: str, tool: str, args: str, digest: str, hint: str,
                 payload: str | None, kind: str, details: str, now: float,
                 expires: float | None, edited_from: str | None,
                 session_id: str | None) -> None:
        self.id = rid
        self.call_id = call_id
        self.tool = tool
        self.args = args
        self.digest = digest
        self.hint = hint
        self.payload = payload
        self.kind = kind
        self.details = details
        self.status = "pending"
        self.created = now
        self.expires = expires
        self.decided: float | None = None
        self.outcome: str | None = None
        self.reason: str | None = None
        self.decided_by: str | None = None
        self.channel: str | None = None
        self.decision: str | None = None
        self.edited_from = edited_from
        self.session_id = session_id

    def public(self) -> ConfirmationRequest:
        return request_from_row((
            self.id, self.call_id, self.tool, self.args, self.digest, self.hint,
            self.payload, self.kind, self.details, self.status, self.created, self.expires,
            self.edited_from, self.session_id,
        ))


class MemoryApprovalStore(StoreBase):
    """The approval store of a single process, kept in memory (no SQLite).

    Same methods, semantics and errors as `ApprovalStore`; every operation holds one
    `threading.Lock`, which makes each check-and-change atomic for every thread of the
    process. ``max_history`` (default 100,000) bounds the finished calls kept to answer
    repeated call ids; ``max_pending`` bounds the requests waiting for an answer.
    ``ApprovalStore()`` without a path returns one of these. ``busy_timeout`` and
    ``lease_seconds`` are accepted (the signature is `ApprovalStore`'s) and unused: nothing
    here waits on another process, and no other process holds its calls (the sweep knows
    this process is alive).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        max_pending: int = 10_000,
        max_history: int | None = -1,
        busy_timeout: float = 10.0,
        max_pending_per_session: int | None = MAX_PENDING_PER_SESSION,
        lease_seconds: float | None = None,
    ) -> None:
        max_history = checked_bounds(max_pending, max_pending_per_session, max_history,
                                     unbounded_history=100_000)
        self.max_pending_per_session = max_pending_per_session
        if path is not None:
            raise StoreError(
                "MemoryApprovalStore keeps everything in this process; for a file use "
                f"ApprovalStore({str(path)!r})"
            )
        self.path = None
        self.max_pending = max_pending
        self.max_history = max_history
        self._opened = 0
        self._lock = threading.RLock()
        self._closed = False
        self._calls: dict[str, _Call] = {}
        # Finished calls that may be forgotten, oldest first (the order they finished in).
        self._finished: dict[str, None] = {}
        self._requests: dict[str, _Request] = {}
        self._pending: dict[str, _Request] = {}
        self._answers: dict[str, tuple[str, str | None, str | None, float]] = {}
        self._rules: dict[str, Rule] = {}
        self._rules_by_tool: dict[str, list[str]] = {}  # rule ids, per tool, oldest first
        self._audit: dict[str, tuple[int, str]] = {}

    def __repr__(self) -> str:
        return f"MemoryApprovalStore(calls={len(self._calls)}, pending={len(self._pending)})"

    # -- plumbing --------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this approval store was closed; open a new one")

    def _set_state(self, rec: _Call, state: str, now: float, detail: str | None) -> None:
        """Every call transition, as in the SQLite store's journal trigger."""
        if not allowed(rec.state, state):
            raise StoreError(f"call {rec.call_id}: no transition {rec.state} -> {state}")
        rec.state = state
        rec.updated = now
        rec.journal += ((state, now, rec.owner, detail),)
        cid = rec.call_id
        if state in _PRUNABLE:
            self._finished.pop(cid, None)
            self._finished[cid] = None
        elif cid in self._finished:
            del self._finished[cid]

    # -- calls -----------------------------------------------------------------------

    def open_call(
        self, call_id: str, tool: str, digest: str, args: dict[str, Any],
        session_id: str | None = None, *, args_json: str | None = None,
    ) -> CallRecord | None:
        now = clock()
        owner = Owner.token()
        text = canonical_json(args) if args_json is None else args_json
        with self._lock:
            self._check_open()
            rec = self._calls.get(call_id)
            if rec is None:
                self._calls[call_id] = _Call(call_id, tool, digest, text, owner, session_id, now)
                self._opened += 1
                if self.max_history is not None and self._opened % 1024 == 0:
                    self._prune(self.max_history)
                return None
            never_started = rec.state == "abandoned" or (
                rec.state in ("new", "editing") and Owner.alive(rec.owner) is False)
            if never_started and (rec.tool, rec.digest) == (tool, digest):
                rec.owner = owner
                self._set_state(rec, "new", now, "reopened: owner died before start")
                return None
            return rec.record()

    def _prune(self, keep: int) -> None:
        excess = len(self._finished) - keep
        if excess <= 0:
            return
        victims = list(self._finished)[:excess]
        for cid in victims:
            del self._finished[cid]
            rec = self._calls.pop(cid, None)
            for rid in () if rec is None else rec.requests:
                self._requests.pop(rid, None)
                self._pending.pop(rid, None)
                self._answers.pop(rid, None)

    def get_call(self, call_id: str) -> CallRecord:
        with self._lock:
            self._check_open()
            rec = self._calls.get(call_id)
            found = None if rec is None else rec.record()
        if found is None:
            raise decisions.unknown_call(call_id)
        return found

    def start(self, call_id: str, digest: str) -> bool:
        owner = Owner.token()
        now = clock()
        with self._lock:
            self._check_open()
            return self._m_claim(call_id, digest, owner, now)

    def _m_claim(self, call_id: str, digest: str, owner: str, now: float) -> bool:
        rec = self._calls.get(call_id)
        if rec is None:
            return False
        state = rec.state
        if (state == "approved" and rec.grant_digest == digest) or (
                state == "new" and rec.digest == digest and rec.owner == owner):
            # The grant is cleared in the step that uses it: single use.
            rec.owner = owner
            rec.grant_digest = None
            self._set_state(rec, "started", now, digest)
            return True
        return False

    def finish(self, call_id: str, state: str, result: Any) -> None:
        owner = Owner.token()
        now = clock()
        text = dump(result)
        with self._lock:
            self._check_open()
            rec = self._calls.get(call_id)
            if rec is not None and rec.owner == owner and rec.state in _OPEN_STATES:
                rec.result = text
                self._set_state(rec, state, now, None)

    def grant(self, call_id: str, digest: str, run_args: dict[str, Any]) -> None:
        owner = Owner.token()
        text = canonical_json(run_args)
        now = clock()
        with self._lock:
            self._check_open()
            rec = self._calls.get(call_id)
            if rec is None or rec.state != "editing" or rec.owner != owner:
                raise decisions.not_editing(call_id)
            rec.grant_digest = digest
            rec.run_args = text
            self._set_state(rec, "approved", now, digest)

    def in_doubt(self) -> list[CallRecord]:
        with self._lock:
            self._check_open()
            for rec in list(self._calls.values()):
                if rec.state in HELD and Owner.alive(
                        rec.owner) is False:
                    new_state = "in_doubt" if rec.state == "started" else "abandoned"
                    self._set_state(rec, new_state, clock(), "owner process is gone")
            found = [rec for rec in self._calls.values() if rec.state == "in_doubt"]
            found.sort(key=lambda rec: rec.updated)
            return [rec.record() for rec in found]

    def count_requests(self, call_id: str) -> int:
        with self._lock:
            self._check_open()
            rec = self._calls.get(call_id)
            return 0 if rec is None else len(rec.requests)

    def journal(self, call_id: str) -> list[tuple[str, float, str | None]]:
        with self._lock:
            self._check_open()
            rec = self._calls.get(call_id)
            return [] if rec is None else [(state, at, detail)
                                           for state, at, _, detail in rec.journal]

    # -- requests --------------------------------------------------------------------

    def park(
        self, *, call_id: str, tool: str, args: dict[str, Any], digest: str, hint: str,
        payload: Any, kind: str, expires_at: float | None,
        details: dict[str, Any] | None = None, edited_from: str | None = None,
        session_id: str | None = None, args_json: str | None = None,
    ) -> tuple[str, float]:
        rid = new_id("cf")
        now = clock()
        owner = Owner.token()
        text = canonical_json(args) if args_json is None else args_json
        payload_text = None if payload is None else dump(payload)
        details_text = dump(details) if details else _EMPTY_DETAILS
        assert details_text is not None
        with self._lock:
            self._check_open()
            count = len(self._pending)
            if count >= self.max_pending:
                raise decisions.too_many_pending(count, self.max_pending)
            if session_id is not None and self.max_pending_per_session is not None:
                mine = sum(1 for r in self._pending.values() if r.session_id == session_id)
                if mine >= self.max_pending_per_session:
                    raise decisions.session_full(session_id, mine, self.max_pending_per_session)
            rec = self._calls.get(call_id)
            if rec is None or rec.state not in PARKABLE or (
                    rec.owner != owner):
                raise decisions.not_parkable(call_id)
            req = _Request(rid, call_id, tool, text, digest, hint, payload_text, kind,
                           details_text, now, expires_at, edited_from, session_id)
            self._requests[rid] = req
            self._pending[rid] = req
            rec.requests += (rid,)
            rec.request_id = rid
            self._set_state(rec, "awaiting", now, rid)
        return rid, now

    def decide(
        self,
        request_id: str,
        *,
        status: str,
        outcome: str | None = None,
        reason: str | None = None,
        decided_by: str | None = None,
        channel: str | None = None,
        decision: dict[str, Any] | str | None = None,
        call_result: Any = None,
        start: bool = False,
    ) -> None:
        now = clock()
        owner = Owner.token()
        decision_text = decision if isinstance(decision, str) else dump(decision)
        result_text = None if call_result is None else dump(call_result)
        with self._lock:
            self._check_open()
            req = self._requests.get(request_id)
            if req is None:
                raise decisions.unknown_request(request_id, deciding=True)
            waiting_answer = self._answers.get(request_id)
            if waiting_answer is not None and outcome in decisions.HUMAN_OUTCOMES \
                    and req.status == "pending":
                decisions.check_waiting_answer(request_id, outcome, waiting_answer[0],
                                           waiting_answer[1] or waiting_answer[2])
            if decisions.decidable(req.status, req.expires, now):
                rec = self._calls.get(req.call_id)
                waiting = rec is not None and rec.state == "awaiting" and (
                    rec.request_id == request_id)
                if start and status == "approved" and not waiting:
                    # Nothing is recorded: the SQL stores roll this decision back.
                    raise decisions.not_waiting(req.call_id, request_id)
                self._m_decide(req, now, owner, status=status, outcome=outcome,
                               reason=reason, decided_by=decided_by, channel=channel,
                               decision=decision_text, call_result=result_text)
                if start and status == "approved":
                    claimed = self._m_claim(req.call_id, req.digest, owner, now)
                    assert claimed  # approved just now, under this lock
                return
            expired = decisions.late_decision(
                request_id, current=req.status, expires=req.expires, now=now, status=status,
                decided_by=req.decided_by, channel=req.channel)
            if expired:
                self._m_expire(req, now)
            else:
                self._m_decide(req, now, owner, status=status, outcome=outcome,
                               reason=reason, decided_by=decided_by, channel=channel,
                               decision=decision_text, call_result=result_text)
        if expired:
            raise decisions.timed_out(request_id, req.expires)

    def _m_decide(self, req: _Request, now: float, owner: str, *, status: str,
                  outcome: str | None, reason: str | None, decided_by: str | None,
                  channel: str | None, decision: str | None, call_result: str | None) -> None:
        req.status = status
        req.decided = now
        req.outcome = outcome
        req.reason = reason
        req.decided_by = decided_by
        req.channel = channel
        req.decision = decision
        rid = req.id
        del self._pending[rid]
        self._answers.pop(rid, None)  # an answer waiting to be applied is moot now
        call_state, granted = decisions.call_state(status)
        rec = self._calls.get(req.call_id)
        if rec is not None and rec.state == "awaiting" and rec.request_id == rid:
            rec.grant_digest = req.digest if granted else None
            rec.owner = owner
            rec.result = call_result
            self._set_state(rec, call_state, now,
                            decisions.decision_note(rid, decided_by, channel))

    def _m_expire(self, req: _Request, now: float) -> None:
        req.status = "timed_out"
        req.decided = now
        req.outcome = decisions.TIMEOUT_OUTCOME
        req.reason = decisions.TIMEOUT_REASON
        rid = req.id
        self._pending.pop(rid, None)
        self._answers.pop(rid, None)
        rec = self._calls.get(req.call_id)
        if rec is not None and rec.state == "awaiting" and rec.request_id == rid:
            rec.result = dump(decisions.timed_out_result(rid))
            self._set_state(rec, "timed_out", now, decisions.expiry_note(rid))

    # -- answers from other channels ----------------------------------------------------

    def submit_answer(self, request_id: str, decision: Any, *,
                      decided_by: str | None = None, channel: str | None = None) -> None:
        text = decisions.answer_text(decision, decided_by=decided_by, channel=channel)
        now = clock()
        with self._lock:
            self._check_open()
            req = self._requests.get(request_id)
            if req is None:
                raise decisions.unknown_request(request_id)
            expired = not decisions.answerable(request_id, current=req.status,
                                           expires=req.expires, now=now)
            if expired:
                self._m_expire(req, now)
            else:
                if request_id in self._answers:
                    raise decisions.answer_waiting(request_id)
                self._answers[request_id] = (text, decided_by, channel, now)
                rec = self._calls.get(req.call_id)
                if rec is not None:
                    rec.journal += (("answered", now, None,
                                     decisions.decision_note(request_id, decided_by, channel)),)
        if expired:
            raise decisions.timed_out(request_id, req.expires)

    @staticmethod
    def _answer(raw: tuple[str, str | None, str | None, float]) -> dict[str, Any]:
        return decisions.answer_view(raw[0], raw[1], raw[2])

    def get_answer(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._check_open()
            req = self._requests.get(request_id)
            raw = self._answers.get(request_id)
            if req is None or raw is None or req.status != "pending":
                return None
        return self._answer(raw)

    def answer_states(self, request_ids: Sequence[str]) -> dict[str, tuple[str, dict[str, Any] | None]]:
        out: dict[str, tuple[str, dict[str, Any] | None]] = {}
        with self._lock:
            self._check_open()
            for rid in request_ids:
                req = self._requests.get(rid)
                if req is None:
                    continue
                raw = self._answers.get(rid) if req.status == "pending" else None
                out[rid] = (req.status, None if raw is None else self._answer(raw))
        return out

    def answered_requests(self) -> list[ConfirmationRequest]:
        with self._lock:
            self._check_open()
            answered = sorted(
                ((at, self._requests[rid]) for rid, (_, _, _, at) in self._answers.items()
                 if self._requests[rid].status == "pending"),
                key=lambda item: item[0],
            )
            return [req.public() for _, req in answered]

    def get_request(self, request_id: str) -> ConfirmationRequest:
        with self._lock:
            self._check_open()
            req = self._requests.get(request_id)
            found = None if req is None else req.public()
        if found is None:
            raise decisions.unknown_request(request_id)
        return found

    def request_decision(self, request_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._check_open()
            req = self._requests.get(request_id)
            if req is None or req.status == "pending":
                return None
            return {
                "status": req.status, "outcome": req.outcome, "reason": req.reason,
                "decided_by": req.decided_by, "channel": req.channel,
                "decided_at": dt(req.decided),
                "decision": None if req.decision is None else json.loads(req.decision),
            }

    def pending(self, *, session_id: str | None = None) -> list[ConfirmationRequest]:
        now = clock()
        with self._lock:
            self._check_open()
            for req in [r for r in self._pending.values()
                        if r.expires is not None and r.expires < now]:
                self._m_expire(req, now)
            waiting = [r for r in self._pending.values()
                       if session_id is None or r.session_id == session_id]
            waiting.sort(key=lambda r: (r.created, r.id))
            return [r.public() for r in waiting]

    def list_pending(self, *, limit: int, after: str | None = None,
                     session_id: str | None = None) -> Page:
        self._check_page(limit)
        self.pending(session_id=session_id)  # closes expired requests first
        with self._lock:
            self._check_open()
            waiting = sorted((r for r in self._pending.values()
                              if session_id is None or r.session_id == session_id),
                             key=lambda r: (r.created, r.id))
            if after is not None:
                # An unknown cursor gives an empty page, as in SQL (the comparison is NULL).
                cursor = self._requests.get(after)
                rest = [] if cursor is None else [
                    r for r in waiting if (r.created, r.id) > (cursor.created, cursor.id)]
            else:
                rest = waiting
            items = [r.public() for r in rest[:limit]]
        more = len(rest) > limit
        return Page(items=items, next=items[-1].id if more else None, total=len(waiting))

    # -- rules -----------------------------------------------------------------------------

    def add_rules(self, rules: Sequence[Rule]) -> None:
        with self._lock:
            self._check_open()
            for rule in rules:
                self._rules[rule.id] = rule
                self._rules_by_tool.setdefault(rule.tool, []).append(rule.id)

    def active_rules(self, tool: str, session_id: str | None, now: float) -> list[Rule]:
        with self._lock:
            self._check_open()
            ids = self._rules_by_tool.get(tool)
            if not ids:
                return []
            session = session_id or ""
            found = [r for r in (self._rules[i] for i in ids)
                     if r.revoked_at is None and r.expires_at.timestamp() > now
                     and (r.scope == "always" or r.session_id == session)]
        found.sort(key=lambda r: r.created_at)
        return found

    def mark_rules_used(self, rule_ids: Sequence[str], now: float) -> None:
        with self._lock:
            self._check_open()
            for rid in rule_ids:
                rule = self._rules.get(rid)
                if rule is not None:
                    self._rules[rid] = rule.model_copy(
                        update={"uses": rule.uses + 1, "last_used_at": dt(now)})

    def get_rule(self, rule_id: str) -> Rule | None:
        with self._lock:
            self._check_open()
            return self._rules.get(rule_id)

    def list_rules(self, *, include_inactive: bool, tool: str | None,
                   now: float) -> list[Rule]:
        with self._lock:
            self._check_open()
            found = [r for r in self._rules.values()
                     if (include_inactive or (r.revoked_at is None
                                              and r.expires_at.timestamp() > now))
                     and (tool is None or r.tool == tool)]
        found.sort(key=lambda r: (r.created_at, r.id))
        return found

    def revoke_rule(self, rule_id: str, by: str | None, now: float) -> bool:
        with self._lock:
            self._check_open()
            rule = self._rules.get(rule_id)
            if rule is None:
                return False
            if rule.revoked_at is None:
                self._rules[rule_id] = rule.model_copy(
                    update={"revoked_at": dt(now), "revoked_by": by})
            return True

    # -- the audit anchor ------------------------------------------------------------------

    def audit_head(self, log: str) -> tuple[int, str] | None:
        with self._lock:
            return self._audit.get(log)

    def anchor_audit(self, log: str, count: int, last_hash: str) -> None:
        with self._lock:
            self._audit[log] = (count, last_hash)

    # -- one step for an answer known before asking (the gate's fast path) -------------

    def open_decided(
        self, *, call_id: str, tool: str, digest: str, args_json: str,
        session_id: str | None, hint: str, kind: str, expires_at: float | None,
        details: dict[str, Any] | None, reason: str | None, decided_by: str | None,
        channel: str | None, decision: dict[str, Any] | str,
    ) -> str | None:
        """`open_call`, `park` and `decide(status="approved", start=True)` one after the
        other, under one lock: for an approval known before the request is parked (an
        `AutoApprove`, or remembered rules). The same records and journal (new →
        awaiting → approved → started) as those three steps; the request id, or None
        with nothing recorded when those steps would not simply succeed (the call id
        is known, or a bound on pending requests is reached): the caller then takes
        them one by one, and meets whatever they say."""
        now = time.time()
        owner = Owner._token or Owner.token()
        rid = new_id("cf")
        details_text = dump(details) if details else _EMPTY_DETAILS
        assert details_text is not None
        decision_text = decision if isinstance(decision, str) else dump(decision)
        with self._lock:
            if self._closed:
                self._check_open()
            if call_id in self._calls or len(self._pending) >= self.max_pending:
                return None
            if session_id is not None and self.max_pending_per_session is not None and (
                    sum(1 for r in self._pending.values() if r.session_id == session_id)
                    >= self.max_pending_per_session):
                return None
            rec = _Call(call_id, tool, digest, args_json, owner, session_id, now)
            req = _Request(rid, call_id, tool, args_json, digest, hint, None, kind,
                           details_text, now, expires_at, None, session_id)
            req.status = "approved"
            req.decided = now
            req.outcome = "approve"
            req.reason = reason
            req.decided_by = decided_by
            req.channel = channel
            req.decision = decision_text
            rec.requests = (rid,)
            rec.request_id = rid
            rec.state = "started"  # the grant is claimed in this step: single use
            rec.journal += (("awaiting", now, owner, rid),
                            ("approved", now, owner, f"{rid} by {decided_by or channel}"),
                            ("started", now, owner, digest))
            self._calls[call_id] = rec
            self._requests[rid] = req
            self._opened += 1
            if self.max_history is not None and self._opened % 1024 == 0:
                self._prune(self.max_history)
        return rid
