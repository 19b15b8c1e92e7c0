"""OpenAI Agents SDK integration: our tools and our approval gate inside ``agents.Runner``.

- `to_openai_tool(tool, runner=...)` / `to_openai_tools(runner)`: one of our tools
  (`ExecuteBashTool`, a gated `FunctionTool`, any `BaseTool`) as an ``agents.FunctionTool``.
  Its ``on_invoke_tool`` is ``runner.call(name, args, call_id=<the model's call id>)``, so
  the tool's policy, the gate, the single-use grants and the journal are the runner's.
- `shell_tool(bash, runner=...)`: an ``agents.ShellTool`` whose executor is our
  `ExecuteBashTool` (each command of a shell call is one gated call).
- `RunStateBridge(runner)`: the human's answer to an interrupted run. ``approve``,
  ``reject`` and ``apply_store_answers`` (answers given on the web page or the CLI) record
  the answer in the gate's store *and* in the ``RunState``.

How an approval flows. The SDK asks ``needs_approval`` before it runs a tool; ours asks
the gate (`ToolRunner.park`): when a human must confirm, the question is recorded in the
store at once (the web page, the CLI and the queue see it) and the run is interrupted
(``result.interruptions``), exactly as with the SDK's own ``needs_approval=True``.
``needs_approval`` never runs the tool, so the tool input guardrails the SDK runs
afterwards still stop a call they reject. The human answers through `RunStateBridge`
(or on the page, then ``apply_store_answers``); the answer waits in the store, and when
the run resumes the SDK runs the guardrails and then ``on_invoke_tool``, which applies
the answer to the stored request: bound to the call id and the SHA-256 digest of the
validated arguments, used once.

So, unlike ``RunState.approve`` alone:

- an approval placed in a saved state (``to_string``/``from_string``) for a call the gate
  never asked about, or for other arguments than the ones the human saw, runs nothing;
- resuming two copies of one saved state runs the tool once; the second gets the
  recorded output;
- a rejection made with `RunStateBridge.reject` is recorded (audited, the request closed
  at once), and the call id can never run afterwards.

A runner with a provider (a terminal, a callback, the web page waiting for an answer)
asks it inside ``on_invoke_tool``, after the guardrails; the run is not interrupted.
"""

from __future__ import annotations

import functools
import json
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

try:
    from agents import FunctionTool as AgentsFunctionTool
    from agents import RunContextWrapper, ShellTool
    from agents.items import ToolApprovalItem
    from agents.run_state import RunState
    from agents.tool import (
        DEFAULT_APPROVAL_REJECTION_MESSAGE,
        ShellCallOutcome,
        ShellCommandOutput,
        ShellCommandRequest,
        ShellResult,
        with_function_tool_failure_error_handler,
    )
    from agents.tool_context import ToolContext as AgentsToolContext
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"sandbox.integrations.openai_agents needs openai-agents ({exc}); install it with "
        "pip install 'sandbox[openai-agents]'"
    ) from exc

from sandbox.approval.gate.results import Status
from sandbox.approval.models import Decision, Remember
from sandbox.approval.runner import ToolRunner
from sandbox.bash.tool import ExecuteBashTool
from sandbox.errors import ConfigurationError, ConfirmationStateError, ConfirmationTimedOutError
from sandbox.integrations.common import GateOutcome, answer_call, run_call, session_key
from sandbox.tools.base import BaseTool

__all__ = [
    "CHANNEL",
    "RunStateBridge",
    "shell_tool",
    "to_openai_tool",
    "to_openai_tools",
]

_LOG = logging.getLogger(__name__)

#: The channel name recorded for answers given through `RunStateBridge`.
CHANNEL = "openai-agents"

#: Maps the run's context object (``RunContextWrapper.context``) to a session name, or
#: None for the runner's own session.
SessionOf = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class _Binding:
    """What the bridge needs to know about one SDK tool made here."""

    runner: ToolRunner
    tool: str  # our tool's name in the runner
    kind: Literal["function", "shell"]
    session_of: SessionOf | None


