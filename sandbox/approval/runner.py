"""`ToolRunner`: the gate every tool call passes through, a facade over small parts.

Order of a call: validate the arguments (serialised and digested once: `call.Call`) →
the gate's verdict (`gate.check`: the tool's own refusal check, then its confirmation
predicate) → record the call together with its first step, in one store step
(`transitions`: started, ended, or parked with the remembered rules that may approve
it; a call id used before is answered from its record and never run again:
`execute.Execution.replay`) → a rule's answer, a fixed answer, the provider within its
timeout (`consult`), or wait in the store → the one decision (`plan`) and the
single-use grant (`grants`) → claim, run, finish (`execute`). `resume` reads a request
and records its decision in one store step. Every store step and the audit event it
emits live in `transitions`; the results the gate makes itself are typed (`results`)
and become the contract's dicts at this boundary. A tool may also ask from inside
(`tool_context.request_confirmation`); it is then run again, with
`tool_context.tool_confirmation` set, once the answer is an approval.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import anyio

from sandbox.approval.gate import check as gate
from sandbox.approval.gate.call import Call, Request, expired
from sandbox.approval.gate.consult import Failure, consult
from sandbox.approval.gate.execute import AskedInside, Execution
from sandbox.approval.gate.frameworks import FrameworkHooks, _digest_as_taken
from sandbox.approval.gate.grants import Ended, Grants, Next, approval
from sandbox.approval.gate.journal import Judged, Park, Transitions
from sandbox.approval.gate.plan import Plan, plan
from sandbox.approval.gate.results import Awaiting, NotRun, Outcome, Ran, Replayed, Status
from sandbox.approval.models import ConfirmationRequest, Decision, canonical_json, digest_of
from sandbox.approval.network import NETWORK_TOOL, NetworkAccessTool
from sandbox.approval.providers import (
    ConfirmationProvider,
    fixed_answer,
    parse_answer,
    recorded_form,
)
from sandbox.approval.rules import RuleBook
from sandbox.approval.store import ApprovalStore, CallRecord, new_id, open_store
from sandbox.approval.store.capabilities import DecidesAtOnce
from sandbox.audit import AuditLog, Redactor, redact_secrets
from sandbox.errors import (
    ConfigurationError,
    ConfirmationStateError,
    UnknownToolError,
)
from sandbox.text import (
    is_text,
    lone_surrogate,
    not_text_message,
    printable,
    surrogates_as_text,
)
from sandbox.tools.base import BaseTool, ToolArgumentError
from sandbox.tools.context import OUTER_CALL, ToolConfirmation, ToolContext

#: Longest call id accepted (ADK's and OpenAI's ids are a few dozen characters).
MAX_CALL_ID = 256


class ToolRunner(FrameworkHooks):
    """Runs tools behind the approval gate.

    ``provider`` answers confirmation requests as they arise; with no provider, a request
    waits in the store and the call returns ``{"status": "awaiting_confirmation",
    "confirmation_id": ...}`` until `resume` is called, from this or any other process
    sharing ``store_path``.

    The store: ``store_path`` opens a SQLite file (shared by processes, survives
    restarts); ``store`` takes any `ApprovalStore`; with neither, a `MemoryApprovalStore`
    (this process only, forgotten at exit, the fastest: same guarantees within the
    process). Pass ``store=ApprovalStore(":memory:")`` for SQLite in memory.
    """

    def __init__(
        self,
        tools: Iterable[BaseTool],
        *,
        provider: ConfirmationProvider | None = None,
        store: ApprovalStore | str | None = None,
        store_path: str | None = None,
        audit: AuditLog | None = None,
        audit_path: str | None = None,
        redact: Redactor | None = redact_secrets,
        approval_ttl: float | None = None,
        max_rounds: int = 4,
        session_id: str | None = None,
        rules: RuleBook | None = None,
        max_args_bytes: int = 1 << 20,
        _siblings: dict[str | None, ToolRunner] | None = None,
    ) -> None:
        self._tools: dict[str, BaseTool] = {}
        # The runners of other sessions made by `for_session`, shared by all of them.
        self._siblings: dict[str | None, ToolRunner] = (
            {} if _siblings is None else _siblings)
        if isinstance(tools, BaseTool) or callable(tools) or isinstance(tools, (str, bytes)):
            raise ConfigurationError(
                f"ToolRunner(tools=...) takes a list of tools, got one "
                f"{type(tools).__name__}; write ToolRunner(tools=[{_label(tools)}])"
            )
        try:
            tools = list(tools)
        except TypeError:
            raise ConfigurationError(
                f"ToolRunner(tools=...) takes a list of tools, got {type(tools).__name__}"
            ) from None
        for tool in tools:
            if not isinstance(tool, BaseTool):
                raise ConfigurationError(
                    f"ToolRunner takes BaseTool instances; wrap plain functions as "
                    f"FunctionTool({getattr(tool, '__name__', tool)!r})"
                )
            if tool.name in self._tools:
                raise ConfigurationError(
                    f"two tools are named {tool.name!r}; give one of them another name"
                )
            self._tools[tool.name] = tool
        if store is not None and store_path is not None:
            raise ConfigurationError("pass either store or store_path, not both")
        if provider is not None and not isinstance(provider, ConfirmationProvider):
            raise ConfigurationError(
                f"{type(provider).__name__} is not a ConfirmationProvider: it needs "
                "name, timeout, on_timeout and an async confirm(request) method"
            )
        if approval_ttl is not None and approval_ttl <= 0:
            raise ConfigurationError(
                f"approval_ttl must be a positive number of seconds or None, got {approval_ttl}"
            )
        if audit is not None and audit_path is not None:
            raise ConfigurationError("pass either audit or audit_path, not both")
        if isinstance(store, str):  # a reference: a SQLite path or a postgresql:// URL
            store, store_path = None, store
        self.store = store if store is not None else open_store(store_path)
        self.provider = provider
        # A log written here is anchored in the store: its head (count, last hash) lets
        # `verify_audit(path, anchor=store)` see records cut off its end.
        self.audit = audit if audit is not None else AuditLog(audit_path, redact=redact,
                                                              anchor=self.store)
        self.approval_ttl = approval_ttl
        self.max_rounds = max_rounds
        if max_args_bytes < 1:
            raise ConfigurationError(f"max_args_bytes must be positive, got {max_args_bytes}")
        # Arguments come from a model and end up in the store, the audit and a human's
        # screen: bound them (and call ids) like every other input.
        self.max_args_bytes = max_args_bytes
        if session_id is not None and (not is_text(session_id) or "\x00" in session_id):
            raise ConfigurationError(not_text_message(
                "session_id", lone_surrogate(session_id, "session_id")
                or "session_id: a NUL character"))
        self.session_id = session_id
        # Remembered decisions ("approve for this session", "always"): in the store's
        # file. A runner without a session id is its own session.
        if rules is not None and rules.store is not self.store:
            raise ConfigurationError("rules must be a RuleBook over this runner's store")
        self.rules = rules if rules is not None else RuleBook(self.store)
        self.rule_session = session_id or new_id("session")
        # The parts behind this facade (see the module's docstring).
        self._transitions = Transitions(self.store, self.audit, self.rules)
        self._grants = Grants(self._transitions, channel=getattr(provider, "name", None),
                              rule_session=self.rule_session)
        self._execution = Execution(self._transitions)
        self._network_tool: NetworkAccessTool | None = None
        self._fixed_plan_of: tuple[Decision, str | None, Plan,
                                   str | dict[str, Any]] | None = None
        # A store in this process that records an answer known before asking as one
        # step (`MemoryApprovalStore.open_decided`): the fast path of `_decided_at_once`.
        self._open_decided: Callable[..., str | None] | None = (
            None if self.store.blocking else _fused_steps(self.store))
        # The class's steps it stands for, checked again at each call (`_unpatched`).
        self._steps = tuple(getattr(type(self.store), step, None) for step in _STEPS)
        if self.store.blocking:  # a store shared with other processes: report their dead
            self._transitions.report_in_doubt(self.store.in_doubt())

    # -- public API ------------------------------------------------------------------

    @property
    def tools(self) -> dict[str, BaseTool]:
        return dict(self._tools)

    async def call(
        self, name: str, args: dict[str, Any] | None = None, call_id: str | None = None
    ) -> dict[str, Any]:
        """Run tool ``name`` with ``args`` under the gate; return its result dict.

        A call id identifies one call forever: calling again with the same id and the
        same arguments returns the recorded outcome (``"replayed": True``) and never runs
        the tool again; with other arguments it raises `DuplicateCallError`.
        """
        outcome = await self._call(self._tool(name), name, args, call_id)
        return outcome.to_dict()  # the result leaves for the model here

    async def call_outcome(self, name: str, args: dict[str, Any] | None = None,
                           call_id: str | None = None) -> Outcome:
        """`call`, returning the typed `Outcome` (for an adapter that needs the tool's
        own return value, not the contract's dict: `Ran.value`)."""
        return await self._call(self._tool(name), name, args, call_id)

    async def _call(self, tool: BaseTool, name: str, args: dict[str, Any] | None,
                    call_id: str | None) -> Outcome:  # fmt: skip
        call_id = call_id or new_id("call")
        if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_CALL_ID:
            raise ConfigurationError(
                f"call_id must be a non-empty string of at most {MAX_CALL_ID} characters, "
                f"got {type(call_id).__name__} of length {len(str(call_id))}"
            )
        if not (call_id.isascii() or is_text(call_id)) or "\x00" in call_id:
            raise ConfigurationError(not_text_message(
                "call_id", lone_surrogate(call_id, "call_id") or "call_id: a NUL character"))
        try:
            checked = tool.validate_args({} if args is None else args)
            text = canonical_json(checked)  # serialised once: digest, record and request
            if "\\ud" in text:
                # canonical_json escaped a lone surrogate (or a value holds a backslash
                # and "ud": lone_surrogate tells them apart, off the hot path).
                found = lone_surrogate(checked, "args")
                if found:
                    raise ToolArgumentError(not_text_message(f"an argument to {name}", found))
            if len(text) > self.max_args_bytes:
                raise ToolArgumentError(
                    f"the arguments to {name} are {len(text)} characters of JSON, over this "
                    f"runner's max_args_bytes={self.max_args_bytes}; send less (for bulk "
                    "data, pass a file name or a reference instead)"
                )
        except (ToolArgumentError, ConfigurationError) as exc:
            message = exc.message if isinstance(exc, ToolArgumentError) else str(exc)
            await self._transitions.refused(name, call_id, message)
            return NotRun(Status.ERROR, message)
        call = Call(tool, call_id, checked, text, digest_of(name, text), self.session_id,
                    self.audit.enabled)
        # The gate's verdict first, then the call is recorded together with its first
        # step (started, ended, or parked): one store step. A call id used before is
        # answered from its record, whatever the verdict was this time.
        ctx = self._context(call_id)
        verdict = gate.known(tool)
        if verdict is None:
            verdict = await gate.check(tool, checked, ctx)
        t = self._transitions
        if verdict is gate.PROCEED:
            opened = await t.open_and_start(call)
            if opened is None:
                return await self._run(call, None, ctx, round_=0, claimed=True)
            if isinstance(opened, NotRun):
                return opened
            return await self._execution.replay(opened, call)
        if isinstance(verdict, gate.Stop):
            ended = await t.open_and_end(call, verdict.state, verdict.result, verdict.event)
            if not isinstance(ended, CallRecord):
                return ended
            return await self._execution.replay(ended, call)
        assert isinstance(verdict, gate.Ask)
        if self._open_decided is not None and self.provider is not None and not call.audited \
                and _unpatched(self.store, self._steps):
            fixed = fixed_answer(self.provider)
            if fixed is not None:
                confirmation = self._decided_at_once(call, verdict, fixed)
                if confirmation is not None:
                    ran = await self._execution.run(call, confirmation, ctx, claimed=True)
                    if not isinstance(ran, AskedInside):
                        return ran
                    return await self._ask(call, ctx, hint=ran.hint, payload=ran.payload,
                                           kind="tool", round_=1)
        return await self._ask(call, ctx, hint=verdict.hint, payload=None, kind=verdict.kind,
                               round_=0, opening=True)

    async def pending(self) -> list[ConfirmationRequest]:
        """This runner's session's confirmation requests waiting for an answer, oldest
        first: the ones it may `resume` (a runner without a session id: the requests
        made without one). ``store.pending()`` lists every session's."""
        waiting = await self._transitions.step(self.store.pending)
        return [req for req in waiting if self._same_session(req)]

    async def resume(
        self,
        confirmation_id: str,
        confirmation: ToolConfirmation | Decision | dict[str, Any] | bool | None = None,
        *,
        args: dict[str, Any] | None = None,
        decided_by: str | None = None,
        channel: str = "resume",
    ) -> dict[str, Any]:
        """Answer a pending request and, if approved, run the call it belongs to.

        ``confirmation`` is a `ToolConfirmation` (ADK's shape), a `Decision`, a dict in
        either shape, or a bool; ``None`` applies the answer another channel recorded
        with `ApprovalStore.submit_answer` (a web page, the CLI). ``args``, when given,
        must be exactly the arguments the request was made for; anything else is refused
        and nothing runs.
        """
        outcome = await self.resume_outcome(confirmation_id, confirmation, args=args,
                                            decided_by=decided_by, channel=channel)
        return outcome.to_dict()  # the result leaves for the model here

    async def resume_outcome(
        self,
        confirmation_id: str,
        confirmation: ToolConfirmation | Decision | dict[str, Any] | bool | None = None,
        *,
        args: dict[str, Any] | None = None,
        decided_by: str | None = None,
        channel: str = "resume",
    ) -> Outcome:
        """`resume`, returning the typed `Outcome`."""
        def judge(req: ConfirmationRequest, recorded: dict[str, Any] | None) -> Judged:
            return self._judge(req, recorded, confirmation, args=args,
                               decided_by=decided_by, channel=channel)

        # Reading the request and recording its decision are one store step.
        judged = await self._transitions.read_and_decide(
            confirmation_id, with_answer=confirmation is None, judge=judge)
        if judged.refusal is not None:
            return judged.refusal
        assert judged.call is not None and judged.plan is not None and judged.answer is not None
        ctx = self._context(judged.call.call_id)
        step = await self._grants.decided(judged.call, judged.req, judged.answer,
                                          judged.plan, ctx)
        return await self._next(step, ctx, None)

    def _judge(self, req: ConfirmationRequest, recorded: dict[str, Any] | None,
               confirmation: ToolConfirmation | Decision | dict[str, Any] | bool | None, *,
               args: dict[str, Any] | None, decided_by: str | None, channel: str) -> Judged:
        """The decision an answer makes for a request read back from the store, or why
        none is made. Runs inside the store step: no store, no audit here."""
        tool = self._tool(req.tool)
        if not self._same_session(req):
            # Another session's request was shown with that session's facts (its
            # workspace, its policy); it runs only in a runner of that session.
            theirs = ("without a session id" if req.session_id is None
                      else f"in session {req.session_id!r}")
            mine = ("no session id" if self.session_id is None
                    else f"session {self.session_id!r}")
            message = (f"confirmation {req.id} was asked {theirs} and this runner has "
                       f"{mine}; nothing was run. Apply it from a runner of the session it "
                       "was asked in (the same session_id, or none)")
            return Judged(req, refusal=NotRun(Status.REJECTED, message, req.call_id),
                          refusal_digest=req.digest)
        text = canonical_json(req.args)
        call = Call(tool, req.call_id, req.args, text, req.digest, self.session_id,
                    self.audit.enabled)
        answer: Decision | Failure
        if req.status == "timed_out" or (req.status == "pending" and expired(req)):
            # Whatever the answer, an expired request is recorded and reported as timed out.
            answer = Failure("timeout", f"confirmation {req.id} expired before it was answered")
            return Judged(req, call, answer, plan(answer, self._grants.channel))
        if confirmation is None:
            if recorded is None:
                raise ConfirmationStateError(
                    f"confirmation {req.id} has no recorded answer to apply; pass the "
                    "answer: resume(id, ToolConfirmation(confirmed=True)) or a Decision")
            confirmation = recorded
        if isinstance(confirmation, str) and confirmation.strip().lower() in _WORDS:
            raise ConfigurationError(
                f"resume({req.id!r}, {confirmation!r}): an answer is not a word; pass True or "
                "False, ToolConfirmation(confirmed=True), or Decision.approve() / "
                "Decision.deny('reason')")
        decision = parse_answer(confirmation, channel=channel)
        if decided_by is not None and decision.decided_by is None:
            decision = decision.model_copy(update={"decided_by": decided_by})
        if args is not None:
            sent = _digest_as_taken(tool, args)
            if sent != req.digest:
                message = (f"the arguments sent with confirmation {req.id} differ from the "
                           "ones it was requested for; the tool was not run. Ask for a new "
                           "confirmation, or answer with Decision.edit(args) to change them")
                return Judged(req, refusal=NotRun(Status.REJECTED, message, req.call_id),
                              refusal_digest=sent)
        answer = decision
        if digest_of(req.tool, text) != req.digest:
            # A request read back from the store runs only if its arguments still hash to
            # the digest it was asked (and will be granted) for.
            answer = Failure("error", "the stored arguments of this request do not match "
                                      "its digest (the store was modified); refusing to run")
        return Judged(req, call, answer, plan(answer, self._grants.channel))

    async def apply_answers(self) -> dict[str, dict[str, Any]]:
        """Apply every answer recorded by other channels for this runner's tools.

        Returns the results keyed by confirmation id. Use it to drain a queue answered
        while no provider was waiting (hours later, from a web page or the CLI).
        """
        results: dict[str, dict[str, Any]] = {}
        for req in await self._transitions.step(self.store.answered_requests):
            if req.tool in self._tools and self._same_session(req):
                results[req.id] = await self.resume(req.id)
        return results

    # -- for agent frameworks: sessions (foresee, park, answer: `FrameworkHooks`) ----

    def for_session(self, session_id: str | None) -> ToolRunner:
        """This runner for another session: the same tools, provider, store, audit log
        and rules, with ``session_id`` as its session (what "approve for this session"
        covers, and the only session whose requests it applies). For frameworks whose
        conversation has its own id (a Pydantic AI ``conversation_id``, an OpenAI
        ``RunState``'s, a LangGraph ``thread_id``). Runners are kept per session id."""
        if session_id == self.session_id:
            return self
        if session_id is not None and (not isinstance(session_id, str) or not session_id
                                       or len(session_id) > MAX_CALL_ID):
            raise ConfigurationError(
                f"session_id must be a non-empty string of at most {MAX_CALL_ID} "
                f"characters, or None; got {type(session_id).__name__}")
        siblings = self._siblings
        runner = siblings.get(session_id)
        if runner is None:
            runner = ToolRunner(
                self._tools.values(), provider=self.provider, store=self.store,
                audit=self.audit, approval_ttl=self.approval_ttl, max_rounds=self.max_rounds,
                session_id=session_id, rules=self.rules, max_args_bytes=self.max_args_bytes,
                _siblings=siblings)
            if len(siblings) >= _MAX_SIBLINGS:  # a runner holds no state of its own
                del siblings[next(iter(siblings))]
            siblings[session_id] = runner
        return runner

    async def in_doubt(self) -> list[CallRecord]:
        """Calls that started in a process which died before recording their end."""
        return await self._transitions.sweep()

    def call_sync(self, name: str, args: dict[str, Any] | None = None,
                  call_id: str | None = None) -> dict[str, Any]:
        """`call` for code without an event loop."""
        _no_running_loop("call_sync", "call")
        return anyio.run(self.call, name, args, call_id)

    def resume_sync(self, confirmation_id: str,
                    confirmation: ToolConfirmation | Decision | dict[str, Any] | bool,
                    **kwargs: Any) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            return await self.resume(confirmation_id, confirmation, **kwargs)

        _no_running_loop("resume_sync", "resume")
        return anyio.run(go)

    # -- the flow between the parts ------------------------------------------------------

    async def _ask(self, call: Call, ctx: ToolContext, *, hint: str, payload: Any, kind: str,
                   round_: int, edited_from: str | None = None,
                   opening: bool = False) -> Outcome:
        """Park a request for ``call`` (``opening``: recording the call in the same
        step); answer it by rule, by a fixed answer or by the provider, or leave it
        waiting."""
        t = self._transitions
        # A tool's own hint and payload may hold what no store, page or host can carry.
        hint = printable(hint)
        if payload is not None and lone_surrogate(payload):
            payload = json.loads(surrogates_as_text(json.dumps(payload, ensure_ascii=False,
                                                               default=repr)))
        if round_ >= self.max_rounds:
            stopped = NotRun(Status.ERROR, (
                f"{call.name} asked for confirmation {round_} times in one call "
                f"(max_rounds={self.max_rounds}); the call was stopped"))
            if not opening:
                return await t.end(call, "error", stopped, "tool.failed")
            ended = await t.open_and_end(call, "error", stopped, "tool.failed")
            return ended if not isinstance(ended, CallRecord) else (
                await self._execution.replay(ended, call))
        subjects = gate.rule_subjects(call.tool, call.args)
        park = Park(hint, payload, kind,
                    time.time() + self.approval_ttl if self.approval_ttl else None,
                    gate.request_details(call.tool, call.args, subjects), edited_from,
                    subjects, self.rule_session)
        fixed = None if self.provider is None else fixed_answer(self.provider)
        if opening and fixed is not None:
            # AutoApprove: the answer is known before the request is parked, so the call
            # is opened, parked and decided in one store step (a remembered rule that
            # approves it still answers first, as below).
            try:
                decided = await t.open_park_decide(
                    call, park, lambda rules: gate.rules_answer(rules) or fixed,
                    self._plan)
            except ConfirmationStateError as exc:
                return await t.end(call, "error", NotRun(Status.ERROR, str(exc)),
                                   "tool.failed")
            if isinstance(decided, CallRecord):
                return await self._execution.replay(decided, call)
            asked, given, made, refusal = decided
            if refusal is not None:
                return refusal
            return await self._next(
                await self._grants.decided(call, asked, given, made, ctx), ctx, round_)
        try:
            if not opening:
                req, rules = await t.park(call, park)
            else:
                parked = await t.open_and_park(call, park)
                if isinstance(parked, CallRecord):
                    return await self._execution.replay(parked, call)
                req, rules = parked
        except ConfirmationStateError as exc:
            return await t.end(call, "error", NotRun(Status.ERROR, str(exc)), "tool.failed")
        answer: Decision | Failure | None = gate.rules_answer(rules)
        if answer is None:
            if self.provider is None:
                return Awaiting(req.id, req.call_id, req.tool, req.hint)
            # AutoApprove: known without building or sending the request.
            answer = fixed or await consult(self.provider, req.public())
        if isinstance(answer, Failure) and answer.kind == "pending":
            if not expired(req):
                await t.still_pending(call, req, self.provider)
                return Awaiting(req.id, req.call_id, req.tool, req.hint, answer.message)
            answer = Failure("timeout", f"{answer.cause}, and the request expired")
        return await self._settle(call, req, answer, ctx, round_)

    def _decided_at_once(self, call: Call, verdict: gate.Ask,
                         fixed: Decision) -> ToolConfirmation | None:
        """`_ask` for a new call whose answer is known before asking (a fixed answer, or
        the remembered rules that approve it), in a store of this process and with no
        audit trail to write: the call opened, its request parked and decided, and the
        grant claimed in one store step (`MemoryApprovalStore.open_decided`: the same
        records and journal). The confirmation to run with, or None with nothing
        recorded: the general path then takes the steps one by one."""
        assert self._open_decided is not None
        tool, args = call.tool, call.args
        subjects = gate.rule_subjects(tool, args)
        rules = self.rules.match(call.name, args, subjects=subjects,
                                 session_id=self.rule_session, record=False)
        if rules:
            answer = gate.rules_answer(rules)
            assert answer is not None
            made, recorded = self._plan(answer), recorded_form(answer)
        else:  # the fixed answer: immutable, so its plan is made once
            answer = fixed
            made, recorded = self._fixed_plan(fixed)
        decision = made.decision
        if not made.start or decision is None:  # not a single-use approval
            return None
        hint = verdict.hint
        if "\x00" in hint or not (hint.isascii() or is_text(hint)):
            hint = printable(hint)
        rid = self._open_decided(
            call_id=call.call_id, tool=call.name, digest=call.digest,
            args_json=call.args_json, session_id=call.session_id, hint=hint,
            kind=verdict.kind,
            expires_at=time.time() + self.approval_ttl if self.approval_ttl else None,
            details=gate.request_details(tool, args, subjects), reason=made.reason,
            decided_by=decision.decided_by, channel=decision.channel or made.channel,
            decision=recorded)
        if rid is None:
            return None
        if rules:  # their use is counted once the decision is recorded
            self.store.mark_rules_used([rule.id for rule in rules], time.time())
        return approval(hint, answer.payload)

    def _fixed_plan(self, fixed: Decision) -> tuple[Plan, str | dict[str, Any]]:
        """The plan and recorded form of a fixed answer (an immutable `Decision`),
        made once per answer and channel; the plan is only read."""
        cached = self._fixed_plan_of
        if cached is None or cached[0] is not fixed or cached[1] != self._grants.channel:
            # Compared by identity: hashing a pydantic model costs more than the plan.
            cached = self._fixed_plan_of = (fixed, self._grants.channel, self._plan(fixed),
                                            recorded_form(fixed))
        return cached[2], cached[3]

    def _plan(self, answer: Decision) -> Plan:
        return plan(answer, self._grants.channel)

    async def _settle(self, call: Call, req: Request, answer: Decision | Failure,
                      ctx: ToolContext, round_: int | None) -> Outcome:
        """Apply an answer: the call ends, runs, or (edited) is asked about again."""
        return await self._next(await self._grants.settle(call, req, answer, ctx), ctx, round_)

    async def _next(self, step: Next, ctx: ToolContext, round_: int | None) -> Outcome:
        """``round_``: the requests made for the call so far (None: count them if needed)."""
        if isinstance(step, Ended):
            return step.result
        return await self._run(step.call, step.confirmation, ctx, round_=round_,
                               claimed=step.claimed)

    async def _round(self, call: Call, round_: int | None) -> int:
        return await self._transitions.count_requests(call) if round_ is None else round_

    async def _run(self, call: Call, confirmation: ToolConfirmation | None, ctx: ToolContext,
                   *, round_: int | None, claimed: bool) -> Outcome:
        outcome = await self._execution.run(call, confirmation, ctx, claimed=claimed)
        if isinstance(outcome, AskedInside):
            return await self._ask(call, ctx, hint=outcome.hint, payload=outcome.payload,
                                   kind="tool", round_=await self._round(call, round_) + 1)
        return outcome

    # -- helpers ---------------------------------------------------------------------

    def _context(self, call_id: str) -> ToolContext:
        """The one `ToolContext` of a call: the confirmation check and the run see the
        same one, as in ADK (state a predicate writes is there when the tool runs)."""
        outer = OUTER_CALL.get()
        if outer is None:
            ctx = ToolContext(function_call_id=call_id, session_id=self.session_id)
        else:
            ctx = ToolContext(function_call_id=call_id, session_id=self.session_id,
                              state=outer.state, actions=outer.actions)
        if self.provider is not None:
            # A bash command under network="allowlist" asks here about a name nobody
            # listed (sandbox/approval/network.py); without a provider it is refused.
            ctx.ask_network = functools.partial(self._ask_network, call_id)
        return ctx

    async def _ask_network(self, call_id: str, host: str, port: int, command: str) -> bool:
        """Whether a human (or a remembered rule) lets the command of call ``call_id``
        connect to host:port: a call of the ``network`` tool through this gate, with its
        own call id, so each (call, destination) is asked once and recorded."""
        tool = self._network_tool
        if tool is None:
            tool = self._network_tool = NetworkAccessTool()
        # The digest covers the whole call id: a truncated one let two calls whose ids
        # share their first 226 characters share one answer (a yes given once to one
        # call's connection was replayed to the other's).
        digest = hashlib.sha256(f"{call_id}\0{host}:{port}".encode()).hexdigest()[:16]
        ask_id = f"{call_id[: MAX_CALL_ID - 30]}/network/{digest}"
        try:
            result = await self._call(tool, NETWORK_TOOL,
                                      {"host": host, "port": port, "command": command},
                                      ask_id)  # fmt: skip
        except Exception:  # the gate failed: the connection is refused, the run goes on
            return False
        return isinstance(result, (Ran, Replayed)) and result.result.get("allowed") is True

    def _same_session(self, req: ConfirmationRequest) -> bool:
        """Whether this runner may apply ``req``: the request was made in this runner's
        session. No session id is a session of its own, never a wildcard: a runner
        without one applies only requests made without one, and a request made
        without one is applied by no runner that has one."""
        return req.session_id == self.session_id

    def _tool(self, name: str) -> BaseTool:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownToolError(f"unknown tool {name!r}; this runner has: {known}") from None


#: Runners `for_session` keeps (oldest dropped first; the store holds all state).
_MAX_SIBLINGS = 4096


#: Answers people type that are not answers the gate reads (it needs a bool or a model).
_WORDS = {"yes", "y", "no", "n", "ok", "approve", "approved", "deny", "denied", "reject",
          "once", "always", "session"}


#: The steps ``open_decided`` stands for, and itself; then the capabilities the general
#: path would use instead of those steps (store/capabilities.py), which the class that
#: defines ``open_decided`` must not have gained in a subclass either.
_STEPS = ("open_call", "park", "decide", "open_decided", "open_and_park",
          "parked_request", "decide_parked", "batch")


_STEP_NAMES = frozenset(_STEPS)


def _unpatched(store: ApprovalStore, steps: tuple[Any, ...]) -> bool:
    """Whether the store's steps are still those `_fused_steps` found when the runner was
    built: nothing patched on the instance, or on the class since (a deployment's hook,
    a test's spy), which the one-step path would never call. (A capability the class
    lacked is looked for when the runner is built only: a failed lookup costs more than
    the rest of this check.)"""
    own = getattr(store, "__dict__", None)
    if own and not _STEP_NAMES.isdisjoint(own):
        return False
    cls = type(store)
    return (cls.open_call is steps[0] and cls.park is steps[1]
            and cls.decide is steps[2] and cls.open_decided is steps[3])  # type: ignore[attr-defined]


def _fused_steps(store: ApprovalStore) -> Callable[..., str | None] | None:
    """The store's ``open_decided``, when the three steps it stands for (``open_call``,
    ``park``, ``decide``) and the capabilities the general path would use instead
    (`_STEPS`) are those of the class that defines it: a subclass that overrides or adds
    one of them (to log or check something) has it called."""
    if not isinstance(store, DecidesAtOnce):
        return None
    fused = store.open_decided
    defining = next((cls for cls in type(store).__mro__ if "open_decided" in vars(cls)), None)
    if defining is None or any(getattr(type(store), step, None)
                               is not getattr(defining, step, None) for step in _STEPS):
        return None
    return fused


def _label(tool: Any) -> str:
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", None) or "tool")


def _no_running_loop(name: str, instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"ToolRunner.{name} was called inside a running event loop; in async code use "
        f"'await runner.{instead}(...)' instead"
    )
