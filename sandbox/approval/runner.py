"""`ToolRunner`: the gate every tool call passes through.

Order of a call: validate the arguments → record the call (a known call id is answered
from the record, never run again) → the tool's own refusal check (`precheck`: a blocked
bash command never reaches a human) → `require_confirmation` → ask the provider, or park
the request in the store → claim the single-use grant → run → record the result.
A tool may also ask from inside (`tool_context.request_confirmation`); it is then invoked
again, with `tool_context.tool_confirmation` set, once the answer is an approval.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ..audit import AuditLog, Redactor, redact_secrets
from ..errors import (
    ConfigurationError,
    ConfirmationStateError,
    ConfirmationTimedOutError,
    DuplicateCallError,
    RuleError,
    UnknownToolError,
)
from ..tools.base import BaseTool, ToolArgumentError
from ..tools.context import OUTER_CALL, ToolConfirmation, ToolContext
from .consult import Failure, consult
from .display import shown
from .models import ConfirmationRequest, Decision, args_digest, canonical_json, digest_of
from .providers import (
    _AUTO_APPROVED,
    _AUTO_APPROVED_JSON,
    ConfirmationProvider,
    fixed_answer,
    parse_answer,
)
from .results import Awaiting, NotRun, Status
from .rules import Rule, RuleBook
from .store import ApprovalStore, CallRecord, _dt, _Owner, new_id, open_store

T = TypeVar("T")

#: Longest call id accepted (ADK's and OpenAI's ids are a few dozen characters).
MAX_CALL_ID = 256


class _Asked:
    """A request this runner has just parked: what the gate itself reads of it.

    The `ConfirmationRequest` model (what providers, rules and the audit see) is built
    from it only when something needs it; an `AutoApprove`d call never does. Its
    arguments are parsed from the canonical JSON that was stored and digested, so
    whatever is done to the request shown cannot reach the arguments that run.
    """

    __slots__ = ("_public", "args", "args_json", "call_id", "created", "details", "digest",
                 "edited_from", "expires", "hint", "id", "kind", "payload", "session_id",
                 "tool")

    def __init__(self, rid: str, created: float, call_id: str, tool: str,
                 args: dict[str, Any], args_json: str, digest: str, hint: str, payload: Any,
                 kind: str, expires: float | None, details: dict[str, Any] | None,
                 edited_from: str | None, session_id: str | None) -> None:
        self.id = rid
        self.created = created
        self.call_id = call_id
        self.tool = tool
        self.args = args
        self.args_json = args_json
        self.digest = digest
        self.hint = hint
        self.payload = payload
        self.kind = kind
        self.expires = expires
        self.details = details
        self.edited_from = edited_from
        self.session_id = session_id
        self._public: ConfirmationRequest | None = None

    @property
    def expires_at(self) -> datetime | None:
        return _dt(self.expires)

    def public(self) -> ConfirmationRequest:
        if self._public is None:
            self._public = ApprovalStore._built_request(
                self.id, self.created, call_id=self.call_id, tool=self.tool,
                args=json.loads(self.args_json),
                digest=self.digest, hint=self.hint, payload=self.payload, kind=self.kind,
                expires_at=self.expires, details=self.details, edited_from=self.edited_from,
                session_id=self.session_id)
        return self._public


#: A request as the gate handles it: parked by this runner, or read back from the store.
_Request = ConfirmationRequest | _Asked


def _public(req: _Request) -> ConfirmationRequest:
    return req.public() if isinstance(req, _Asked) else req


class ToolRunner:
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
    ) -> None:
        self._tools: dict[str, BaseTool] = {}
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
        self.session_id = session_id
        # Remembered decisions ("approve for this session", "always"): in the store's
        # file. A runner without a session id is its own session.
        if rules is not None and rules.store is not self.store:
            raise ConfigurationError("rules must be a RuleBook over this runner's store")
        self.rules = rules if rules is not None else RuleBook(self.store)
        self.rule_session = session_id or new_id("session")
        # A file may be shared with other processes whose SQLite locks we may wait on:
        # keep those waits off the event loop. An in-memory store never waits.
        self._offload = self.store.blocking
        if self._offload:
            for rec in self.store.in_doubt():
                self.audit.emit("tool.in_doubt", tool=rec.tool, call_id=rec.call_id,
                                digest=rec.digest)

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
        tool = self._tool(name)
        call_id = call_id or new_id("call")
        args = {} if args is None else args
        if not isinstance(call_id, str) or not 0 < len(call_id) <= MAX_CALL_ID:
            raise ConfigurationError(
                f"call_id must be a non-empty string of at most {MAX_CALL_ID} characters, "
                f"got {type(call_id).__name__} of length {len(str(call_id))}"
            )
        try:
            args = tool.validate_args(args)
            text = canonical_json(args)  # serialised once: digest, call record and request
            if len(text) > self.max_args_bytes:
                raise ToolArgumentError(
                    f"the arguments to {name} are {len(text)} characters of JSON, over this "
                    f"runner's max_args_bytes={self.max_args_bytes}; send less (for bulk "
                    "data, pass a file name or a reference instead)"
                )
            digest = digest_of(name, text)
        except (ToolArgumentError, ConfigurationError) as exc:
            message = exc.message if isinstance(exc, ToolArgumentError) else str(exc)
            self.audit.emit("tool.rejected", tool=name, call_id=call_id, reason=message)
            return NotRun(Status.ERROR, message).to_dict()
        if self._offload:
            existing = await self._db(self.store.open_call, call_id, name, digest, args,
                                      self.session_id, args_json=text)
        else:
            existing = self.store.open_call(call_id, name, digest, args, self.session_id,
                                            args_json=text)
        if existing is not None:
            return await self._replay(existing, name, digest)
        return await self._gate(tool, call_id, args, digest, round_=0, args_json=text)

    async def pending(self) -> list[ConfirmationRequest]:
        """Confirmation requests waiting for an answer, oldest first."""
        return await self._db(self.store.pending)

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
        with `ApprovalStore.submit_answer` (a web page, the CLI). ``args``, when given, must be exactly the arguments the
        request was made for; anything else is refused and nothing runs.
        """
        req, rounds = await self._db(self._request_and_rounds, confirmation_id)
        tool = self._tool(req.tool)
        if not self._same_session(req):
            # Another session's request was shown with that session's facts (its
            # workspace, its policy); it runs only in a runner of that session.
            message = (f"confirmation {confirmation_id} belongs to session {req.session_id!r}, "
                       f"not this runner's {self.session_id!r}; nothing was run. Apply it "
                       "from a runner of that session")
            self.audit.emit("tool.rejected", tool=req.tool, call_id=req.call_id,
                            digest=req.digest, confirmation_id=req.id, reason=message)
            return NotRun(Status.REJECTED, message, req.call_id).to_dict()
        if req.status == "timed_out" or (req.status == "pending" and _expired(req)):
            # Whatever the answer, an expired request is recorded and reported as timed out.
            return await self._apply(tool, req, Failure(
                "timeout", f"confirmation {req.id} expired before it was answered"),
                round_=rounds)
        if confirmation is None:
            answer = await self._db(self.store.get_answer, confirmation_id)
            if answer is None:
                raise ConfirmationStateError(
                    f"confirmation {confirmation_id} has no recorded answer to apply; pass "
                    "the answer: resume(id, ToolConfirmation(confirmed=True)) or a Decision"
                )
            confirmation = answer
        if isinstance(confirmation, str) and confirmation.strip().lower() in _WORDS:
            raise ConfigurationError(
                f"resume({confirmation_id!r}, {confirmation!r}): an answer is not a word; pass "
                "True or False, ToolConfirmation(confirmed=True), or Decision.approve() / "
                "Decision.deny('reason')"
            )
        decision = parse_answer(confirmation, channel=channel)
        if decided_by is not None and decision.decided_by is None:
            decision = decision.model_copy(update={"decided_by": decided_by})
        if args is not None:
            try:  # the arguments as the tool would take them: what the request holds
                args = tool.validate_args(args)
            except ToolArgumentError:
                pass  # compared as sent: they differ, and are refused below
        if args is not None and args_digest(req.tool, args) != req.digest:
            message = (
                f"the arguments sent with confirmation {confirmation_id} differ from the ones "
                "it was requested for; the tool was not run. Ask for a new confirmation, or "
                "answer with Decision.edit(args) to change them"
            )
            self.audit.emit("tool.rejected", tool=req.tool, call_id=req.call_id,
                            digest=args_digest(req.tool, args), reason=message)
            return NotRun(Status.REJECTED, message, req.call_id).to_dict()
        if args_digest(req.tool, req.args) != req.digest:
            # A request read back from the store runs only if its arguments still hash to
            # the digest it was asked (and will be granted) for.
            return await self._apply(tool, req, Failure(
                "error", "the stored arguments of this request do not match its digest (the "
                         "store was modified); refusing to run"), round_=rounds)
        return await self._apply(tool, req, decision, round_=rounds)

    def _same_session(self, req: ConfirmationRequest) -> bool:
        """Whether this runner may apply ``req``: both have a session id only if it is
        the same one."""
        return req.session_id is None or self.session_id is None or (
            req.session_id == self.session_id)

    def _request_and_rounds(self, confirmation_id: str) -> tuple[ConfirmationRequest, int]:
        """A request and how many were made for its call: one trip to the store."""
        req = self.store.get_request(confirmation_id)
        return req, self.store.count_requests(req.call_id)

    async def apply_answers(self) -> dict[str, dict[str, Any]]:
        """Apply every answer recorded by other channels for this runner's tools.

        Returns the results keyed by confirmation id. Use it to drain a queue answered
        while no provider was waiting (hours later, from a web page or the CLI).
        """
        results: dict[str, dict[str, Any]] = {}
        for req in await self._db(self.store.answered_requests):
            if req.tool in self._tools and self._same_session(req):
                results[req.id] = await self.resume(req.id)
        return results

    async def in_doubt(self) -> list[CallRecord]:
        """Calls that started in a process which died before recording their end."""
        return await self._db(self.store.in_doubt)

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

    # -- the gate --------------------------------------------------------------------

    def _context(self, call_id: str) -> ToolContext:
        """The one `ToolContext` of a call: the confirmation check and the run see the
        same one, as in ADK (state a predicate writes is there when the tool runs)."""
        return ToolContext(function_call_id=call_id, session_id=self.session_id,
                           **_outer_context())

    async def _policy(self, tool: BaseTool, call_id: str, args: dict[str, Any],
                      digest: str, ctx: ToolContext | None = None,
                      ) -> tuple[dict[str, Any] | None, str | None]:
        """The tool's refusal check, then its confirmation predicate, for these arguments.

        Returns ``(result, None)`` when the call ended here (blocked, or a check that
        raised: fail closed), else ``(None, hint)`` with the hint None when no human is
        needed.
        """
        try:
            blocked = await tool.precheck(args)
        except Exception as exc:  # a broken check must not let the call through
            return await self._end(tool, call_id, digest, "error", {
                "status": "error",
                "error": f"{tool.name}: checking the call failed ({type(exc).__name__}: {exc});"
                         " the tool was not run",
            }, event="tool.failed"), None
        if blocked is not None:
            return await self._end(tool, call_id, digest, "blocked",
                                   {"status": "blocked", **blocked}, event="tool.blocked"), None
        try:
            return None, await tool.confirmation_hint(
                args, self._context(call_id) if ctx is None else ctx)
        except Exception as exc:
            return await self._end(tool, call_id, digest, "error", {
                "status": "error",
                "error": f"{tool.name}: require_confirmation failed ({type(exc).__name__}: "
                         f"{exc}); the tool was not run",
            }, event="tool.failed"), None

    async def _gate(self, tool: BaseTool, call_id: str, args: dict[str, Any], digest: str,
                    *, round_: int, args_json: str | None = None) -> dict[str, Any]:
        ctx = self._context(call_id)
        ended, hint = await self._policy(tool, call_id, args, digest, ctx)
        if ended is not None:
            return ended
        if hint is not None:
            kind = "predicate" if callable(getattr(tool, "require_confirmation", None)) else "static"
            return await self._ask(tool, call_id, args, digest, hint=hint, payload=None,
                                   kind=kind, round_=round_, args_json=args_json, ctx=ctx)
        return await self._execute(tool, call_id, args, digest, None, round_=round_, ctx=ctx)

    async def _ask(self, tool: BaseTool, call_id: str, args: dict[str, Any], digest: str, *,
                   hint: str, payload: Any, kind: str, round_: int,
                   edited_from: str | None = None,
                   args_json: str | None = None,
                   ctx: ToolContext | None = None) -> dict[str, Any]:
        if round_ >= self.max_rounds:
            return await self._end(tool, call_id, digest, "error", {
                "status": "error",
                "error": f"{tool.name} asked for confirmation {round_} times in one call "
                         f"(max_rounds={self.max_rounds}); the call was stopped",
            }, event="tool.failed")
        expires = time.time() + self.approval_ttl if self.approval_ttl else None
        try:
            details = tool.describe(args)
        except Exception:
            details = {}
        if tool.description:  # what the tool does, for the human asked (the page shows it)
            details = {**details, "tool_description": tool.description[:2000]}
        subjects = _rule_subjects(tool, args)
        if subjects is not None:
            details = {**details, "rule_subjects": [list(argv) for argv in subjects]}
        name = tool.name
        text = canonical_json(args) if args_json is None else args_json
        try:
            if self._offload:
                rid, created, rules = await self._db(
                    self._park, call_id, name, args, text, digest, hint, payload, kind,
                    expires, details, edited_from, subjects)
            else:
                rid, created, rules = self._park(
                    call_id, name, args, text, digest, hint, payload, kind, expires, details,
                    edited_from, subjects)
        except ConfirmationStateError as exc:
            return await self._end(tool, call_id, digest, "error",
                                   {"status": "error", "error": str(exc)}, event="tool.failed")
        req = _Asked(rid, created, call_id, name, args, text, digest, hint, payload, kind,
                     expires, details, edited_from, self.session_id)
        if self.audit.enabled:
            self.audit.emit("tool.requested", tool=name, call_id=call_id, digest=digest,
                            args=args, confirmation_id=rid, hint=hint, kind=kind,
                            details=details or None)
        if rules:
            by_rule = Decision.approve(decided_by=",".join(r.id for r in rules), channel="rule")
            return await self._apply(tool, req, by_rule, round_=round_, ctx=ctx)
        if self.provider is None:
            return _awaiting(req)
        fixed = fixed_answer(self.provider)
        if fixed is not None:  # AutoApprove: known without building or sending the request
            return await self._apply(tool, req, fixed, round_=round_, ctx=ctx)
        answer = await consult(self.provider, _public(req))
        if isinstance(answer, Failure) and answer.kind == "pending" and _expired(req):
            answer = Failure("timeout", f"{answer.cause}, and the request expired")
        if isinstance(answer, Failure) and answer.kind == "pending":
            self.audit.emit("tool.timed_out", tool=tool.name, call_id=call_id, digest=digest,
                            confirmation_id=req.id, still_pending=True,
                            channel=self.provider.name)
            return _awaiting(req, answer.message)
        return await self._apply(tool, req, answer, round_=round_, ctx=ctx)

    def _park(self, call_id: str, name: str, args: dict[str, Any], args_json: str,
              digest: str, hint: str, payload: Any, kind: str, expires: float | None,
              details: dict[str, Any] | None, edited_from: str | None,
              subjects: tuple[tuple[str, ...], ...] | None,
              ) -> tuple[str, float, list[Rule] | None]:
        """Park a request, then look for rules that approve it: one trip to the store (one
        worker-thread hop for a file). No request model is built here: only a provider, a
        rule or the audit needs one."""
        rid, created = self.store._add_request(
            call_id=call_id, tool=name, args=args, digest=digest, hint=hint, payload=payload,
            kind=kind, expires_at=expires, details=details, edited_from=edited_from,
            session_id=self.session_id, args_json=args_json)
        # A tool asking from inside wants a human's payload, not a rule.
        rules = None if kind == "tool" else self.rules.match(
            name, args, subjects=subjects, session_id=self.rule_session)
        return rid, created, rules

    async def _apply(self, tool: BaseTool, req: _Request,
                     answer: Decision | Failure, *, round_: int,
                     ctx: ToolContext | None = None) -> dict[str, Any]:
        call_id = req.call_id
        if isinstance(answer, Failure):
            status = "timed_out" if answer.kind == "timeout" else "error"
            verb = "timed out" if status == "timed_out" else "failed"
            result = {"status": status,
                      "error": f"Confirmation {verb}: {answer.message}. The tool was not run."}
            refused = await self._decide(tool, req, result, status=status,
                                         outcome=answer.kind, reason=answer.message,
                                         channel=getattr(self.provider, "name", None))
            return refused or result
        if answer.outcome == "deny":
            reason = answer.reason or "no reason given"
            result = {"status": "denied", "error": f"The user denied this call: {reason}",
                      "reason": reason}
            refused = await self._decide(tool, req, result, status="denied", outcome="deny",
                                         reason=reason, decision=answer)
            return refused or result
        if answer.outcome == "approve":
            # Approving and claiming the grant is one transaction unless rules are saved
            # in between; either way the journal reads approved → started.
            claim = answer.scope == "once"
            refused = await self._decide(tool, req, None, status="approved", outcome="approve",
                                         reason=answer.reason, decision=answer, start=claim)
            if refused is not None:
                return refused
            if not claim:
                await self._remember(tool, req, answer)
            return await self._execute(tool, call_id, req.args, req.digest,
                                       _approval(req.hint, answer.payload), round_=round_,
                                       claimed=claim, ctx=ctx)
        return await self._apply_edit(tool, req, answer, round_=round_)

    async def _remember(self, tool: BaseTool, req: _Request,
                        answer: Decision) -> list[Rule]:
        """Save the rules an approval with scope session/always asks for.

        The subjects come from the tool held here, not from the stored request. A rule
        that does not fit the call is not saved (the approval itself still stands).
        """
        try:
            made = await self._db(self.rules.from_decision, _public(req), answer,
                                  subjects=_rule_subjects(tool, req.args),
                                  session_id=req.session_id or self.rule_session)
        except (RuleError, ConfigurationError) as exc:
            self.audit.emit("rule.refused", tool=tool.name, call_id=req.call_id,
                            digest=req.digest, confirmation_id=req.id, reason=str(exc))
            return []
        for rule in made:
            self.audit.emit("rule.created", tool=tool.name, call_id=req.call_id,
                            digest=req.digest, confirmation_id=req.id, rule_id=rule.id,
                            rule=rule.describe(), scope=rule.scope,
                            expires_at=rule.expires_at.isoformat(),
                            decided_by=answer.decided_by, channel=answer.channel)
        return made

    async def _apply_edit(self, tool: BaseTool, req: _Request, answer: Decision, *,
                          round_: int) -> dict[str, Any]:
        refused = await self._decide(tool, req, None, status="edited", outcome="edit",
                                     reason=answer.reason, decision=answer)
        if refused is not None:
            return refused
        new_args = answer.args or {}
        call_id = req.call_id
        try:
            new_args = tool.validate_args(new_args)
            new_digest = args_digest(tool.name, new_args)
        except (ToolArgumentError, ConfigurationError) as exc:
            message = exc.message if isinstance(exc, ToolArgumentError) else str(exc)
            return await self._end(tool, call_id, req.digest, "rejected", {
                "status": "rejected", "error": f"The edited arguments are invalid: {message}. "
                                               "The tool was not run."}, event="tool.rejected")
        # Edited arguments are a new call as far as policy goes: they pass the tool's own
        # refusal check and its confirmation predicate again before anything runs.
        ended, hint = await self._policy(tool, call_id, new_args, new_digest)
        if ended is not None:
            return ended
        if hint is not None:
            return await self._ask(tool, call_id, new_args, new_digest, hint=hint,
                                   payload=req.payload, kind="edit", round_=round_ + 1,
                                   edited_from=req.id)
        await self._db(self.store.grant, call_id, new_digest, new_args)
        return await self._execute(tool, call_id, new_args, new_digest,
                                   _approval(req.hint, answer.payload), round_=round_)

    async def _decide(self, tool: BaseTool, req: _Request,
                      result: dict[str, Any] | None, *, status: str, outcome: str,
                      reason: str | None, decision: Decision | None = None,
                      channel: str | None = None, start: bool = False) -> dict[str, Any] | None:
        """Record the request's one decision (with `result` as the call's outcome when
        it ends the call). Returns None, or a refusal if the request had already been
        answered (by another channel, process or replay)."""
        decided_by = decision.decided_by if decision else None
        channel = (decision.channel if decision else None) or channel
        dumped = None if decision is None else (
            _AUTO_APPROVED_JSON if decision is _AUTO_APPROVED
            else decision.model_dump(mode="json"))
        try:
            if self._offload:
                await self._db(
                    self.store.decide, req.id, status=status, outcome=outcome, reason=reason,
                    decided_by=decided_by, channel=channel, decision=dumped,
                    call_result=result, start=start,
                )
            else:
                self.store.decide(
                    req.id, status=status, outcome=outcome, reason=reason,
                    decided_by=decided_by, channel=channel, decision=dumped,
                    call_result=result, start=start,
                )
        except ConfirmationTimedOutError as exc:
            self.audit.emit("tool.timed_out", tool=tool.name, call_id=req.call_id,
                            digest=req.digest, confirmation_id=req.id, reason=str(exc),
                            answered_by=decided_by, channel=channel)
            return NotRun(Status.TIMED_OUT, f"Confirmation timed out: {exc}. The tool was not "
                          "run.", req.call_id).to_dict()
        except ConfirmationStateError as exc:
            self.audit.emit("tool.rejected", tool=tool.name, call_id=req.call_id,
                            digest=req.digest, confirmation_id=req.id, reason=str(exc))
            return NotRun(Status.REJECTED, f"{exc}. Nothing was run.", req.call_id).to_dict()
        if not self.audit.enabled:  # what was shown is rendered only for a trail
            return None
        edited = decision.args if decision is not None and decision.args is not None else None
        # A wait that ran out is its own step in the trail, never mistaken for a decision.
        event = "tool.timed_out" if status == "timed_out" else "tool.decided"
        self.audit.emit(event, tool=tool.name, call_id=req.call_id, digest=req.digest,
                        confirmation_id=req.id, decision=status, reason=reason,
                        decided_by=decided_by, channel=channel,
                        scope=decision.scope if decision else None,
                        shown=_shown(tool, _public(req), self._redacted(req.tool, req.args)),
                        edited_args=self._redacted(req.tool, edited) if edited else None,
                        edit=_args_diff(self._redacted(req.tool, req.args),
                                        self._redacted(req.tool, edited),
                                        args_digest(req.tool, edited))
                        if edited is not None else None)
        return None

    def _redacted(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        redact = self.audit.redact
        return redact(tool, args) if redact is not None else args

    async def _execute(self, tool: BaseTool, call_id: str, args: dict[str, Any], digest: str,
                       confirmation: ToolConfirmation | None, *, round_: int,
                       claimed: bool = False, ctx: ToolContext | None = None,
                       ) -> dict[str, Any]:
        if not claimed and not (await self._db(self.store.start, call_id, digest)
                                if self._offload else self.store.start(call_id, digest)):
            rec = await self._db(self.store.get_call, call_id)
            message = (f"call {call_id} cannot start: it is {rec.state}, and a grant is used "
                       "once and only for the exact arguments approved")
            self.audit.emit("tool.rejected", tool=tool.name, call_id=call_id, digest=digest,
                            reason=message)
            return NotRun(Status.REJECTED, message, call_id).to_dict()
        if self.audit.enabled:
            self.audit.emit("tool.started", tool=tool.name, call_id=call_id, digest=digest)
        if ctx is None:
            ctx = self._context(call_id)
        ctx.tool_confirmation = confirmation
        ctx.gated = True
        try:
            result = await tool.run_async(args=args, tool_context=ctx)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._db(self.store.finish, call_id, "in_doubt",
                               {"status": "in_doubt",
                                "error": "cancelled while running; effects unknown"})
                self.audit.emit("tool.in_doubt", tool=tool.name, call_id=call_id,
                                digest=digest, reason="cancelled while running")
            raise
        except Exception as exc:
            return await self._end(tool, call_id, digest, "failed", {
                "status": "error",
                "error": f"{tool.name} raised {type(exc).__name__}: {exc}"}, event="tool.failed")
        # Taken off the context: the next run (after the answer) starts with no request.
        requested = ctx.actions.requested_tool_confirmations.pop(call_id, None)
        if requested is not None:
            return await self._ask(tool, call_id, args, digest, hint=requested.hint,
                                   payload=requested.payload, kind="tool", round_=round_ + 1,
                                   ctx=ctx)
        if not isinstance(result, dict):
            result = {"result": result}
        if self._offload:
            await self._db(self.store.finish, call_id, "done", result)
        else:
            self.store.finish(call_id, "done", result)
        if self.audit.enabled:
            self.audit.emit("tool.finished", tool=tool.name, call_id=call_id, digest=digest,
                            error=result.get("error"))
        return result

    async def _end(self, tool: BaseTool, call_id: str, digest: str, state: str,
                   result: dict[str, Any], *, event: str) -> dict[str, Any]:
        await self._db(self.store.finish, call_id, state, result)
        self.audit.emit(event, tool=tool.name, call_id=call_id, digest=digest,
                        error=result.get("error"))
        return result

    async def _replay(self, rec: CallRecord, name: str, digest: str) -> dict[str, Any]:
        if rec.tool != name or rec.digest != digest:
            raise DuplicateCallError(
                f"call id {rec.call_id!r} was already used for {rec.tool} with other "
                "arguments; every new call needs a new call id"
            )
        if rec.state == "awaiting" and rec.request_id:
            req = await self._db(self.store.get_request, rec.request_id)
            if req.status == "pending":
                return _awaiting(req)
            rec = await self._db(self.store.get_call, rec.call_id)
        if rec.state == "started" and _Owner.alive(rec.owner) is not True:
            # Dead here, or on another host (the store's sweep judges by its lease).
            await self._db(self.store.in_doubt)
            rec = await self._db(self.store.get_call, rec.call_id)
        if rec.state == "in_doubt":
            return NotRun(Status.IN_DOUBT, (
                f"call {rec.call_id} started but its process ended before recording the "
                "outcome; it will not be run again. Check its effects, then make a new call "
                "with a new call id if it is still needed"), rec.call_id).to_dict()
        if isinstance(rec.result, dict):
            return {**rec.result, "replayed": True}
        return NotRun(Status.RUNNING, f"call {rec.call_id} is already {rec.state}; it will not "
                      "be started twice", rec.call_id).to_dict()

    # -- helpers ---------------------------------------------------------------------

    def _tool(self, name: str) -> BaseTool:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownToolError(f"unknown tool {name!r}; this runner has: {known}") from None

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if not self._offload:
            return fn(*args, **kwargs)
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


_APPROVALS: dict[str, ToolConfirmation] = {}

#: Answers people type that are not answers the gate reads (it needs a bool or a model).
_WORDS = {"yes", "y", "no", "n", "ok", "approve", "approved", "deny", "denied", "reject",
          "once", "always", "session"}


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


def _outer_context() -> dict[str, Any]:
    """State and actions of the agent loop this call runs inside, if any."""
    outer = OUTER_CALL.get()
    if outer is None:
        return {}
    return {"state": outer.state, "actions": outer.actions}


def _approval(hint: str, payload: Any) -> ToolConfirmation:
    """The `ToolConfirmation` an approved call runs with. Without a payload it is one
    frozen (immutable) instance per hint, shared; a few hundred hints are kept."""
    if payload is not None:
        return ToolConfirmation(confirmed=True, hint=hint, payload=payload)
    confirmation = _APPROVALS.get(hint)
    if confirmation is None:
        confirmation = ToolConfirmation(confirmed=True, hint=hint, payload=None)
        if len(_APPROVALS) < 256:
            _APPROVALS[hint] = confirmation
    return confirmation


def _shown(tool: BaseTool, request: ConfirmationRequest,
           args: dict[str, Any]) -> dict[str, Any]:
    """What the human was shown, with the tool's own rendering of its arguments."""
    try:
        rendered = tool.render_args(args)
    except Exception:  # a rendering that fails falls back to the arguments as JSON
        rendered = None
    return shown(request, args, rendered)


def _expired(req: _Request) -> bool:
    return req.expires_at is not None and time.time() > req.expires_at.timestamp()


def _rule_subjects(tool: BaseTool, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
    """The tool's parsed commands for a rule to cover; a failing parse covers nothing."""
    try:
        subjects = tool.rule_subjects(args)
    except Exception:
        return ()
    if subjects is None:
        return None
    return tuple(tuple(str(word) for word in argv) for argv in subjects)


def _args_diff(old: dict[str, Any], new: dict[str, Any], new_digest: str) -> dict[str, Any]:
    """What an edit changed, key by key, and the digest of the edited call."""
    return {
        "changed": {k: {"old": old[k], "new": new[k]} for k in sorted(old.keys() & new.keys())
                    if old[k] != new[k]},
        "added": {k: new[k] for k in sorted(new.keys() - old.keys())},
        "removed": {k: old[k] for k in sorted(old.keys() - new.keys())},
        "new_digest": new_digest,
    }


def _awaiting(req: _Request, message: str | None = None) -> dict[str, Any]:
    return Awaiting(req.id, req.call_id, req.tool, req.hint, message).to_dict()