#: SDK tool name → binding, per runner (a runner is the unit a bridge answers for).
_BINDINGS: weakref.WeakKeyDictionary[ToolRunner, dict[str, _Binding]] = (
    weakref.WeakKeyDictionary())


def _bind(runner: ToolRunner, name: str, binding: _Binding) -> None:
    bound = _BINDINGS.setdefault(runner, {})
    old = bound.get(name)
    if old is not None and (old.tool, old.kind) != (binding.tool, binding.kind):
        raise ConfigurationError(
            f"two OpenAI tools named {name!r} on one runner; give one of them another name")
    bound[name] = binding


def _runner_for(runner: ToolRunner, session_of: SessionOf | None,
                context: Any) -> ToolRunner:
    """The runner of the run's session (``session_of(run context)``), else ``runner``."""
    if session_of is None:
        return runner
    name = session_of(context)
    if name is None:
        return runner
    return runner.for_session(session_key(CHANNEL, name))


def _check_holds(runner: ToolRunner, tool: BaseTool) -> None:
    if not isinstance(runner, ToolRunner):
        raise ConfigurationError(
            f"runner must be a ToolRunner, got {type(runner).__name__}")
    if runner.tools.get(tool.name) is not tool:
        raise ConfigurationError(
            f"the runner passed for {tool.name!r} does not hold this tool; build it as "
            f"ToolRunner([... {tool.name} ...]) or use to_openai_tools(runner)")


# -- function tools --------------------------------------------------------------------


def to_openai_tool(tool: BaseTool, *, runner: ToolRunner, name: str | None = None,
                   description: str | None = None, strict_json_schema: bool = False,
                   session_of: SessionOf | None = None) -> AgentsFunctionTool:
    """One of our tools as an ``agents.FunctionTool`` behind ``runner``'s gate.

    ``name``/``description`` default to the tool's. ``strict_json_schema`` is off by
    default because our tools' schemas are ordinary JSON schemas (optional fields, no
    ``additionalProperties: false``); the gate validates the arguments itself.
    ``session_of(context)`` names the gate session of a run from the context object
    given to ``Runner.run(..., context=...)`` (None: the runner's own session); pass the
    same function to `RunStateBridge`.
    """
    _check_holds(runner, tool)
    sdk_name = name or tool.name
    _bind(runner, sdk_name, _Binding(runner, tool.name, "function", session_of))

    async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any],
                             call_id: str) -> bool:
        gate = _runner_for(runner, session_of, ctx.context)
        return await _needs_approval(gate, tool.name, params, call_id)

    async def on_invoke_tool(ctx: AgentsToolContext[Any], arguments: str) -> Any:
        gate = _runner_for(runner, session_of, ctx.context)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return (f"An error occurred while parsing tool arguments. Please try again with "
                    f"valid JSON. Error: {exc}")
        if not isinstance(args, dict):
            return f"arguments to {sdk_name} must be a JSON object, got {type(args).__name__}"
        return _model_output(await run_call(gate, tool.name, args, ctx.tool_call_id))

    return AgentsFunctionTool(
        name=sdk_name,
        description=description if description is not None else tool.description,
        params_json_schema=tool.parameters_schema(),
        # As for the SDK's own function tools: an error (the store unreachable, say)
        # reaches the model as the SDK's failure message, and the run goes on.
        on_invoke_tool=with_function_tool_failure_error_handler(on_invoke_tool,
                                                                _log_handled_error),
        strict_json_schema=strict_json_schema,
        needs_approval=needs_approval,
    )


def _log_handled_error(tool: AgentsFunctionTool, error: Exception, _arguments: str) -> None:
    _LOG.warning("sandbox gate error in %s: %s: %s", tool.name, type(error).__name__, error)


def to_openai_tools(runner: ToolRunner, *,
                    session_of: SessionOf | None = None) -> list[AgentsFunctionTool]:
    """Every tool of ``runner`` as an ``agents.FunctionTool``, for ``Agent(tools=...)``."""
    return [to_openai_tool(tool, runner=runner, session_of=session_of)
            for tool in runner.tools.values()]


