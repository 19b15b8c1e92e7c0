"""Google ADK integration: our approval gate inside a real ADK agent.

Two pieces, usable together or apart:

- `ApprovalPlugin`, an ADK plugin (``Runner(..., plugins=[ApprovalPlugin(provider)])``)
  that answers the confirmations ADK's own tools ask for: a `FunctionTool` with
  ``require_confirmation`` (a flag or a predicate), ADK's `ExecuteBashTool`, and any tool
  that calls ``tool_context.request_confirmation()`` itself. The question goes to one of
  our `ConfirmationProvider`s (terminal, callback, web page, queue) instead of a round
  trip through the client.
- `to_adk_tool(tool, runner=...)`, which makes one of our tools (`ExecuteBashTool`, a
  gated `FunctionTool`, any `BaseTool`) an ADK tool. Its ``run_async`` is
  ``runner.call(name, args, call_id=<ADK's function call id>)``, so the tool's policy,
  the gate, the grants and the journal are exactly those of the `ToolRunner`.

Both bind every approval to ADK's function call id and the SHA-256 digest of the exact
arguments (`args_digest`), recorded in an `ApprovalStore`; a grant is used once. So:

- a denial is enforced: the tool is never invoked, the model reads the human's reason;
- a confirmation replayed by the client, or the same call id sent again by the model,
  returns the recorded result and never runs the tool a second time;
- a confirmation whose arguments differ from the ones the human saw runs nothing;
- a confirmation the client sends for a call that never asked for one (one it planted)
  runs nothing.

When the provider leaves a request pending (no provider, or ``on_timeout="pending"``),
ADK's own round trip takes over: ADK emits its ``adk_request_confirmation`` call, and
the client's answer is applied to that same stored request, once.

Usage::

    from google.adk.apps import App
    from google.adk.tools import FunctionTool
    from sandbox import CallbackConfirmationProvider, ExecuteBashTool, ToolRunner
    from sandbox.integrations.adk import ApprovalPlugin, to_adk_tools

    ours = ToolRunner([ExecuteBashTool(workspace=ws, policy=policy)], provider=my_provider)
    agent = LlmAgent(name="ops", model=..., tools=[
        FunctionTool(drop_table, require_confirmation=True),  # ADK's, answered by the plugin
        *to_adk_tools(ours),                                   # ours, behind our runner
    ])
    app = App(name="ops", root_agent=agent,
              plugins=[ApprovalPlugin(CallbackConfirmationProvider(ask_in_my_ui))])
"""

from __future__ import annotations

import contextvars
import copy
import weakref
from dataclasses import dataclass, field
from typing import Any

try:
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.base_tool import BaseTool as AdkBaseTool
    from google.adk.tools.tool_confirmation import ToolConfirmation as AdkToolConfirmation
    from google.adk.tools.tool_context import ToolContext as AdkToolContext
    from google.genai import types as genai_types
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"sandbox.integrations.adk needs google-adk ({exc}); install it with "
        "pip install 'sandbox[adk]'"
    ) from exc

try:  # ADK's bash tool appeared in 1.x; without it there is simply nothing to special-case.
    from google.adk.tools import bash_tool as _adk_bash
except ImportError:  # pragma: no cover
    _adk_bash = None  # type: ignore[assignment]

from sandbox.approval.gate.results import Status
from sandbox.approval.models import Decision, args_digest
from sandbox.approval.providers import ConfirmationProvider
from sandbox.approval.runner import ToolRunner
from sandbox.approval.store import ApprovalStore, open_store
from sandbox.audit import AuditLog
from sandbox.errors import ConfigurationError, DuplicateCallError, UnknownCallError
from sandbox.tools.base import BaseTool, ToolArgumentError, confirmation_hint_text
from sandbox.tools.context import OUTER_CALL, EventActions, OuterCall, ToolContext
from sandbox.tools.model_view import for_model

__all__ = ["ApprovalPlugin", "GatedAdkTool", "to_adk_tool", "to_adk_tools"]

#: The channel name recorded for answers that came back through ADK's client round trip.
CLIENT_CHANNEL = "adk-client"


# -- adapters: our tools as ADK tools --------------------------------------------------


