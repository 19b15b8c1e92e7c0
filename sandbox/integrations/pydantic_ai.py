"""Pydantic AI integration: the approval gate inside a Pydantic AI agent.

Two pieces:

- `SandboxApprovalToolset(wrapped, ...)`, a `WrapperToolset` around any Pydantic AI
  toolset (a `FunctionToolset` of your functions, an MCP server...). Every call of a tool
  that needs approval (declared ``requires_approval=True``, chosen by
  ``require_confirmation``, or raising ``ApprovalRequired`` itself) goes through a
  `ToolRunner`: its provider, store, grants, journal and audit log.
- `toolset(runner)`, this library's tools (`ExecuteBashTool`, `FunctionTool`, any
  `BaseTool`) as a Pydantic AI toolset behind ``runner``'s gate.

A question nobody answers at once (no provider, or a provider that leaves it pending)
becomes Pydantic AI's own deferred flow: the call raises ``ApprovalRequired``, the run
ends with ``DeferredToolRequests``, and the ``DeferredToolResults`` passed to the next run
are applied to the stored request: ``True`` / ``ToolApproved()`` approves it,
``ToolApproved(override_args=...)`` approves the edited call (validated, the policy's
hard refusals checked again, run once), ``ToolDenied(message)`` denies it with that
reason (recorded at once, not left to expire). The request is in the store all along, so
the web page (``sandbox approvals serve``), the CLI and the queue see it and can answer
it from another process; `SandboxApprovalToolset.results_from_store` turns their answers
into ``DeferredToolResults``.

What the gate adds to Pydantic AI's own approvals (measured by tests/integrations/test_pydantic_ai.py):
an approval is bound to the exact arguments it was asked for (arguments edited in the
saved history are refused), it is used once (replaying a history with the same approval
returns the recorded result and runs nothing), an approval for a call that was never
asked runs nothing (the call is asked about like a new one), and the question is visible
to, and answerable from, every channel. Deliberate differences from Pydantic AI are listed
in the README ("Pydantic AI").

Usage::

    from pydantic_ai import Agent, DeferredToolRequests
    from sandbox.integrations.pydantic_ai import SandboxApprovalToolset, toolset

    agent = Agent(model, output_type=[str, DeferredToolRequests], toolsets=[
        SandboxApprovalToolset(my_function_toolset, store="approvals.db"),
        toolset(ToolRunner([ExecuteBashTool(workspace=ws, policy=policy)],
                           store_path="approvals.db")),
    ])
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

try:
    import pydantic_core
    from pydantic_ai import (
        ApprovalRequired,
        CallDeferred,
        DeferredToolRequests,
        DeferredToolResults,
        ModelRetry,
        RunContext,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.exceptions import ToolFailed
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"sandbox.integrations.pydantic_ai needs pydantic-ai-slim ({exc}); install it with "
        "pip install 'sandbox[pydantic-ai]'"
    ) from exc

from sandbox.approval.models import Decision
from sandbox.approval.providers import ConfirmationProvider
from sandbox.approval.runner import ToolRunner
from sandbox.approval.store import ApprovalStore, open_store
from sandbox.audit import AuditLog
from sandbox.errors import ConfigurationError
from sandbox.integrations.common import GateOutcome, answer_call, run_call, session_key
from sandbox.tools.base import BaseTool, ToolArgumentError
from sandbox.tools.context import ToolContext

__all__ = ["SandboxApprovalToolset", "results_from_store", "toolset"]

#: The channel recorded for answers that came back as Pydantic AI ``DeferredToolResults``.
CHANNEL = "pydantic-ai"

#: ``require_confirmation``: as `ApprovalRequiredToolset`'s ``approval_required_func``
#: (sync or async), or a bool for every call.
RequireConfirmation = (
    bool | Callable[[RunContext[Any], ToolDefinition, dict[str, Any]], bool | Awaitable[bool]]
)

_PYDANTIC_VALIDATOR = pydantic_core.SchemaValidator(
    pydantic_core.core_schema.dict_schema(pydantic_core.core_schema.str_schema(),
                                          pydantic_core.core_schema.any_schema()))


def _json(value: Any) -> Any:
    """A value as JSON data (what the gate digests and the store records)."""
    return pydantic_core.to_jsonable_python(value, bytes_mode="base64",
                                            fallback=lambda v: repr(v))


def _hint(name: str) -> str:
    return f"Approve or deny the tool call {name}()."


# -- one call on its way through the gate -------------------------------------------------


@dataclass
class _Call:
    """A wrapped toolset's call while the gate handles it (the proxy tool reads it)."""

    toolset: AbstractToolset[Any]
    tool: ToolsetTool[Any]
    ctx: RunContext[Any]
    args: dict[str, Any]  # as Pydantic AI validated them (passed to the wrapped toolset)
    json_args: dict[str, Any]  # their JSON form: what the gate digests
    needs: Callable[[dict[str, Any]], Awaitable[bool]]
    #: What the wrapped tool returned, as it returned it (the gate records its JSON form).
    raw: Any = None
    ran: bool = False
    #: ModelRetry / ToolFailed / CallDeferred raised by the wrapped tool: raised again to
    #: Pydantic AI once the gate has recorded the call as failed.
    control: BaseException | None = None
    #: The metadata of an ``ApprovalRequired`` the wrapped tool raised itself.
    asked: dict[str, Any] | None = None