async def _needs_approval(runner: ToolRunner, name: str, args: Any, call_id: str) -> bool:
    """The SDK's question "interrupt the run for a human?", answered by the gate without
    running anything. With no provider the question is parked in the store (visible to
    the page and the CLI) and the run is interrupted; with a provider, the provider is
    asked inside ``on_invoke_tool``, after the SDK's tool input guardrails."""
    if runner.provider is not None:
        return False
    if not isinstance(args, dict):
        return True  # arguments the gate cannot read: a human looks (it refuses them later)
    try:
        parked = await runner.park(name, args, call_id)
    except Exception:
        # Fail closed: the run stops for a human; the call is gated again when it runs.
        return True
    return parked is not None and parked.get("status") == Status.AWAITING.value


def _model_output(outcome: GateOutcome) -> Any:
    """What the model reads: the tool's own return value, as the SDK shows a function
    tool's; when the gate stopped the call, one line saying why (a denial: the human's
    reason, as ``RunState.reject(rejection_message=...)`` does)."""
    if outcome.tool_result:
        return outcome.value
    if outcome.status is None:  # a result the gate ended with, in the tool's shape
        return outcome.value
    return outcome.message


# -- the shell tool --------------------------------------------------------------------


def shell_tool(bash: ExecuteBashTool, *, runner: ToolRunner, name: str = "shell",
               session_of: SessionOf | None = None) -> ShellTool:
    """An ``agents.ShellTool`` (local environment) whose executor is ``bash``.

    Each command of a shell call is one call through ``runner``'s gate (the call id is
    the shell call's, with ``#i`` appended when the call holds several commands), under
    ``bash``'s policy and confinement. The policy's timeout applies (the model's
    ``timeout_ms`` is not used); ``max_output_length`` is passed on to the SDK, which
    trims. A command the gate stopped (blocked, denied, waiting) reads as the SDK's own
    rejected shell call: the reason on stderr, exit code 1.
    """
    if not isinstance(bash, ExecuteBashTool):
        raise ConfigurationError(
            f"shell_tool takes an ExecuteBashTool, got {type(bash).__name__}")
    _check_holds(runner, bash)
    _bind(runner, name, _Binding(runner, bash.name, "shell", session_of))

    async def needs_approval(ctx: RunContextWrapper[Any], action: Any, call_id: str) -> bool:
        gate = _runner_for(runner, session_of, ctx.context)
        commands = _commands(action)
        if not commands:
            return True
        asked = False
        for cid, command in _numbered(call_id, commands):
            asked = await _needs_approval(gate, bash.name, {"command": command}, cid) or asked
        return asked

    async def executor(request: ShellCommandRequest) -> ShellResult:
        gate = _runner_for(runner, session_of, request.ctx_wrapper.context)
        action = request.data.action
        outputs: list[ShellCommandOutput] = []
        for cid, command in _numbered(request.data.call_id, list(action.commands)):
            outcome = await run_call(gate, bash.name, {"command": command}, cid)
            outputs.append(_shell_output(command, outcome))
        return ShellResult(output=outputs, max_output_length=action.max_output_length)

    return ShellTool(executor=executor, name=name, needs_approval=needs_approval)


def _commands(action: Any) -> list[str]:
    commands = action.get("commands") if isinstance(action, dict) else getattr(
        action, "commands", None)
    if isinstance(commands, (str, bytes)) or not isinstance(commands, Sequence):
        return []
    return [str(c) for c in commands if c is not None]


def _numbered(call_id: str, commands: list[str]) -> list[tuple[str, str]]:
    if len(commands) == 1:
        return [(call_id, commands[0])]
    return [(f"{call_id}#{i}", command) for i, command in enumerate(commands)]


