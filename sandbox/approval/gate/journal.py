"""Every step a call takes in the store, and the audit event that step emits: one place.

The gate's other parts never write to the store or the audit log themselves; they ask
for a transition here (open, park, decide, grant, start, finish, end, in doubt), which
runs it as one store step (`offload.StoreSteps`: inline for a memory store, on the
store's worker thread for a file or a server) and, when it took effect, emits its
event. An event is therefore written for what the store recorded, never for what a
part meant to do. Events that would only be rendered for a trail are built only when
the call is audited (`Call.audited`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, TypeVar

import anyio.lowlevel

from sandbox.approval.display import shown
from sandbox.approval.gate.call import Asked, Call, Request, public
from sandbox.approval.gate.consult import Failure
from sandbox.approval.gate.offload import StoreSteps
from sandbox.approval.gate.plan import Plan
from sandbox.approval.gate.results import NotRun, Outcome, Status
from sandbox.approval.models import ConfirmationRequest, Decision, args_digest
from sandbox.approval.providers import recorded_form
from sandbox.approval.rules import Rule, RuleBook
from sandbox.approval.store import ApprovalStore, CallRecord
from sandbox.approval.store.capabilities import (
    Batching,
    DecidesParked,
    OpensAndParks,
    RunsNow,
)
from sandbox.approval.store.records import DUMP_ENCODER, Dumped
from sandbox.audit import AuditLog
from sandbox.errors import (
    ConfigurationError,
    ConfirmationStateError,
    ConfirmationTimedOutError,
    RuleError,
)

T = TypeVar("T")


@dataclass(slots=True)  # not frozen: made for every request, and frozen is slower
class Park:
    """A request to park: the question, why it is asked, and what a rule must cover."""

    hint: str
    payload: Any
    kind: str
    expires: float | None
    details: dict[str, Any] | None
    edited_from: str | None
    subjects: tuple[tuple[str, ...], ...] | None
    rule_session: str


@dataclass(slots=True)
class Judged:
    """What `ToolRunner.resume` made of a request read back from the store: a decision
    to record (``call``, ``answer``, ``plan``), or a refusal without one."""

    req: ConfirmationRequest
    call: Call | None = None
    answer: Decision | Failure | None = None
    plan: Plan | None = None
    refusal: NotRun | None = None
    refusal_digest: str | None = None
    #: The store refused to record the decision (answered already, expired).
    error: ConfirmationStateError | None = None


class Transitions:
    """The store and the audit trail of one runner, written together: each method is
    one store step, and the events of what that step recorded are written inside it
    (for a store that may wait, on its worker thread: an audit log anchored in that
    store writes to it too, and must not stall the event loop either)."""

    def __init__(self, store: ApprovalStore, audit: AuditLog, rules: RuleBook) -> None:
        self.store = store
        self.audit = audit
        self.rules = rules
        self.step = StoreSteps(store)
        # The store's optional capabilities (store/capabilities.py). A store whose
        # commits cost more than its statements groups a step's operations (SQLite).
        self._batch = store.batch if isinstance(store, Batching) else None
        self._batches = self._batch is not None
        # A SQLite file (or PostgreSQL over a unix socket) runs a step right here when
        # that cannot wait (`run_now`).
        self._now: Callable[[Callable[[], Any]], tuple[bool, Any]] | None = (
            store.run_now if self.step.blocking and isinstance(store, RunsNow) else None)
        # A store that opens a call and parks its request in one operation (PostgreSQL:
        # one round trip instead of two).
        self._open_and_park: Callable[..., CallRecord | tuple[str, float]] | None = (
            store.open_and_park if isinstance(store, OpensAndParks) else None)
        # A store that remembers the requests it parked and records a decision judged
        # on one only while the stored request is still exactly it (PostgreSQL: the
        # read and the decision of `read_and_decide` in one round trip).
        self._decides_parked: DecidesParked | None = (
            store if isinstance(store, DecidesParked) else None)

    async def _in_step(self, body: Callable[[], T]) -> T:
        return body() if not self.step.blocking else await self.step(body)

    async def _atomic(self, body: Callable[[], T]) -> T:
        """One step of several store operations, in one transaction where the store
        batches them: inline for a store that never waits, or one that can run it now
        without waiting (and no audit sink, which may wait on a file lock), else on the
        store's worker thread."""
        if not self.step.blocking:
            if self._batch is None:
                return body()
            with self._batch():
                return body()
        if self._now is not None and not self.audit.enabled:
            done, result = self._now(body)
            if done:
                return result  # type: ignore[no-any-return]
        return await self.step(self._batched(body))

    def _batched(self, body: Callable[[], T]) -> Callable[[], T]:
        """``body`` (several store operations) in one transaction, where the store's
        commits cost more than its statements (`ApprovalStore.batch`)."""
        batch = self._batch
        if batch is None:
            return body

        def batched() -> T:
            with batch():
                return body()

        return batched

    # -- calls -------------------------------------------------------------------------

    def _open(self, call: Call) -> CallRecord | None:
        """Record a new call; the existing record instead when its id is known."""
        return self.store.open_call(call.call_id, call.name, call.digest, call.args,
                                    call.session_id, args_json=call.args_json)

    async def open_and_start(self, call: Call) -> CallRecord | NotRun | None:
        """Open a call that needs no human and claim its start: None when claimed."""
        def step() -> CallRecord | NotRun | None:
            rec = self._open(call)
            if rec is not None:
                return rec
            return self._start(call)

        return step() if not self.step.blocking and not self._batches else (
            await self._atomic(step))

    async def open_and_end(self, call: Call, state: str, result: Outcome,
                           event: str) -> CallRecord | Outcome:
        """Open a call the gate stopped, and end it with ``result``."""
        def step() -> CallRecord | Outcome:
            rec = self._open(call)
            if rec is not None:
                return rec
            return self._end(call, state, result, event)

        return await self._atomic(step)

    async def open_and_park(self, call: Call, park: Park,
                            ) -> CallRecord | tuple[Asked, list[Rule] | None]:
        """Open a call that needs a human, park its request and find the rules that
        approve it."""
        def step() -> CallRecord | tuple[Asked, list[Rule] | None]:
            return self._open_park(call, park)

        return step() if not self.step.blocking and not self._batches else (
            await self._atomic(step))

    async def open_park_decide(
        self, call: Call, park: Park, answer_for: Callable[[list[Rule] | None], Decision],
        plan_for: Callable[[Decision], Plan],
    ) -> CallRecord | tuple[Asked, Decision, Plan, NotRun | None]:
        """Open a call whose answer is known without asking (a fixed answer, or the
        remembered rules that approve it: ``answer_for(rules)``), park its request and
        record that answer's decision, claiming the grant with it: one store step, with
        the same records and events as parking and deciding one after the other."""
        def step() -> CallRecord | tuple[Asked, Decision, Plan, NotRun | None]:
            opened = self._open_park(call, park)
            if isinstance(opened, CallRecord):
                return opened
            asked, rules = opened
            answer = answer_for(rules)
            decided = plan_for(answer)
            try:
                self._record(asked, decided)
            except ConfirmationStateError as exc:
                return asked, answer, decided, self._refusal(call, asked, decided, exc)
            self._recorded(call, asked, decided)
            return asked, answer, decided, None

        return step() if not self.step.blocking and not self._batches else (
            await self._atomic(step))

    async def refused(self, name: str, call_id: str, reason: str,
                      digest: str | None = None, **fields: Any) -> None:
        """A call refused without a store transition: only the trail records it."""
        await self._in_step(lambda: self._refused(name, call_id, reason, digest, **fields))

    def _refused(self, name: str, call_id: str, reason: str, digest: str | None = None,
                 **fields: Any) -> None:
        self.audit.emit("tool.rejected", tool=name, call_id=call_id, digest=digest,
                        reason=reason, **fields)

    async def end(self, call: Call, state: str, result: Outcome, event: str) -> Outcome:
        """End a call that did not run (blocked, failed, rejected, error) with ``result``."""
        return await self._atomic(lambda: self._end(call, state, result, event))

    def _end(self, call: Call, state: str, result: Outcome, event: str) -> Outcome:
        self.store.finish(call.call_id, state, result.to_dict())  # the record's form
        self.audit.emit(event, tool=call.name, call_id=call.call_id, digest=call.digest,
                        error=result.error)
        return result

    async def start(self, call: Call) -> NotRun | None:
        """Claim the call's grant: None when claimed."""
        return await self._atomic(lambda: self._start(call))

    def _start(self, call: Call) -> NotRun | None:
        if self.store.start(call.call_id, call.digest):
            self._started(call)
            return None
        rec = self.store.get_call(call.call_id)
        message = (f"call {call.call_id} cannot start: it is {rec.state}, and a grant is "
                   "used once and only for the exact arguments approved")
        self._refused(call.name, call.call_id, message, call.digest)
        return NotRun(Status.REJECTED, message, call.call_id)

    def _started(self, call: Call) -> None:
        if call.audited:
            self.audit.emit("tool.started", tool=call.name, call_id=call.call_id,
                            digest=call.digest)

    def finish_now(self, call: Call, result: dict[str, Any]) -> bool:
        """`finish` when it can be done right here, without waiting or slicing (a store
        of this process, a short result): whether it was."""
        if self.step.blocking or self._batches or not _short(result):
            return False
        self._finish(call, result, result)
        return True

    async def finish(self, call: Call, result: dict[str, Any]) -> None:
        """Record the end of a call that ran."""
        if self.finish_now(call, result):
            return
        encoded = await dump_sliced(result)

        def step() -> None:
            self._finish(call, result, encoded)

        if not self.step.blocking and not self._batches:
            step()
        else:
            await self._atomic(step)

    def _finish(self, call: Call, result: dict[str, Any], encoded: Any) -> None:
        self.store.finish(call.call_id, "done", encoded)
        if call.audited:
            # A bash run under network="allowlist" also says what its egress proxy
            # let through and refused (result["network"]).
            network = result.get("network")
            extra = {"network": network} if isinstance(network, dict) else {}
            self.audit.emit("tool.finished", tool=call.name, call_id=call.call_id,
                            digest=call.digest, error=result.get("error"), **extra)

    async def in_doubt(self, call: Call, reason: str) -> None:
        """The run was interrupted: its effects are unknown; it is never run again."""
        def step() -> None:
            self.store.finish(call.call_id, "in_doubt", NotRun(
                Status.IN_DOUBT, f"{reason}; effects unknown").to_dict())
            self.audit.emit("tool.in_doubt", tool=call.name, call_id=call.call_id,
                            digest=call.digest, reason=reason)

        await self._in_step(step)

    async def sweep(self) -> list[CallRecord]:
        """Mark the calls of dead workers in doubt; every call in doubt."""
        found: list[CallRecord] = await self.step(self.store.in_doubt)
        return found

    def report_in_doubt(self, records: list[CallRecord]) -> None:
        for rec in records:
            self.audit.emit("tool.in_doubt", tool=rec.tool, call_id=rec.call_id,
                            digest=rec.digest)

    # -- requests ----------------------------------------------------------------------

    async def park(self, call: Call, park: Park) -> tuple[Asked, list[Rule] | None]:
        """Park a request for a call in progress, and find the rules that approve it:
        one store step."""
        return await self._atomic(lambda: self._park(call, park))

    def _open_park(self, call: Call, park: Park,
                   ) -> CallRecord | tuple[Asked, list[Rule] | None]:
        """Open the call and park its request: the existing record if the id is known."""
        fused = self._open_and_park
        if fused is None:
            rec = self._open(call)
            if rec is not None:
                return rec
            return self._park(call, park)
        opened = fused(
            call_id=call.call_id, tool=call.name, digest=call.digest, args=call.args,
            session_id=call.session_id, args_json=call.args_json, hint=park.hint,
            payload=park.payload, kind=park.kind, expires_at=park.expires,
            details=park.details, edited_from=park.edited_from)
        if isinstance(opened, CallRecord):
            return opened
        return self._parked(call, park, *opened)

    def _park(self, call: Call, park: Park) -> tuple[Asked, list[Rule] | None]:
        rid, created = self.store.park(
            call_id=call.call_id, tool=call.name, args=call.args, digest=call.digest,
            hint=park.hint, payload=park.payload, kind=park.kind, expires_at=park.expires,
            details=park.details, edited_from=park.edited_from, session_id=call.session_id,
            args_json=call.args_json)
        return self._parked(call, park, rid, created)

    def _parked(self, call: Call, park: Park, rid: str, created: float,
                ) -> tuple[Asked, list[Rule] | None]:
        # A tool asking from inside wants a human's payload, never a rule's answer.
        rules = None if park.kind == "tool" else self.rules.match(
            call.name, call.args, subjects=park.subjects, session_id=park.rule_session)
        if call.audited:
            self.audit.emit("tool.requested", tool=call.name, call_id=call.call_id,
                            digest=call.digest, args=call.args, confirmation_id=rid,
                            hint=park.hint, kind=park.kind, details=park.details or None)
        return Asked(rid, created, call, park.hint, park.payload, park.kind, park.expires,
                     park.details, park.edited_from), rules

    async def decide(self, call: Call, req: Request, plan: Plan) -> NotRun | None:
        """Record the request's one decision (``plan.result`` as the call's outcome when
        it ends the call; ``plan.start`` also claims the grant in the same step). None,
        or why it was refused: the request had been answered already, or expired."""
        def step() -> NotRun | None:
            try:
                self._record(req, plan)
            except ConfirmationStateError as exc:
                return self._refusal(call, req, plan, exc)
            self._recorded(call, req, plan)
            return None

        return step() if not self.step.blocking and not self._batches else (
            await self._atomic(step))

    async def read_and_decide(self, confirmation_id: str, *, with_answer: bool,
                              judge: Callable[[ConfirmationRequest, dict[str, Any] | None],
                                              Judged]) -> Judged:
        """Read a request (and the answer another channel recorded for it), let ``judge``
        make the decision, and record it: one store step. ``judge`` must not touch the
        store or the audit; what it refused is audited here."""
        def step() -> Judged:
            if self._decides_parked is not None and not with_answer:
                fast = self._decide_parked(confirmation_id, judge)
                if fast is not None:
                    return fast
            req = self.store.get_request(confirmation_id)
            recorded = self.store.get_answer(confirmation_id) if with_answer else None
            judged = judge(req, recorded)
            if judged.refusal is not None:
                self._refused(req.tool, req.call_id, judged.refusal.error,
                              judged.refusal_digest, confirmation_id=req.id)
            elif judged.call is not None and judged.plan is not None:
                try:
                    self._record(req, judged.plan)
                except ConfirmationStateError as exc:
                    judged.refusal = self._refusal(judged.call, req, judged.plan, exc)
                else:
                    self._recorded(judged.call, req, judged.plan)
            return judged

        return step() if not self.step.blocking and not self._batches else (
            await self._atomic(step))

    def _decide_parked(self, confirmation_id: str,
                       judge: Callable[[ConfirmationRequest, dict[str, Any] | None], Judged],
                       ) -> Judged | None:
        """`read_and_decide`'s common case without reading the request back: judged on
        the request as this store parked it, and recorded only if the stored one is
        still exactly that (and pending). None, with nothing written or audited, for
        anything else: the caller then reads, judges and records as usual."""
        assert self._decides_parked is not None
        req = self._decides_parked.parked_request(confirmation_id)
        if req is None:
            return None
        try:
            judged = judge(req, None)
        except Exception:  # judged again on the stored request, which raises as it may
            return None
        plan = judged.plan
        if judged.refusal is not None or judged.call is None or plan is None:
            return None
        decision = plan.decision
        try:
            done = self._decides_parked.decide_parked(
                req.id, status=plan.status, outcome=plan.outcome, reason=plan.reason,
                decided_by=decision.decided_by if decision is not None else None,
                channel=(decision.channel if decision is not None else None) or plan.channel,
                decision=None if decision is None else recorded_form(decision),
                call_result=_recorded_result(plan), start=plan.start)
        except ConfirmationStateError as exc:  # the grant could not be claimed
            judged.refusal = self._refusal(judged.call, req, plan, exc)
            return judged
        if not done:
            return None
        self._recorded(judged.call, req, plan)
        return judged

    def _record(self, req: Request, plan: Plan) -> None:
        """Record ``plan`` as the request's one decision (raises if it has one already,
        or expired)."""
        decision = plan.decision
        self.store.decide(
            req.id, status=plan.status, outcome=plan.outcome, reason=plan.reason,
            decided_by=decision.decided_by if decision is not None else None,
            channel=(decision.channel if decision is not None else None) or plan.channel,
            decision=None if decision is None else recorded_form(decision),
            call_result=_recorded_result(plan), start=plan.start)

    def _refusal(self, call: Call, req: Request, plan: Plan,
                 exc: ConfirmationStateError) -> NotRun:
        if isinstance(exc, ConfirmationTimedOutError):
            decision = plan.decision
            self.audit.emit("tool.timed_out", tool=call.name, call_id=req.call_id,
                            digest=req.digest, confirmation_id=req.id, reason=str(exc),
                            answered_by=decision.decided_by if decision else None,
                            channel=(decision.channel if decision else None) or plan.channel)
            return NotRun(Status.TIMED_OUT, f"Confirmation timed out: {exc}. The tool was "
                          "not run.", req.call_id)
        self._refused(call.name, req.call_id, str(exc), req.digest, confirmation_id=req.id)
        return NotRun(Status.REJECTED, f"{exc}. Nothing was run.", req.call_id)

    def _recorded(self, call: Call, req: Request, plan: Plan) -> None:
        if call.audited:
            decision = plan.decision
            self._decided(call, req, plan.status, plan.reason, decision,
                          decision.decided_by if decision is not None else None,
                          (decision.channel if decision is not None else None)
                          or plan.channel)
        if plan.start:
            self._started(call)

    def _decided(self, call: Call, req: Request, status: str, reason: str | None,
                 decision: Decision | None, decided_by: str | None,
                 channel: str | None) -> None:
        tool = call.tool
        edited = decision.args if decision is not None else None
        shown_args = self._redacted(req.tool, req.args)
        # A wait that ran out is its own step in the trail, never mistaken for a decision.
        event = "tool.timed_out" if status == "timed_out" else "tool.decided"
        self.audit.emit(event, tool=tool.name, call_id=req.call_id, digest=req.digest,
                        confirmation_id=req.id, decision=status, reason=reason,
                        decided_by=decided_by, channel=channel,
                        scope=decision.scope if decision else None,
                        shown=_shown(tool, public(req), shown_args),
                        edited_args=self._redacted(req.tool, edited) if edited else None,
                        edit=_args_diff(shown_args, self._redacted(req.tool, edited),
                                        args_digest(req.tool, edited))
                        if edited is not None else None)

    async def still_pending(self, call: Call, req: Request, provider: Any) -> None:
        """The provider's wait ran out with ``on_timeout="pending"``: the request stays."""
        await self._in_step(lambda: self.audit.emit(
            "tool.timed_out", tool=call.name, call_id=call.call_id, digest=call.digest,
            confirmation_id=req.id, still_pending=True,
            channel=getattr(provider, "name", None)))

    async def grant(self, call: Call) -> None:
        """An edited call (``call`` holds the edited arguments) is approved as edited."""
        await self.step(self.store.grant, call.call_id, call.digest, call.args)

    # -- rules -------------------------------------------------------------------------

    async def remember(self, call: Call, req: Request, answer: Decision,
                       subjects: tuple[tuple[str, ...], ...] | None,
                       rule_session: str) -> list[Rule]:
        """Save the rules an approval with scope session/always asks for; a rule that
        does not fit the call is refused (the approval itself still stands)."""
        def step() -> list[Rule]:
            try:
                made = self.rules.from_decision(public(req), answer, subjects=subjects,
                                                session_id=req.session_id or rule_session)
            except (RuleError, ConfigurationError) as exc:
                self.audit.emit("rule.refused", tool=call.name, call_id=req.call_id,
                                digest=req.digest, confirmation_id=req.id, reason=str(exc))
                return []
            for rule in made:
                self.audit.emit("rule.created", tool=call.name, call_id=req.call_id,
                                digest=req.digest, confirmation_id=req.id, rule_id=rule.id,
                                rule=rule.describe(), scope=rule.scope,
                                expires_at=rule.expires_at.isoformat(),
                                decided_by=answer.decided_by, channel=answer.channel)
            return made

        return await self._atomic(step)

    # -- reading -----------------------------------------------------------------------

    async def count_requests(self, call: Call) -> int:
        found: int = await self.step(self.store.count_requests, call.call_id)
        return found

    def _redacted(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        redact = self.audit.redact
        return redact(tool, args) if redact is not None else args


def _shown(tool: Any, request: ConfirmationRequest, args: dict[str, Any]) -> dict[str, Any]:
    """What the human was shown, with the tool's own rendering of its arguments."""
    try:
        rendered = tool.render_args(args)
    except Exception:  # a rendering that fails falls back to the arguments as JSON
        rendered = None
    return shown(request, args, rendered)


def _args_diff(old: dict[str, Any], new: dict[str, Any], new_digest: str) -> dict[str, Any]:
    """What an edit changed, key by key, and the digest of the edited call."""
    return {
        "changed": {k: {"old": old[k], "new": new[k]} for k in sorted(old.keys() & new.keys())
                    if old[k] != new[k]},
        "added": {k: new[k] for k in sorted(new.keys() - old.keys())},
        "removed": {k: old[k] for k in sorted(old.keys() - new.keys())},
        "new_digest": new_digest,
    }


# JSON-encoding a result is C work that holds the GIL (a worker thread would not free
# the event loop): two megabytes of a command's invalid UTF-8 output took ~30 ms of CPU
# in one step. A result whose strings are this long is encoded a slice per step.
_SLICE_CHARS = 128 << 10


def _short(result: Any) -> bool:
    """Whether `dump_sliced` would return ``result`` as it is (no long strings)."""
    if type(result) is not dict:
        return True
    chars = 0
    for value in result.values():  # a loop, not sum(genexpr): this runs on every call
        if type(value) is str:
            chars += len(value)
    return chars <= _SLICE_CHARS


async def dump_sliced(result: Any) -> Any:
    """``result``, or for a dict holding long strings, the `Dumped` text the store's
    `dump` would make of it (the same text), built _SLICE_CHARS characters per loop
    step."""
    if _short(result):
        return result
    if not all(type(k) is str for k in result):
        return result
    parts: list[str] = ["{"]  # joined once at the end: one copy of the text
    for key, value in result.items():
        if len(parts) > 1:
            parts.append(", ")
        parts += (encode_basestring(key), ": ")
        if type(value) is str and len(value) > _SLICE_CHARS:
            parts.append('"')
            for start in range(0, len(value), _SLICE_CHARS):
                parts.append(encode_basestring(value[start:start + _SLICE_CHARS])[1:-1])
                await anyio.lowlevel.checkpoint()
            parts.append('"')
        else:
            parts.append(DUMP_ENCODER.encode(value))
    parts.append("}")
    return Dumped("".join(parts))


def _recorded_result(plan: Plan) -> dict[str, Any] | None:
    """The call's outcome as the store records it, when the decision ends the call."""
    return None if plan.result is None else plan.result.to_dict()