class GatedAdkTool(AdkBaseTool):
    """One of our tools as an ADK tool; every call goes through ``runner.call``.

    The declaration is the tool's own JSON schema. ADK's function call id becomes the
    gate's call id, so the grant, the journal and replay protection key on it. When the
    runner's provider answers, the tool runs (or not) inside this one call; when the
    request stays pending, ADK asks its client, and the answer that comes back is
    applied to the stored request (`ToolRunner.resume`), with the arguments checked.
    """

    def __init__(self, tool: BaseTool, runner: ToolRunner) -> None:
        if runner.tools.get(tool.name) is not tool:
            raise ConfigurationError(
                f"the runner passed for {tool.name!r} does not hold this tool; build it as "
                f"ToolRunner([... {tool.name} ...]) or use to_adk_tools(runner)"
            )
        super().__init__(
            name=tool.name, description=tool.description, custom_metadata=tool.custom_metadata
        )
        self.tool = tool
        self.runner = runner

    def _get_declaration(self) -> genai_types.FunctionDeclaration:
        return genai_types.FunctionDeclaration(
            name=self.name,
            description=self.description,
            parameters_json_schema=self.tool.parameters_schema(),
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: AdkToolContext) -> Any:
        call_id = tool_context.function_call_id
        # The tool reads the ADK session's state, and what it writes (and its other
        # actions) goes back into the ADK event, as with ADK's own tools.
        outer = OuterCall(state=tool_context.state.to_dict())
        token = OUTER_CALL.set(outer)
        try:
            if tool_context.tool_confirmation is not None:
                if not call_id:
                    return _refused("a confirmation arrived without a function call id")
                result = await _apply_client_answer(
                    self.runner, self.name, args, call_id, tool_context.tool_confirmation
                )
            else:
                result = await _call(self.runner, self.name, args, call_id)
        finally:
            OUTER_CALL.reset(token)
        _hand_actions_to_adk(outer.actions, tool_context)
        return _hand_pending_to_adk(self.runner, for_model(result), tool_context)


def to_adk_tool(tool: BaseTool, *, runner: ToolRunner | None = None) -> GatedAdkTool:
    """Make one of our tools an ADK tool that runs behind ``runner``'s gate.

    Without ``runner``, the tool gets a runner of its own with no provider: a call that
    needs approval waits for the answer from ADK's client (``adk_request_confirmation``).
    """
    return GatedAdkTool(tool, runner if runner is not None else ToolRunner([tool]))


def to_adk_tools(runner: ToolRunner) -> list[GatedAdkTool]:
    """Every tool of ``runner`` as an ADK tool, for ``LlmAgent(tools=...)``."""
    return [GatedAdkTool(tool, runner) for tool in runner.tools.values()]


# -- the plugin: ADK's own tools answered by our providers -----------------------------