def _shell_output(command: str, outcome: GateOutcome) -> ShellCommandOutput:
    result = outcome.value if outcome.tool_result else outcome.result
    if not isinstance(result, dict):
        result = {"stdout": str(result)}
    if outcome.status is not None or "returncode" not in result:
        # The gate stopped it (denied, awaiting, refused): nothing ran. The SDK's own
        # shape for a rejected shell call: the reason on stderr, exit code 1.
        return ShellCommandOutput(stdout="", stderr=outcome.message, command=command,
                                  outcome=ShellCallOutcome(type="exit", exit_code=1))
    if result.get("returncode") is None and result.get("error") and not result.get(
            "timed_out"):
        # Refused by the policy before anything started (a blocked command).
        return ShellCommandOutput(stdout="", stderr=str(result["error"]), command=command,
                                  outcome=ShellCallOutcome(type="exit", exit_code=1))
    stderr = str(result.get("stderr") or "")
    if result.get("error") and not result.get("timed_out"):
        stderr = f"{stderr}\n{result['error']}".strip() if stderr else str(result["error"])
    timed_out = bool(result.get("timed_out"))
    code = result.get("returncode")
    return ShellCommandOutput(
        stdout=str(result.get("stdout") or ""), stderr=stderr, command=command,
        outcome=ShellCallOutcome(type="timeout" if timed_out else "exit",
                                 exit_code=code if isinstance(code, int) else None))


# -- the bridge: a human's answer into the RunState and the store ----------------------


@dataclass(frozen=True)
class _Call:
    """One gated call behind an approval item (a shell item may hold several)."""

    runner: ToolRunner
    tool: str
    call_id: str
    args: dict[str, Any] | None  # None: the SDK's arguments were not a JSON object