_CURRENT: ContextVar[_Call] = ContextVar("sandbox_pydantic_ai_call")


class _ToolProxy(BaseTool):
    """Stands in the gate for the wrapped toolset's tool of the current call."""

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolArgumentError(f"arguments to {self.name} must be a JSON object")
        call = _CURRENT.get(None)
        if call is None or args == call.json_args:
            return args
        try:  # edited arguments: validated as Pydantic AI validates the model's
            validated = call.tool.args_validator.validate_python(
                args, context=call.ctx.validation_context)
        except pydantic_core.ValidationError as exc:
            raise ToolArgumentError(
                f"the arguments do not fit {self.name}: "
                + "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}"
                            for e in exc.errors())) from None
        return dict(_json(validated))  # the form that is digested, shown and run

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        call = _CURRENT.get(None)
        if call is None:
            return _hint(self.name)  # nothing to judge with: ask (fail closed)
        return _hint(self.name) if await call.needs(args) else None

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        call = _CURRENT.get()
        approved = tool_context.tool_confirmation is not None
        ctx = replace(call.ctx, tool_call_approved=approved)
        tool_args = call.args if args == call.json_args else \
            call.tool.args_validator.validate_python(args,
                                                     context=call.ctx.validation_context)
        try:
            value = await call.toolset.call_tool(self.name, tool_args, ctx, call.tool)
        except ApprovalRequired as exc:
            if approved:
                raise RuntimeError(f"{self.name} asked for approval again after it was "
                                   "approved") from None
            call.asked = dict(exc.metadata or {})
            tool_context.request_confirmation(hint=_hint(self.name), payload=call.asked or None)
            return None
        except (ModelRetry, ToolFailed, CallDeferred) as exc:
            call.control = exc
            raise
        call.raw, call.ran = value, True
        return _json(value)


# -- the gate, shared by both toolsets -------------------------------------------------


