"""The runner's part for agent frameworks: foresee a call, park it, answer it from outside.

`FrameworkHooks` is a part of `ToolRunner` (sandbox/approval/runner.py), moved here as it
was: `would_ask` (the verdict, recording nothing), `park` (record the question without
running), `answer` / `deny` (a framework's own approval or denial applied to the stored
request) and `find`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.approval.gate import check as gate
from sandbox.approval.gate.call import Call, new_call_id
from sandbox.approval.gate.execute import Execution
from sandbox.approval.gate.journal import Park, Transitions
from sandbox.approval.gate.plan import Plan
from sandbox.approval.gate.results import Awaiting, NotRun, Outcome, Status
from sandbox.approval.gate.verdict import CallVerdict
from sandbox.approval.models import ConfirmationRequest, Decision, canonical_json, digest_of
from sandbox.approval.providers import parse_answer
from sandbox.approval.rules import RuleBook
from sandbox.approval.store import ApprovalStore, CallRecord
from sandbox.audit import AuditLog
from sandbox.errors import (
    ConfigurationError,
    ConfirmationStateError,
    UnknownCallError,
    UnknownConfirmationError,
)
from sandbox.tools.base import BaseTool, ToolArgumentError, confirmation_hint_text
from sandbox.tools.context import ToolConfirmation, ToolContext


class FrameworkHooks:
    """`ToolRunner`'s methods for agent frameworks (see the module's docstring)."""

    # What these methods use of the runner (`ToolRunner` sets and defines them).
    store: ApprovalStore
    audit: AuditLog
    rules: RuleBook
    session_id: str | None
    rule_session: str
    approval_ttl: float | None
    max_args_bytes: int
    _tools: dict[str, BaseTool]
    _transitions: Transitions
    _execution: Execution
    _tool: Callable[[str], BaseTool]
    _context: Callable[[str], ToolContext]
    _plan: Callable[[Decision], Plan]
    resume_outcome: Callable[..., Awaitable[Outcome]]

    async def would_ask(self, name: str, args: dict[str, Any] | None = None,
                        call_id: str | None = None) -> CallVerdict:
        """What `call` would do with this call now, without recording or running anything.

        The verdict (`CallVerdict`) is ``ask`` exactly when `call` would park a question
        for a human: the arguments are validated as `call` validates them, the tool's
        hard refusal and its confirmation predicate are asked, and remembered rules are
        matched (without counting a use). With ``call_id``, the id's history counts too:
        ``pending`` (already waiting, with any answer another channel recorded),
        ``replay`` (decided or done: `call` answers from the record), or ``refuse`` (used
        for other arguments). Raises `UnknownToolError` for a tool this runner lacks.

        This is what a framework's own approval hook asks (``needs_approval``, an
        ``interrupt_on`` predicate): it never runs the tool, so a guardrail that rejects
        the call afterwards still stops it.
        """
        tool = self._tool(name)
        try:
            checked, text = self._validated(tool, name, args)
        except (ToolArgumentError, ConfigurationError) as exc:
            return CallVerdict("refuse", reason=_message(exc), state="rejected")
        step = self._transitions.step
        if call_id is not None:
            rec = await self._record(call_id)
            if rec is not None and rec.state != "abandoned":
                if rec.session_id != self.session_id:
                    return CallVerdict("refuse", state="rejected", reason=(
                        f"call id {call_id!r} was already used in another session; every "
                        "new call needs a new call id. Nothing was run."))
                if rec.tool != name or rec.digest != digest_of(name, text):
                    return CallVerdict("refuse", state="rejected", reason=(
                        f"call id {call_id!r} was already used for {rec.tool} with other "
                        "arguments; every new call needs a new call id. Nothing was run."))
                if rec.state == "awaiting" and rec.request_id:
                    req = await step(self.store.get_request, rec.request_id)
                    if req.status == "pending":
                        recorded = await step(self.store.get_answer, req.id)
                        return CallVerdict("pending", hint=req.hint, confirmation_id=req.id,
                                           answer=recorded)
                return CallVerdict("replay", state=rec.state)
        verdict = await gate.check(tool, checked, self._context(call_id or "would-ask"))
        if verdict is gate.PROCEED:
            return CallVerdict("run")
        if isinstance(verdict, gate.Stop):
            return CallVerdict("refuse", reason=verdict.result.error or "",
                               state=verdict.state)
        assert isinstance(verdict, gate.Ask)
        subjects = gate.rule_subjects(tool, checked)
        rules = await step(lambda: self.rules.match(
            name, checked, subjects=subjects, session_id=self.rule_session, record=False))
        if rules:
            return CallVerdict("run", rules=tuple(rule.id for rule in rules))
        return CallVerdict("ask", hint=verdict.hint)

    async def park(self, name: str, args: dict[str, Any] | None = None,
                   call_id: str | None = None) -> dict[str, Any] | None:
        """Record the call and park its question, if the gate would ask one, without
        consulting the provider and without running anything.

        For a framework that asks for approval in a hook before the tool runs (OpenAI
        Agents' ``needs_approval``): the question is in the store at once, so the web
        page, the CLI and the queue see it and may answer it. Returns the
        ``awaiting_confirmation`` dict (also when this call id already waits), or None
        when no human is needed or the call id is decided already: `call` then runs the
        call, refuses it, or answers it from its record.
        """
        outcome = await self._park(name, args, call_id)
        return None if outcome is None else outcome.to_dict()

    async def _park(self, name: str, args: dict[str, Any] | None,
                    call_id: str | None) -> Outcome | None:
        verdict = await self.would_ask(name, args, call_id)
        if verdict.action == "pending":
            assert verdict.confirmation_id is not None and call_id is not None
            return Awaiting(verdict.confirmation_id, call_id, name, verdict.hint or "")
        if verdict.action != "ask":
            return None
        tool = self._tool(name)
        checked, text = self._validated(tool, name, args)
        call = Call(tool, call_id or new_call_id(), checked, text, digest_of(name, text),
                    self.session_id, self.audit.enabled)
        subjects = gate.rule_subjects(tool, checked)
        park = Park(verdict.hint or "", None, gate.ask_kind(tool),
                    time.time() + self.approval_ttl if self.approval_ttl else None,
                    gate.request_details(tool, checked, subjects), None, subjects,
                    self.rule_session)
        t = self._transitions
        try:
            parked = await t.open_and_park(call, park)
        except ConfirmationStateError as exc:  # the store's bound on pending requests
            return await t.end(call, "error", NotRun(Status.ERROR, str(exc)), "tool.failed")
        if isinstance(parked, CallRecord):  # another caller recorded this id meanwhile
            return await self._park(name, args, call_id) if call_id else None
        req, _rules = parked  # a rule made meanwhile: the human is asked all the same
        return Awaiting(req.id, req.call_id, req.tool, req.hint)

    async def answer(
        self, ref: str,
        decision: Decision | ToolConfirmation | dict[str, Any] | bool | None = None, *,
        args: dict[str, Any] | None = None, tool: str | None = None,
        decided_by: str | None = None, channel: str = "framework",
    ) -> dict[str, Any]:
        """Answer a call from outside this runner's provider, by its call id (or its
        confirmation id): a framework's own approval (Pydantic AI's
        ``DeferredToolResults``, OpenAI's ``RunState.approve/reject``, a LangGraph
        resume value) applied to the stored request.

        An approval runs the call once (`resume`); ``Decision.edit(new_args)`` approves
        the edited call (validated, hard refusals checked again, run once); a denial
        resolves the request denied, audited, and the call id answers every later `call`
        with that denial. ``decision=None`` applies the answer another channel recorded.
        ``args``, when given, must be the arguments the request was made for (the
        framework's copy of the call): other arguments are refused and nothing runs.

        A call this gate never asked about runs nothing: an approval planted for it is
        refused (``rejected``). A denial for it is recorded when ``tool`` and ``args``
        name the call, so that nothing can run it under that id afterwards. A request
        decided already (by the web page, a provider, an earlier answer) is not decided
        again: an approval gets the recorded outcome (the tool never runs twice), a
        denial gets ``rejected`` saying what was recorded.
        """
        outcome = await self.answer_outcome(ref, decision, args=args, tool=tool,
                                            decided_by=decided_by, channel=channel)
        return outcome.to_dict()  # the result leaves for the model here

    async def answer_outcome(
        self, ref: str,
        decision: Decision | ToolConfirmation | dict[str, Any] | bool | None = None, *,
        args: dict[str, Any] | None = None, tool: str | None = None,
        decided_by: str | None = None, channel: str = "framework",
    ) -> Outcome:
        """`answer`, returning the typed `Outcome`."""
        given = None if decision is None else parse_answer(decision, channel=channel)
        if given is not None and decided_by is not None and given.decided_by is None:
            given = given.model_copy(update={"decided_by": decided_by})
        rec, req = await self.find(ref)
        t = self._transitions
        if rec is not None and rec.session_id != self.session_id:
            message = (f"call {rec.call_id} belongs to another session than this runner's "
                       f"({self.session_id!r}); nothing was run or recorded. Answer it from a "
                       "runner of that session")
            await t.refused(rec.tool, rec.call_id, message, rec.digest)
            return NotRun(Status.REJECTED, message, rec.call_id)
        if rec is None:
            if given is not None and given.outcome == "deny" and tool is not None \
                    and args is not None:
                return await self._deny_unasked(ref, tool, args, given)
            message = (f"no call {ref!r} was asked about through this gate (an approval for "
                       "a call it never asked, or one from before a restart of an in-memory "
                       "store); nothing was run")
            await t.refused(tool or "?", ref, message)
            return NotRun(Status.REJECTED, message, ref)
        if args is not None and (given is None or given.outcome != "deny"):
            sent = _digest_as_taken(self._tool(rec.tool), args)
            if sent != rec.digest:
                message = (f"the arguments sent with the answer for call {rec.call_id} "
                           "differ from the ones it was asked about; the tool was not run. "
                           "To change them, answer with Decision.edit(args)")
                await t.refused(rec.tool, rec.call_id, message, sent)
                return NotRun(Status.REJECTED, message, rec.call_id)
        if req is not None and req.status == "pending" and rec.state == "awaiting":
            return await self.resume_outcome(req.id, given, decided_by=decided_by,
                                             channel=channel)
        # Decided or done already: never decided twice, never run twice.
        if given is not None and given.outcome == "deny":
            message = (f"call {rec.call_id} was already {rec.state} when this denial "
                       "arrived; the denial changed nothing")
            await t.refused(rec.tool, rec.call_id, message, rec.digest)
            return NotRun(Status.REJECTED, message, rec.call_id)
        call = Call(self._tool(rec.tool), rec.call_id, rec.args, canonical_json(rec.args),
                    rec.digest, self.session_id, self.audit.enabled)
        return await self._execution.replay(rec, call)

    async def deny(self, ref: str, reason: str = "", *, tool: str | None = None,
                   args: dict[str, Any] | None = None, decided_by: str | None = None,
                   channel: str = "framework") -> dict[str, Any]:
        """Deny a call (by call id or confirmation id) with ``reason`` for the model:
        `answer` with ``Decision.deny(reason)``. For a denial a framework made on its
        own side (Pydantic AI's ``ToolDenied``, OpenAI's ``RunState.reject``), which
        never reaches a tool wrapper: the stored request is resolved denied at once
        (not left to expire), audited, and the call id never runs afterwards."""
        return await self.answer(ref, Decision.deny(reason or "denied", channel=channel),
                                 tool=tool, args=args, decided_by=decided_by,
                                 channel=channel)

    async def _record(self, call_id: str) -> CallRecord | None:
        try:
            rec: CallRecord = await self._transitions.step(self.store.get_call, call_id)
        except UnknownCallError:
            return None
        return rec

    async def find(self, ref: str) -> tuple[CallRecord | None, ConfirmationRequest | None]:
        """The call ``ref`` names (a call id, else a confirmation id) and its latest
        request, read from the store (either may be None). Reads only: an adapter uses it
        to see whether a call still waits before it applies a framework's answer."""
        step = self._transitions.step
        if not isinstance(ref, str) or not ref:
            raise ConfigurationError(f"a call id or confirmation id is a non-empty string, "
                                     f"got {type(ref).__name__}")
        rec = await self._record(ref)
        if rec is None:
            try:
                req: ConfirmationRequest = await step(self.store.get_request, ref)
            except (UnknownConfirmationError, LookupError):
                return None, None
            return await self._record(req.call_id), req
        if rec.request_id is None:
            return rec, None
        return rec, await step(self.store.get_request, rec.request_id)

    async def _deny_unasked(self, call_id: str, name: str, args: dict[str, Any],
                            answer: Decision) -> Outcome:
        """Record a denial for a call the gate never asked about: the call and a request
        decided denied in one store step (the same records and events as a request
        denied), so the id is spent."""
        tool = self._tool(name)
        try:
            checked, text = self._validated(tool, name, args)
        except (ToolArgumentError, ConfigurationError):
            checked = args if isinstance(args, dict) else {}
            text = canonical_json(checked)
        call = Call(tool, call_id, checked, text, digest_of(name, text), self.session_id,
                    self.audit.enabled)
        hint = confirmation_hint_text(name)
        park = Park(hint, None, gate.ask_kind(tool), None, None, None, None,
                    self.rule_session)
        decided = await self._transitions.open_park_decide(
            call, park, lambda _rules: answer, self._plan)
        if isinstance(decided, CallRecord):  # recorded meanwhile: answer that record
            return await self.answer_outcome(call_id, answer,
                                             channel=answer.channel or "framework")
        _asked, _answer, made, refusal = decided
        if refusal is not None:
            return refusal
        assert made.result is not None
        return made.result

    def _validated(self, tool: BaseTool, name: str,
                   args: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
        """``args`` as `call` takes them: validated, and their canonical JSON (bounded)."""
        checked = tool.validate_args({} if args is None else args)
        text = canonical_json(checked)
        if len(text) > self.max_args_bytes:
            raise ToolArgumentError(
                f"the arguments to {name} are {len(text)} characters of JSON, over this "
                f"runner's max_args_bytes={self.max_args_bytes}; send less (for bulk "
                "data, pass a file name or a reference instead)"
            )
        return checked, text


def _message(exc: Exception) -> str:
    return exc.message if isinstance(exc, ToolArgumentError) else str(exc)


def _digest_as_taken(tool: BaseTool, args: dict[str, Any]) -> str:
    """The digest of ``args`` as the tool would take them (as sent when they do not fit)."""
    try:
        args = tool.validate_args(args)
    except ToolArgumentError:
        pass  # compared as sent: they differ from the request's, and are refused
    try:
        return digest_of(tool.name, canonical_json(args))
    except ConfigurationError:
        return "not JSON"