class RunStateBridge:
    """Answers for interrupted runs, recorded in the gate's store and in the ``RunState``.

    ``bridge.approve(state, item)`` instead of ``state.approve(item)``,
    ``bridge.reject(state, item, "reason")`` instead of ``state.reject(item, ...)``, and
    ``bridge.apply_store_answers(state)`` to take the answers given meanwhile on the web
    page or the CLI. Then ``Runner.run(agent, state)`` as usual.

    An approval given only in the ``RunState`` (``state.approve(item)`` without the
    bridge, or one written into a saved state) is not an approval the gate knows: the
    tool does not run, and the model reads that the call still waits for confirmation.
    """

    def __init__(self, runner: ToolRunner, *, session_of: SessionOf | None = None) -> None:
        if not isinstance(runner, ToolRunner):
            raise ConfigurationError(
                f"RunStateBridge takes a ToolRunner, got {type(runner).__name__}")
        self.runner = runner
        self.session_of = session_of

    # -- the three answers -------------------------------------------------------------

    async def approve(self, state: RunState[Any, Any], item: ToolApprovalItem, *,
                      args: dict[str, Any] | None = None, decided_by: str | None = None,
                      always_approve: bool = False) -> None:
        """Approve ``item``: recorded in the store (the tool runs once, when the run
        resumes, after the SDK's guardrails) and in ``state``.
        ``always_approve``: as in the SDK, the tool's later calls run without asking;
        the gate remembers it as a rule of this runner's session (for `shell_tool`:
        the same commands only, never every command).

        ``args``: the human edited the arguments; the edited call is validated, checked
        against the policy's hard refusals (a blocked command stays blocked), and runs
        once in place of the original without a second question (a function tool only).

        Raises `ConfirmationStateError` when the gate refuses the approval: the item's
        arguments differ from the ones the gate asked about (the saved state was edited),
        or the request was already decided otherwise (denied, timed out). Nothing is
        approved in ``state`` then.
        """
        calls = self._calls(state, item)
        if args is not None and (len(calls) != 1 or self._binding(item).kind != "function"):
            raise ConfigurationError(
                "edited arguments apply to one function tool call; a shell call is "
                "approved or rejected as a whole")
        if args is not None:
            decision = Decision.edit(args, channel=CHANNEL)
        elif always_approve:
            # The SDK lets the tool's later calls in this run go unasked; the gate saves
            # the same as a rule of this runner's session (a function tool: every call;
            # the shell: these exact commands, never every command).
            decision = Decision.approve(
                channel=CHANNEL, scope="session",
                remember=Remember(tool_wide=self._binding(item).kind == "function"))
        else:
            decision = Decision.approve(channel=CHANNEL)
        if decided_by is not None:
            decision = decision.model_copy(update={"decided_by": decided_by})
        for call in calls:
            await self._record_approval(call, decision)
        state.approve(item, always_approve=always_approve)

    async def reject(self, state: RunState[Any, Any], item: ToolApprovalItem,
                     message: str | None = None, *, decided_by: str | None = None) -> None:
        """Reject ``item`` with ``message`` for the model (None: the SDK's own text,
        "Tool execution was not approved."). The stored request is closed denied at
        once, audited, and the call id never runs afterwards.

        Raises `ConfirmationStateError` if the call was already approved and ran (on the
        page, by another worker): the model will read its real output instead.
        """
        reason = message if message is not None else DEFAULT_APPROVAL_REJECTION_MESSAGE
        for call in self._calls(state, item):
            outcome = await answer_call(
                call.runner, call.call_id, Decision.deny(reason, channel=CHANNEL),
                args=call.args, tool=call.tool, decided_by=decided_by, channel=CHANNEL)
            if not outcome.denied:
                record = await self._record(call)
                if record is None or record.state != "denied":
                    raise ConfirmationStateError(
                        f"call {call.call_id} cannot be rejected: {outcome.message}")
        state.reject(item, rejection_message=message)

    async def apply_store_answers(self, state: RunState[Any, Any]) -> dict[str, str]:
        """Take the answers given elsewhere (the web page, the CLI, another process) for
        the calls ``state`` is interrupted on, into ``state``.

        Returns ``{call_id: "approved" | "rejected" | "pending"}`` per interruption.
        An approval stays recorded and is applied when the run resumes (after the
        guardrails); a denial is applied now and given to the model with its reason; a
        request that expired is rejected with that news. Items still waiting for an
        answer are left as they are.
        """
        applied: dict[str, str] = {}
        for item in state.get_interruptions():
            if item.name not in _BINDINGS.get(self.runner, {}):
                continue  # another tool's approval: not ours to answer
            calls = self._calls(state, item)
            verdicts = [await self._store_verdict(call) for call in calls]
            key = item.call_id or ""
            if any(v[0] == "denied" for v in verdicts):
                reason = next(v[1] for v in verdicts if v[0] == "denied")
                for call, (verdict, _) in zip(calls, verdicts, strict=True):
                    if verdict == "denied":
                        # The recorded denial, applied now: the SDK's rejection never
                        # reaches the tool, so the request would wait until it expired.
                        await self._apply_recorded(call)
                    else:  # the other commands of a shell call: the item is one answer
                        await answer_call(call.runner, call.call_id,
                                          Decision.deny(reason, channel=CHANNEL),
                                          args=call.args, tool=call.tool, channel=CHANNEL)
                state.reject(item, rejection_message=reason)
                applied[key] = "rejected"
            elif all(v[0] == "approved" for v in verdicts):
                state.approve(item)
                applied[key] = "approved"
            else:
                applied[key] = "pending"
        return applied

    # -- helpers -------------------------------------------------------------------------

    async def _record_approval(self, call: _Call, decision: Decision) -> None:
        runner = call.runner
        if call.args is None:
            raise ConfirmationStateError(
                f"the arguments of call {call.call_id} are not a JSON object; it cannot be "
                "approved (reject it)")
        verdict = await runner.would_ask(call.tool, call.args, call.call_id)
        if verdict.action == "ask":
            # Not asked yet (a runner with a provider, or asked before the gate saw it):
            # ask now, so the approval is the human's answer to a recorded question.
            await runner.park(call.tool, call.args, call.call_id)
            verdict = await runner.would_ask(call.tool, call.args, call.call_id)
        if verdict.action == "pending":
            assert verdict.confirmation_id is not None
            if verdict.answer is not None:
                if verdict.answer.get("outcome") == "deny":
                    raise ConfirmationStateError(
                        f"call {call.call_id} was denied on another channel "
                        f"({verdict.answer.get('reason')!r}); apply it with "
                        "apply_store_answers(state)")
                return  # approved elsewhere already: that answer stands
            await _submit(runner, verdict.confirmation_id, decision)
            return
        if verdict.action == "refuse" and verdict.state == "blocked":
            return  # a hard refusal (a blocked command): no approval changes it; it stays
            # blocked when the run resumes, and the rest of a shell call is approved
        if verdict.action == "refuse":
            raise ConfirmationStateError(
                f"call {call.call_id} cannot be approved: {verdict.reason}")
        if verdict.action == "replay":
            record = await self._record(call)
            if record is not None and record.state in ("denied", "timed_out", "rejected"):
                raise ConfirmationStateError(
                    f"call {call.call_id} was already {record.state}; it cannot be approved")
        # "run", or decided and run already: the call is answered when the run resumes.

    async def _apply_recorded(self, call: _Call) -> None:
        """Apply the answer another channel recorded for ``call``, if one waits."""
        if call.args is None:
            return
        verdict = await call.runner.would_ask(call.tool, call.args, call.call_id)
        if verdict.action == "pending" and verdict.answer is not None:
            await answer_call(call.runner, call.call_id, None, args=call.args,
                              tool=call.tool, channel=CHANNEL)

    async def _store_verdict(self, call: _Call) -> tuple[str, str]:
        """("approved" | "denied" | "pending", reason) for one call, from the store."""
        if call.args is None:
            return "pending", ""
        verdict = await call.runner.would_ask(call.tool, call.args, call.call_id)
        if verdict.action == "pending":
            answer = verdict.answer
            if answer is None:
                return "pending", ""
            if answer.get("outcome") == "deny":
                return "denied", str(answer.get("reason") or DEFAULT_APPROVAL_REJECTION_MESSAGE)
            return "approved", ""
        if verdict.action == "refuse" and verdict.state == "blocked":
            return "approved", ""  # nothing to answer: it stays blocked when it runs
        if verdict.action == "refuse":
            return "denied", str(verdict.reason or "refused by the gate")
        if verdict.action == "replay":
            record = await self._record(call)
            if record is not None and record.state in ("denied", "timed_out", "rejected"):
                result = record.result if isinstance(record.result, dict) else {}
                reason = result.get("reason") or result.get("error") or record.state
                return "denied", str(reason)
            return "approved", ""  # ran (or runs) already: the record answers on resume
        return "pending", ""

    async def _record(self, call: _Call) -> Any:
        try:
            return await _in_thread(call.runner, call.runner.store.get_call, call.call_id)
        except LookupError:
            return None

    def _binding(self, item: ToolApprovalItem) -> _Binding:
        binding = _BINDINGS.get(self.runner, {}).get(item.name or "")
        if binding is None:
            raise ConfigurationError(
                f"approval item for tool {item.name!r} does not belong to a tool made by "
                "to_openai_tool/shell_tool over this bridge's runner; answer it with "
                "state.approve/state.reject")
        return binding

    def _calls(self, state: RunState[Any, Any], item: ToolApprovalItem) -> list[_Call]:
        binding = self._binding(item)
        call_id = item.call_id
        if not call_id:
            raise ConfigurationError("the approval item has no call id")
        context = getattr(getattr(state, "_context", None), "context", None)
        session_of = self.session_of if self.session_of is not None else binding.session_of
        runner = _runner_for(self.runner, session_of, context)
        if binding.kind == "shell":
            from agents.run_internal.tool_execution import coerce_shell_call

            commands = list(coerce_shell_call(item.raw_item).action.commands)
            return [_Call(runner, binding.tool, cid, {"command": command})
                    for cid, command in _numbered(call_id, commands)]
        try:
            parsed = json.loads(item.arguments or "{}")
        except ValueError:
            parsed = None
        return [_Call(runner, binding.tool, call_id,
                      parsed if isinstance(parsed, dict) else None)]


async def _submit(runner: ToolRunner, confirmation_id: str, decision: Decision) -> None:
    """Record the answer for the call to apply when it runs. An expired request raises
    `ConfirmationTimedOutError` (it is recorded timed out, never approved)."""
    try:
        await _in_thread(runner, functools.partial(
            runner.store.submit_answer, confirmation_id, decision, channel=CHANNEL))
    except ConfirmationTimedOutError:
        raise
    except ConfirmationStateError:
        pass  # answered meanwhile on another channel: the first answer stands


async def _in_thread(runner: ToolRunner, fn: Any, *args: Any) -> Any:
    if not runner.store.blocking:
        return fn(*args)
    import anyio.to_thread

    return await anyio.to_thread.run_sync(fn, *args)