class _Gate:
    """Runners per (session, tool) and the deferred flow, for one toolset and its copies
    (Pydantic AI copies a toolset for every run and step)."""

    def __init__(self, *, provider: ConfirmationProvider | None, store: ApprovalStore | str | None,
                 audit: AuditLog | str | None, approval_ttl: float | None,
                 session_id: str | None, runner: ToolRunner | None = None) -> None:
        if provider is not None and not isinstance(provider, ConfirmationProvider):
            raise ConfigurationError(
                f"{type(provider).__name__} is not a ConfirmationProvider: it needs "
                "name, timeout, on_timeout and an async confirm(request) method")
        self.runner = runner
        self.provider = provider
        # A store object (any backend), or a reference: None, a SQLite path, a URL.
        self.store = open_store(store) if store is None or isinstance(store, str) else store
        self.audit = audit if isinstance(audit, AuditLog) else AuditLog(audit,
                                                                        anchor=self.store)
        self.approval_ttl = approval_ttl
        self.session_id = session_id
        self._runners: dict[tuple[str | None, str], ToolRunner] = {}
        #: The wrapped tools declared ``requires_approval=True``, by name (last listing).
        self.declared: dict[str, bool] = {}

    def session(self, ctx: RunContext[Any]) -> str | None:
        """The gate's session for a run: the one given, else the Pydantic AI
        conversation (a resumed run carries its ``conversation_id`` in the history)."""
        if self.session_id is not None:
            return self.session_id
        if self.runner is not None and self.runner.session_id is not None:
            return self.runner.session_id
        return session_key(CHANNEL, ctx.conversation_id) if ctx.conversation_id else None

    def runner_for(self, ctx: RunContext[Any], name: str) -> ToolRunner | None:
        session = self.session(ctx)
        if self.runner is not None:
            if name not in self.runner.tools:
                return None
            return self.runner.for_session(session)
        runner = self._runners.get((session, name))
        if runner is None:
            try:
                proxy = _ToolProxy(name=name, description="")
            except ValueError:
                return None
            runner = ToolRunner([proxy], provider=self.provider, store=self.store,
                                audit=self.audit, approval_ttl=self.approval_ttl,
                                session_id=session)
            if len(self._runners) >= 4096:
                del self._runners[next(iter(self._runners))]
            self._runners[(session, name)] = runner
        return runner

    async def call(self, runner: ToolRunner, name: str, json_args: dict[str, Any],
                   ctx: RunContext[Any], current: _Call | None,
                   tool: ToolsetTool[Any]) -> Any:
        """One call through the gate, handed back as Pydantic AI expects it."""
        call_id = ctx.tool_call_id
        token = _CURRENT.set(current) if current is not None else None
        try:
            if ctx.tool_call_approved:
                outcome = await self._approved(runner, name, json_args, ctx, tool)
            else:
                outcome = await run_call(runner, name, json_args, call_id)
        finally:
            if token is not None:
                _CURRENT.reset(token)
        return _handed_back(outcome, current)

    async def _approved(self, runner: ToolRunner, name: str, json_args: dict[str, Any],
                        ctx: RunContext[Any], tool: ToolsetTool[Any]) -> GateOutcome:
        """A call Pydantic AI approved (``DeferredToolResults``): applied to the stored
        request. The arguments in the message history are the ones the model proposed;
        arguments that differ from them are the human's ``override_args`` (an edit)."""
        call_id = ctx.tool_call_id
        proposed = _proposed_args(ctx, call_id)
        base = json_args if proposed is None else _validated_json(tool, ctx, proposed)
        if not call_id:
            return await run_call(runner, name, json_args, None)
        rec, req = await runner.find(call_id)
        if rec is None:
            # Approved, but this gate never asked about this call (a planted approval,
            # or an approval layer outside this one): it is a new call here, and asks
            # its own question if it needs one.
            return await run_call(runner, name, json_args, call_id)
        if req is not None and req.status == "pending" and rec.state == "awaiting":
            if await _recorded_answer(runner, req.id) is not None:
                # Answered on the page or the CLI before this approval came back: the
                # first answer is the one applied.
                return await answer_call(runner, call_id, None, channel=CHANNEL)
        decision = Decision.approve(channel=CHANNEL) if json_args == base else \
            Decision.edit(json_args, channel=CHANNEL)
        return await answer_call(runner, call_id, decision, args=base, channel=CHANNEL)

    async def apply_denials(self, ctx: RunContext[Any]) -> None:
        """Record the ``ToolDenied`` answers of the last ``DeferredToolResults``: Pydantic
        AI never calls a toolset for a denied call, so the denial is read from the tool
        returns it put in the history and applied to the stored request. A call Pydantic
        AI ended otherwise while its request still waits (override arguments that failed
        its validation, a refusal) is closed the same way: its request would otherwise
        wait on the page for an answer that could only run it out of context."""
        request = next((m for m in reversed(ctx.messages) if isinstance(m, ModelRequest)),
                       None)
        if request is None:
            return
        for part in request.parts:
            if not (isinstance(part, ToolReturnPart) and part.outcome != "success"
                    and part.tool_call_id):
                continue
            runner = self.runner_for(ctx, part.tool_name)
            if runner is None:
                continue
            rec, req = await runner.find(part.tool_call_id)
            if rec is None or req is None or rec.tool != part.tool_name \
                    or req.status != "pending" or rec.state != "awaiting":
                continue  # not ours, or decided already: nothing to record
            if part.outcome != "denied":
                await runner.deny(part.tool_call_id, (
                    f"Pydantic AI ended this call without running it ({part.outcome}: "
                    f"{part.model_response_str()})")[:2000], channel=CHANNEL)
            elif await _recorded_answer(runner, req.id) is not None:
                await runner.answer(part.tool_call_id, None, channel=CHANNEL)
            else:
                await runner.deny(part.tool_call_id, str(part.content), channel=CHANNEL)