@dataclass
class _AdkCall:
    """One ADK function call while our gate handles it (the proxy tool reads it)."""

    tool: AdkBaseTool
    context: AdkToolContext
    args: dict[str, Any]
    hint: str | None = None
    payload: Any = None
    asked_by_tool: bool = False
    ran_with: dict[str, Any] | None = None
    verdicts: dict[str, str | None] = field(default_factory=dict)

    def is_bash(self) -> bool:
        return _adk_bash is not None and isinstance(self.tool, _adk_bash.ExecuteBashTool)

    async def confirmation_hint(self, args: dict[str, Any]) -> str | None:
        """Would ADK ask a human before running the tool with these arguments?"""
        key = args_digest(self.tool.name, args)
        if key in self.verdicts:
            return self.verdicts[key]
        if self.is_bash():
            hint: str | None = f"Please approve or reject the bash command: {args.get('command')}"
        elif await self.tool.check_require_confirmation(args, self.context):
            hint = confirmation_hint_text(self.tool.name)
        elif self.asked_by_tool:
            # The tool asked from inside for the original arguments; edited ones cannot
            # be judged without running it, so they are asked about again.
            hint = self.hint or confirmation_hint_text(self.tool.name)
        else:
            hint = None
        self.verdicts[key] = hint
        return hint

    def bash_refusal(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """ADK's bash policy check, before a human is bothered with a blocked command."""
        if not self.is_bash():
            return None
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return {"error": "Command is required."}
        validate = getattr(_adk_bash, "_validate_command", None)
        policy = getattr(self.tool, "_policy", None)
        if validate is None or policy is None:
            return None  # the tool checks again itself before running anything
        error = validate(command, policy)
        return None if error is None else {"error": error}


_CURRENT: contextvars.ContextVar[_AdkCall] = contextvars.ContextVar("sandbox_adk_call")


class _AdkToolProxy(BaseTool):
    """Stands in the gate for the ADK tool of the current call (by name)."""

    async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
        return _CURRENT.get().bash_refusal(args)

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        call = _CURRENT.get()
        if call.asked_by_tool and call.ran_with is None and args == call.args:
            return None  # the tool's own request is replayed in run_async, with its payload
        return await call.confirmation_hint(args)

    def describe(self, args: dict[str, Any]) -> dict[str, Any]:
        call = _CURRENT.get()
        if call.is_bash():
            return {"workspace": str(getattr(call.tool, "_workspace", "")),
                    "policy": repr(getattr(call.tool, "_policy", None))}
        return {}

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        call = _CURRENT.get()
        confirmation = tool_context.tool_confirmation
        if confirmation is None and call.asked_by_tool and call.ran_with is None:
            # ADK already ran the tool once and it asked; ask the same question here.
            call.ran_with = args
            tool_context.request_confirmation(hint=call.hint, payload=call.payload)
            return {"status": "awaiting_confirmation"}
        call.ran_with = args
        ctx = call.context
        ctx.tool_confirmation = (
            AdkToolConfirmation(confirmed=True, hint=confirmation.hint,
                                payload=confirmation.payload)
            if confirmation is not None
            else None
        )
        skip = ctx.actions.skip_summarization
        result = await call.tool.run_async(args=copy.deepcopy(args), tool_context=ctx)
        asked = ctx.actions.requested_tool_confirmations.pop(tool_context.function_call_id or "",
                                                            None)
        if asked is not None:
            ctx.actions.skip_summarization = skip
            tool_context.request_confirmation(hint=asked.hint, payload=asked.payload)
        return result


class ApprovalPlugin(BasePlugin):
    """Answers ADK's tool confirmations through one of our `ConfirmationProvider`s.

    ``provider`` is any provider: `AutoApprove`, `AutoDeny`, `CallbackConfirmationProvider`,
    a terminal, web or queue provider. ``None`` keeps every request pending in the store
    and lets ADK's client answer it (``adk_request_confirmation``), still bound to the
    call id and arguments and applied once.

    Hook: ``before_tool_callback``. It is the last point at which ADK hands a plugin the
    tool, the exact arguments and the call id *before* anything runs, and a dict
    returned from it replaces the tool's run, so a denial cannot be bypassed. The gated
    call runs inside that hook through a `ToolRunner` (the grant is claimed and the tool
    started in the same step, with the arguments the human approved: nothing in
    between can change them). Calls that need no confirmation are left to ADK.
    ``after_tool_callback`` catches tools that ask from inside ``run_async`` and routes
    their question through the same gate.

    Each ADK session (app, user, session id) is the gate's session: an approval "for
    this session" covers that ADK session only, and a request asked in one session is
    never applied from another.
    """

    def __init__(
        self,
        provider: ConfirmationProvider | None = None,
        *,
        store: ApprovalStore | None = None,
        store_path: str | None = None,
        audit: AuditLog | None = None,
        audit_path: str | None = None,
        approval_ttl: float | None = None,
        name: str = "sandbox_approvals",
    ) -> None:
        super().__init__(name=name)
        if store is not None and store_path is not None:
            raise ConfigurationError("pass either store or store_path, not both")
        if audit is not None and audit_path is not None:
            raise ConfigurationError("pass either audit or audit_path, not both")
        self.provider = provider
        self.store = store if store is not None else open_store(store_path)
        self.audit = audit if audit is not None else AuditLog(audit_path)
        self.approval_ttl = approval_ttl
        # One runner per (ADK session, tool): the runner's session id is the ADK
        # session's, so "approve for this session" covers that session only, and a
        # request is applied only from the session it was asked in.
        self._runners: dict[tuple[str, str], ToolRunner] = {}
        # Contexts of the calls answered in before_tool_callback, so after_tool_callback
        # leaves them alone (weak: a context ADK drops is forgotten with it).
        self._answered: weakref.WeakSet[AdkToolContext] = weakref.WeakSet()
        if provider is not None and not isinstance(provider, ConfirmationProvider):
            raise ConfigurationError(
                f"{type(provider).__name__} is not a ConfirmationProvider: it needs "
                "name, timeout, on_timeout and an async confirm(request) method"
            )

    async def before_tool_callback(
        self, *, tool: AdkBaseTool, tool_args: dict[str, Any], tool_context: AdkToolContext
    ) -> dict[str, Any] | None:
        if isinstance(tool, GatedAdkTool):
            return None  # our own tool behind its own runner: gated there
        call_id = tool_context.function_call_id
        call = _AdkCall(tool=tool, context=tool_context, args=copy.deepcopy(tool_args))
        answer = tool_context.tool_confirmation
        if answer is None:
            try:
                hint = await call.confirmation_hint(call.args)
            except Exception:
                hint = "checking whether this call needs confirmation failed"
                call.verdicts.clear()  # the gate evaluates again and fails closed
            if hint is None:
                return None
            call.hint = hint
        if not call_id:
            return _refused(f"{tool.name} needs confirmation but ADK gave the call no id")
        try:
            runner = self._runner(tool.name, tool_context)
        except ValueError as exc:
            return _refused(str(exc))
        self._answered.add(tool_context)
        token = _CURRENT.set(call)
        try:
            if answer is not None:
                result = await _apply_client_answer(runner, tool.name, call.args, call_id, answer)
            else:
                result = await _call(runner, tool.name, call.args, call_id)
        finally:
            _CURRENT.reset(token)
        return self._finish(runner, call, tool_args, result)

    async def after_tool_callback(
        self, *, tool: AdkBaseTool, tool_args: dict[str, Any], tool_context: AdkToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        if tool_context in self._answered:
            self._answered.discard(tool_context)
            return None
        call_id = tool_context.function_call_id
        if isinstance(tool, GatedAdkTool) or not call_id:
            return None
        asked = tool_context.actions.requested_tool_confirmations.pop(call_id, None)
        if asked is None:
            return None
        # The tool asked from inside run_async (ADK ran it, it returned early asking):
        # route that question through our gate, then run it again if approved.
        call = _AdkCall(tool=tool, context=tool_context, args=copy.deepcopy(tool_args),
                        hint=asked.hint, payload=asked.payload, asked_by_tool=True)
        tool_context.actions.skip_summarization = None
        runner = self._runner(tool.name, tool_context)
        token = _CURRENT.set(call)
        try:
            outcome = await _call(runner, tool.name, call.args, call_id)
        finally:
            _CURRENT.reset(token)
        return self._finish(runner, call, tool_args, outcome)

    def _finish(self, runner: ToolRunner, call: _AdkCall, tool_args: dict[str, Any],
                result: dict[str, Any]) -> dict[str, Any]:
        result = for_model(result)
        if call.ran_with is not None and call.ran_with != call.args \
                and result.get("status") != Status.AWAITING:
            # Tell the model (and later callbacks) what really ran, so it does not retry
            # the original arguments the human changed.
            result = {**result, "edited_args": call.ran_with,
                      "note": "a human edited the arguments before this call ran"}
            tool_args.clear()
            tool_args.update(call.ran_with)
        return _hand_pending_to_adk(runner, result, call.context)

    def _runner(self, name: str, context: AdkToolContext) -> ToolRunner:
        session = _session_key(context)
        runner = self._runners.get((session, name))
        if runner is None:
            try:
                proxy = _AdkToolProxy(name=name, description="")
            except ValueError as exc:
                raise ValueError(
                    f"tool {name!r} cannot be gated: {exc}; the call was not run"
                ) from None
            runner = ToolRunner([proxy], provider=self.provider, store=self.store,
                                audit=self.audit, approval_ttl=self.approval_ttl,
                                session_id=session)
            if len(self._runners) >= _MAX_RUNNERS:
                # A runner holds no state of its own (the store does): dropping the
                # oldest only means building it again if its session comes back.
                del self._runners[next(iter(self._runners))]
            self._runners[(session, name)] = runner
        return runner


_MAX_RUNNERS = 4096


def _session_key(context: AdkToolContext) -> str:
    """The ADK session a call belongs to, as the gate's session id."""
    session = context.session
    return f"adk:{session.app_name}:{session.user_id}:{session.id}"


# -- shared: one call, one answer, pending hand-over ------------------------------------


async def _call(runner: ToolRunner, name: str, args: dict[str, Any],
                call_id: str | None) -> dict[str, Any]:
    try:
        return await runner.call(name, args, call_id=call_id)
    except DuplicateCallError as exc:
        return {"status": "rejected", "error": f"{exc}. Nothing was run."}


async def _apply_client_answer(runner: ToolRunner, name: str, args: dict[str, Any],
                               call_id: str, answer: AdkToolConfirmation) -> dict[str, Any]:
    """Apply a confirmation that came back from ADK's client, if the gate asked for it.

    Only a request that is still pending in the store, for this call id and these exact
    arguments, can be answered, and only once. Anything else (a planted confirmation, a
    replay, other arguments) runs nothing; a replay gets the recorded outcome.
    """
    try:
        record = await _in_thread(runner, runner.store.get_call, call_id)
    except UnknownCallError:
        return _refused(
            f"a confirmation arrived for call {call_id}, but this gate never asked for one "
            "(a confirmation the client made up, or one from before a restart of an "
            "in-memory store); the tool was not run"
        )
    try:
        tool = runner.tools.get(name)
        if tool is not None:  # as the gate digested them: validated, defaults filled
            try:
                args = tool.validate_args(args)
            except ToolArgumentError as exc:
                return _refused(f"the confirmation for call {call_id} carries invalid "
                                f"arguments ({exc.message}); the tool was not run")
        digest = args_digest(name, args)
    except ConfigurationError as exc:
        return _refused(str(exc))
    if record.tool != name or record.digest != digest:
        return _refused(
            f"the confirmation for call {call_id} carries other arguments than the ones "
            "the human was asked about; the tool was not run"
        )
    if record.state == "awaiting" and record.request_id:
        request = await _in_thread(runner, runner.store.get_request, record.request_id)
        if request.status == "pending":
            decision = _client_decision(answer)
            result = await runner.resume(request.id, decision, args=args,
                                         channel=CLIENT_CHANNEL)
            if decision.reason == NO_REASON and result.get("status") == Status.DENIED:
                # A plain "no" from ADK's client: the model reads ADK's own words, as
                # it would from ADK's tool (the store and audit keep the denial).
                return {"error": ADK_REJECTED}
            return result
    # Decided already (by a provider, another channel, or this very confirmation before):
    # the journal answers; a finished call is never started again.
    return await _call(runner, name, args, call_id)


def _client_decision(answer: AdkToolConfirmation) -> Decision:
    if answer.confirmed:
        return Decision.approve(payload=answer.payload, channel=CLIENT_CHANNEL)
    reason = None
    if isinstance(answer.payload, dict) and isinstance(answer.payload.get("reason"), str):
        reason = answer.payload["reason"]
    return Decision.deny(reason or NO_REASON, channel=CLIENT_CHANNEL)


#: The reason recorded when ADK's client says no without one.
NO_REASON = "rejected in the ADK client"
#: What ADK's `FunctionTool` returns to the model for a rejected confirmation.
ADK_REJECTED = "This tool call is rejected."


def _hand_pending_to_adk(runner: ToolRunner, result: dict[str, Any],
                         context: AdkToolContext) -> dict[str, Any]:
    """A request left pending becomes ADK's own confirmation request to its client."""
    if result.get("status") != Status.AWAITING or not context.function_call_id:
        return result
    payload = None
    asked_by_tool = False
    confirmation_id = result.get("confirmation_id")
    if isinstance(confirmation_id, str):
        try:
            request = runner.store.get_request(confirmation_id)
        except LookupError:
            pass
        else:
            payload, asked_by_tool = request.payload, request.kind == "tool"
    context.request_confirmation(hint=str(result.get("hint") or ""), payload=payload)
    if not asked_by_tool:
        # As ADK's require_confirmation does: not a result for the model to act on.
        # A tool's own request_confirmation leaves the model its turn, as in ADK.
        context.actions.skip_summarization = True
    return result


def _hand_actions_to_adk(actions: EventActions, context: AdkToolContext) -> None:
    """What our tool did to the session (state writes, flow actions), in ADK's event."""
    for key, value in actions.state_delta.items():
        context.state[key] = value
    if actions.skip_summarization is not None:
        context.actions.skip_summarization = actions.skip_summarization
    if actions.transfer_to_agent is not None:
        context.actions.transfer_to_agent = actions.transfer_to_agent
    if actions.escalate is not None:
        context.actions.escalate = actions.escalate


def _refused(message: str) -> dict[str, Any]:
    return {"status": "rejected", "error": message}


async def _in_thread(runner: ToolRunner, fn: Any, *args: Any) -> Any:
    if not runner.store.blocking:
        return fn(*args)
    import anyio.to_thread

    return await anyio.to_thread.run_sync(fn, *args)