def _handed_back(outcome: GateOutcome, current: _Call | None) -> Any:
    if current is not None and current.control is not None:
        raise current.control
    if outcome.tool_result:
        if outcome.ran and current is not None and current.ran:
            return current.raw  # exactly what the tool returned
        return outcome.value
    if outcome.awaiting:
        metadata = dict(current.asked or {}) if current is not None else {}
        metadata["confirmation_id"] = outcome.confirmation_id
        raise ApprovalRequired(metadata=metadata)
    if outcome.denied:
        return ToolDenied(outcome.message)
    raise ToolFailed(outcome.message)


def _validated_json(tool: ToolsetTool[Any], ctx: RunContext[Any],
                    args: dict[str, Any]) -> dict[str, Any]:
    """``args`` as Pydantic AI validates a call's arguments, as JSON: the form the first
    run digested (so ``"5"`` for an ``int`` compares equal to the ``5`` that was asked
    about). Arguments that do not validate are compared as they are (and refused)."""
    try:
        validated = tool.args_validator.validate_python(args, context=ctx.validation_context)
    except pydantic_core.ValidationError:
        return dict(_json(args))
    return dict(_json(validated))


def _proposed_args(ctx: RunContext[Any], call_id: str | None) -> dict[str, Any] | None:
    """The arguments of call ``call_id`` as the model proposed them (the history)."""
    if not call_id:
        return None
    for message in reversed(ctx.messages):
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
                    return part.args_as_dict()
    return None


async def _recorded_answer(runner: ToolRunner, confirmation_id: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = await runner._transitions.step(
        runner.store.get_answer, confirmation_id)
    return found


# -- the two toolsets --------------------------------------------------------------------


@dataclass
class SandboxApprovalToolset(WrapperToolset[Any]):
    """A `WrapperToolset` whose approvals go through this library's gate.

    ``require_confirmation``: None (the default) asks for tools declared
    ``requires_approval=True`` (and tools that raise ``ApprovalRequired`` themselves);
    True asks for every call; a function ``(ctx, tool_def, args) -> bool`` (sync or async,
    as `ApprovalRequiredToolset`'s) decides per call for the other tools (a tool declared
    ``requires_approval=True`` is always asked about). ``provider`` answers in the run
    (terminal, web page, callback, queue); without one, or when it leaves the request
    pending, the run ends with ``DeferredToolRequests``. ``store``: an `ApprovalStore` or a
    path / URL (share it with ``sandbox approvals serve`` and other processes). The
    session is ``session_id``, else the run's ``conversation_id``.
    """

    _: KW_ONLY
    provider: ConfirmationProvider | None = None
    require_confirmation: RequireConfirmation | None = None
    store: ApprovalStore | str | None = None
    audit: AuditLog | str | None = None
    approval_ttl: float | None = None
    session_id: str | None = None
    _gate: _Gate | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._gate is None:
            self._gate = _Gate(provider=self.provider, store=self.store, audit=self.audit,
                               approval_ttl=self.approval_ttl, session_id=self.session_id)

    @property
    def gate(self) -> _Gate:
        assert self._gate is not None
        return self._gate

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        await self.gate.apply_denials(ctx)
        return await super().for_run_step(ctx)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await super().get_tools(ctx)
        # A tool declared requires_approval=True is deferred by Pydantic AI before any
        # toolset is called; here the gate asks instead, so it is listed as a function.
        declared = self.gate.declared
        for name, tool in tools.items():
            declared[name] = tool.tool_def.kind == "unapproved"
        return {name: replace(tool, tool_def=replace(tool.tool_def, kind="function"))
                if tool.tool_def.kind == "unapproved" else tool
                for name, tool in tools.items()}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        runner = self.gate.runner_for(ctx, name)
        if runner is None:
            raise ToolFailed(f"tool {name!r} cannot be gated: its name is not usable; "
                             "the call was not run")
        declared = self.gate.declared.get(name)
        if declared is None:  # called without a listing first: read the wrapped one
            original = await self.wrapped.get_tools(ctx)
            declared = name in original and original[name].tool_def.kind == "unapproved"

        async def needs(args: dict[str, Any]) -> bool:
            if declared or self.require_confirmation is None:
                # A tool declared requires_approval=True is always asked about.
                return bool(declared)
            if isinstance(self.require_confirmation, bool):
                return self.require_confirmation
            verdict = self.require_confirmation(ctx, tool.tool_def, args)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return bool(verdict)

        json_args = _json(tool_args)
        current = _Call(self.wrapped, tool, ctx, tool_args, json_args, needs)
        return await self.gate.call(runner, name, json_args, ctx, current, tool)

    async def results_from_store(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """The answers given on other channels (web page, CLI, another process) to these
        requests, as ``DeferredToolResults`` for the next run; unanswered calls are left
        out (pass them again once answered)."""
        return await results_from_store(self.gate.store, requests)


@dataclass
class _RunnerToolset(AbstractToolset[Any]):
    """This library's tools as a Pydantic AI toolset (see `toolset`)."""

    runner: ToolRunner
    toolset_id: str | None = None
    _gate: _Gate | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._gate is None:
            self._gate = _Gate(provider=self.runner.provider, store=self.runner.store,
                               audit=self.runner.audit, approval_ttl=self.runner.approval_ttl,
                               session_id=None, runner=self.runner)

    @property
    def id(self) -> str | None:
        return self.toolset_id

    @property
    def gate(self) -> _Gate:
        assert self._gate is not None
        return self._gate

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        await self.gate.apply_denials(ctx)
        return self

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(name=name, description=tool.description,
                                        parameters_json_schema=tool.parameters_schema()),
                max_retries=1, args_validator=_PYDANTIC_VALIDATOR)
            for name, tool in self.runner.tools.items()
        }

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        runner = self.gate.runner_for(ctx, name)
        if runner is None:
            raise ToolFailed(f"unknown tool {name!r}; the call was not run")
        return await self.gate.call(runner, name, _json(tool_args), ctx, None, tool)

    async def results_from_store(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """See `SandboxApprovalToolset.results_from_store`."""
        return await results_from_store(self.runner.store, requests)


def toolset(runner: ToolRunner, *, id: str | None = None) -> _RunnerToolset:
    """``runner``'s tools as a Pydantic AI toolset: every call goes through its gate.

    A runner without a session id serves each Pydantic AI conversation as its own
    session (`ToolRunner.for_session`); one with a session id serves them all in it.
    """
    if not isinstance(runner, ToolRunner):
        raise ConfigurationError(
            f"toolset(runner) takes a ToolRunner, got {type(runner).__name__}; build one "
            "with ToolRunner([ExecuteBashTool(...), FunctionTool(fn), ...])")
    return _RunnerToolset(runner, id)


async def results_from_store(store: ApprovalStore,
                             requests: DeferredToolRequests) -> DeferredToolResults:
    """Answers recorded in ``store`` (the page, the CLI, a provider in another process)
    for ``requests.approvals``, as ``DeferredToolResults``: an approval is ``True``, an
    edit ``ToolApproved(override_args=...)``, a denial ``ToolDenied(reason)``. The gate
    checks each again when the next run applies it."""
    import anyio.to_thread

    def read() -> dict[str, bool | ToolApproved | ToolDenied]:
        found: dict[str, bool | ToolApproved | ToolDenied] = {}
        for part in requests.approvals:
            try:
                rec = store.get_call(part.tool_call_id)
            except LookupError:
                continue
            if rec.request_id is None:
                continue
            req = store.get_request(rec.request_id)
            answer = store.get_answer(req.id) if req.status == "pending" else \
                store.request_decision(req.id)
            if not answer:
                continue
            outcome = answer.get("outcome")
            if outcome == "approve" or req.status == "approved":
                found[part.tool_call_id] = True
            elif outcome == "edit" and isinstance(answer.get("args"), dict):
                found[part.tool_call_id] = ToolApproved(override_args=answer["args"])
            elif outcome == "deny" or req.status == "denied":
                found[part.tool_call_id] = ToolDenied(
                    str(answer.get("reason") or "The tool call was denied."))
        return found

    approvals = read() if not store.blocking else await anyio.to_thread.run_sync(read)
    return DeferredToolResults(approvals=dict(approvals))
