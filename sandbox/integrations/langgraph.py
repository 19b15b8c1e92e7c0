"""LangGraph / langchain integration: our approval gate in ``create_agent`` and ``ToolNode``.

- `SandboxApprovalMiddleware(interrupt_on, ...)`: langchain's `HumanInTheLoopMiddleware`
  (same ``interrupt_on``, the same interrupt value, the same decisions and the same texts
  for the model), with every reviewed call behind a `ToolRunner`: the question is in the
  store (the web page, the CLI and the queue see it and may answer it), the approval is
  bound to the tool call id and the digest of its arguments, and the tool runs once.
- `to_langchain_tool(tool, runner=...)`: one of our tools (`ExecuteBashTool`, a gated
  `FunctionTool`) as a langchain tool for ``create_agent`` or a ``ToolNode``.
- `tool_node_wrapper(runner)`: a ``ToolNode`` ``wrap_tool_call`` that routes the calls to
  the runner's tools through its gate.

A request nobody has answered becomes LangGraph's own ``interrupt()`` with exactly the
value `HumanInTheLoopMiddleware` raises (``{"action_requests": [...], "review_configs":
[...]}``), answered with ``Command(resume={"decisions": [...]})``. LangGraph runs the
interrupted node again from its start when the graph resumes; the gate's journal absorbs
that: the call id finds its stored request (nothing is asked twice) and a call that ran
is answered from its record (nothing runs twice), also when an old checkpoint is resumed
again. The ``thread_id`` of the run is the gate's session: a request asked in one thread
is applied only in that thread, and "approve for this session" covers that thread alone.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread

try:
    from langchain.agents.middleware.human_in_the_loop import (
        _EDIT_NOTICE,
        HITLRequest,
        HumanInTheLoopMiddleware,
        InterruptOnConfig,
        _answer_message,
    )
    from langchain.agents.middleware.types import ToolCallRequest
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import BaseTool as LangchainBaseTool
    from langgraph.config import get_config
    from langgraph.errors import GraphBubbleUp
    from langgraph.types import Command, interrupt
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"sandbox.integrations.langgraph needs langgraph and langchain ({exc}); install "
        "them with pip install 'sandbox[langgraph]'"
    ) from exc

from sandbox.approval.models import Decision
from sandbox.approval.providers import ConfirmationProvider
from sandbox.approval.runner import ToolRunner
from sandbox.approval.store import ApprovalStore, open_store
from sandbox.audit import AuditLog
from sandbox.errors import ConfigurationError, ConfirmationStateError
from sandbox.integrations.common import GateOutcome, answer_call, run_call, session_key
from sandbox.tools.base import BaseTool
from sandbox.tools.context import ToolContext

__all__ = [
    "CHANNEL",
    "SandboxApprovalMiddleware",
    "ToolNodeWrapper",
    "astore_resume",
    "store_resume",
    "to_langchain_tool",
    "tool_node_wrapper",
]

#: The channel recorded for answers given through ``Command(resume=...)``.
CHANNEL = "langgraph"

#: langchain's own wording (`HumanInTheLoopMiddleware`'s default ``description_prefix``).
DESCRIPTION_PREFIX = "Tool execution requires approval"

T = TypeVar("T")

#: The decisions a call of one of our tools may get (langchain's wording of the check).
OUR_DECISIONS = ["approve", "edit", "reject"]


# -- shared helpers ----------------------------------------------------------------------


def _thread_session() -> str | None:
    """The gate's session of the running graph: its ``thread_id``, if it has one."""
    try:
        config = get_config()
    except RuntimeError:
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    return None if thread is None or thread == "" else session_key(CHANNEL, thread)


def _session_runner(runner: ToolRunner) -> ToolRunner:
    """``runner``, or its sibling for the graph's thread when ``runner`` has no session."""
    if runner.session_id is not None:
        return runner
    session = _thread_session()
    return runner if session is None else runner.for_session(session)


def _sync(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` to completion from synchronous code (LangGraph's sync nodes).

    In a thread without an event loop it runs here; under a running loop (sync code
    called from async code) in a worker thread, with this context copied, so the graph's
    config (``get_config``) and our context variables are seen there too."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(fn, *args)
    context = contextvars.copy_context()

    def in_thread() -> T:
        return anyio.run(fn, *args)

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, in_thread).result()


def _hitl_request(name: str, args: dict[str, Any], description: str,
                  allowed: list[Any]) -> HITLRequest:
    """The value `HumanInTheLoopMiddleware` interrupts with, for one call."""
    return HITLRequest(
        action_requests=[{"name": name, "args": args, "description": description}],
        review_configs=[{"action_name": name, "allowed_decisions": allowed}],
    )


def _describe(prefix: str, name: str, args: dict[str, Any]) -> str:
    """langchain's default description of a call under review (its exact format)."""
    return f"{prefix}\n\nTool: {name}\nArgs: {args}"


def _gate_decision(decision: Any, name: str) -> Decision:
    """A langchain decision (approve, edit, reject, respond) as the gate's `Decision`."""
    if not isinstance(decision, dict) or "type" not in decision:
        raise ValueError(f"Unexpected human decision: {decision!r}: expected a dict with a "
                         "'type' of approve, edit, reject or respond")
    kind = decision["type"]
    if kind == "approve":
        return Decision.approve(channel=CHANNEL)
    if kind == "edit":
        action = decision.get("edited_action")
        if not isinstance(action, dict) or not isinstance(action.get("args"), dict):
            raise ValueError(f"Unexpected human decision: {decision!r}: an edit needs "
                             "edited_action with name and args")
        if action.get("name", name) != name:
            raise ValueError(
                f"the edit of a {name} call names another tool ({action.get('name')!r}); "
                "behind the sandbox gate an edit changes the arguments of the call the "
                "human reviewed, never the tool")
        return Decision.edit(action["args"], channel=CHANNEL)
    if kind in ("reject", "respond"):
        return Decision.deny(_reject_reason(decision), channel=CHANNEL)
    raise ValueError(f"Unexpected human decision: {decision!r}: type {kind!r} is not one "
                     "of approve, edit, reject, respond")


def _langchain_decision(name: str, answer: dict[str, Any]) -> dict[str, Any]:
    """An answer recorded by another channel as the langchain decision it amounts to."""
    outcome = answer.get("outcome")
    if outcome == "deny":
        reason = answer.get("reason")
        return {"type": "reject", "message": reason} if reason else {"type": "reject"}
    if answer.get("args") is not None and outcome == "edit":
        return {"type": "edit", "edited_action": {"name": name, "args": answer["args"]}}
    return {"type": "approve"}


def _reject_reason(decision: dict[str, Any]) -> str:
    message = decision.get("message")
    if decision.get("type") == "respond":
        return f"a human answered in place of the tool: {message}"
    return str(message) if message else "rejected in LangGraph"


def _stopped_message(tool_call: dict[str, Any], outcome: GateOutcome) -> ToolMessage:
    """The model's message for a call the gate stopped. A denial reads exactly as
    langchain's rejection (with the human's reason); anything else says why."""
    if outcome.denied:
        reason = outcome.message
        if reason == "rejected in LangGraph":
            return _answer_message(tool_call, {"type": "reject"})  # type: ignore[arg-type]
        return _answer_message(tool_call, {"type": "reject", "message": reason})  # type: ignore[arg-type]
    return ToolMessage(content=outcome.message, name=tool_call["name"],
                       tool_call_id=tool_call["id"], status="error")


def _journal_form(result: Any) -> dict[str, Any]:
    """A tool node result as the journal records it (JSON): a message's content."""
    if isinstance(result, ToolMessage):
        return {"content": result.content, "status": result.status}
    if isinstance(result, Command):
        messages = (result.update or {}).get("messages") if isinstance(
            result.update, dict) else None
        found = [m for m in messages or [] if isinstance(m, ToolMessage)]
        if found:
            return {"content": found[-1].content, "status": found[-1].status}
        return {"content": "the tool returned a graph command", "status": "success"}
    return {"content": result if isinstance(result, (str, list)) else str(result),
            "status": "success"}


def _replayed_message(tool_call: dict[str, Any], recorded: Any) -> ToolMessage:
    """The message an earlier run of this call id recorded, given again."""
    if isinstance(recorded, dict) and "content" in recorded:
        status = recorded.get("status") if recorded.get("status") in ("success", "error") \
            else "success"
        return ToolMessage(content=recorded["content"], name=tool_call["name"],
                           tool_call_id=tool_call["id"], status=status)
    return ToolMessage(content=_content(recorded), name=tool_call["name"],
                       tool_call_id=tool_call["id"])


def _content(value: Any) -> str | list[Any]:
    if isinstance(value, (str, list)):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


# -- our tools in langchain: to_langchain_tool and tool_node_wrapper ---------------------


async def _call_ours(runner: ToolRunner, name: str, args: dict[str, Any],
                     call_id: str | None) -> GateOutcome:
    return await run_call(_session_runner(runner), name, args, call_id)


async def _answer_ours(runner: ToolRunner, name: str, args: dict[str, Any], call_id: str,
                       decision: Decision) -> GateOutcome:
    return await answer_call(_session_runner(runner), call_id, decision, args=args,
                             tool=name, channel=CHANNEL)


def _review(runner: ToolRunner, name: str, args: dict[str, Any], call_id: str | None,
            outcome: GateOutcome) -> GateOutcome:
    """A call left waiting becomes LangGraph's interrupt; its answer is applied (sync)."""
    if not outcome.awaiting or call_id is None:
        return outcome
    hint = _describe(DESCRIPTION_PREFIX, name, args)
    answer = interrupt(_hitl_request(name, args, hint, OUR_DECISIONS))
    decision = _single_decision(answer, name)
    return _sync(_answer_ours, runner, name, args, call_id, decision)


async def _areview(runner: ToolRunner, name: str, args: dict[str, Any], call_id: str | None,
                   outcome: GateOutcome) -> GateOutcome:
    if not outcome.awaiting or call_id is None:
        return outcome
    hint = _describe(DESCRIPTION_PREFIX, name, args)
    answer = interrupt(_hitl_request(name, args, hint, OUR_DECISIONS))
    return await _answer_ours(runner, name, args, call_id, _single_decision(answer, name))


def _single_decision(answer: Any, name: str) -> Decision:
    decisions = answer.get("decisions") if isinstance(answer, dict) else None
    if not isinstance(decisions, list) or len(decisions) != 1:
        count = len(decisions) if isinstance(decisions, list) else 0
        raise ValueError(f"Number of human decisions ({count}) does not match number of "
                         "hanging tool calls (1).")
    decision = decisions[0]
    kind = decision.get("type") if isinstance(decision, dict) else None
    if kind not in OUR_DECISIONS:
        raise ValueError(
            f"Unexpected human decision: {decision}. Decision type '{kind}' is not allowed "
            f"for tool '{name}'. Expected one of {OUR_DECISIONS} based on the tool's "
            "configuration.")
    return _gate_decision(decision, name)


def _as_message(tool_call: dict[str, Any], outcome: GateOutcome) -> ToolMessage:
    if outcome.tool_result:
        return ToolMessage(content=_content(outcome.value), name=tool_call["name"],
                           tool_call_id=tool_call["id"])
    if outcome.status is None:  # a result the gate ended with, in the tool's own shape
        return ToolMessage(content=_content(outcome.value), name=tool_call["name"],
                           tool_call_id=tool_call["id"], status="error")
    return _stopped_message(tool_call, outcome)


class SandboxTool(LangchainBaseTool):
    """One of our tools as a langchain tool; every call goes through ``runner.call``
    with the model's tool call id. Made by `to_langchain_tool`."""

    runner: Any = None  # ToolRunner (pydantic field; typed loosely for langchain)
    tool_name: str = ""

    def _to_args_and_kwargs(self, tool_input: str | dict[str, Any],
                            tool_call_id: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(tool_input, str):
            try:
                parsed = json.loads(tool_input)
            except ValueError:
                parsed = tool_input
            tool_input = parsed if isinstance(parsed, dict) else {"input": tool_input}
        return (), {"args": dict(tool_input), "call_id": tool_call_id}

    def _run(self, args: dict[str, Any], call_id: str | None, **_: Any) -> Any:
        outcome = _sync(_call_ours, self.runner, self.tool_name, args, call_id)
        outcome = _review(self.runner, self.tool_name, args, call_id, outcome)
        return self._output(args, call_id, outcome)

    async def _arun(self, args: dict[str, Any], call_id: str | None, **_: Any) -> Any:
        outcome = await _call_ours(self.runner, self.tool_name, args, call_id)
        outcome = await _areview(self.runner, self.tool_name, args, call_id, outcome)
        return self._output(args, call_id, outcome)

    def _output(self, args: dict[str, Any], call_id: str | None, outcome: GateOutcome) -> Any:
        if call_id is None:  # invoked without a tool call: a value, as langchain returns
            return outcome.value if outcome.tool_result else outcome.result
        return _as_message({"name": self.name, "args": args, "id": call_id}, outcome)


def to_langchain_tool(tool: BaseTool, *, runner: ToolRunner) -> SandboxTool:
    """One of our tools as a langchain tool behind ``runner``'s gate.

    Invoked by a ``ToolNode`` (or ``create_agent``) with the model's tool call, the call
    id is the gate's: a call that needs a human parks its question in the store and the
    graph is interrupted with `HumanInTheLoopMiddleware`'s request value; resume with
    ``Command(resume={"decisions": [{"type": "approve"}]})`` (or ``edit``/``reject``).
    Invoked with a plain dict (no tool call id), each call is a new call.
    """
    if not isinstance(runner, ToolRunner):
        raise ConfigurationError(f"runner must be a ToolRunner, got {type(runner).__name__}")
    if runner.tools.get(tool.name) is not tool:
        raise ConfigurationError(
            f"the runner passed for {tool.name!r} does not hold this tool; build it as "
            f"ToolRunner([... {tool.name} ...])")
    return SandboxTool(name=tool.name, description=tool.description or tool.name,
                       args_schema=tool.parameters_schema(), runner=runner,
                       tool_name=tool.name)


def store_resume(runner: ToolRunner, snapshot: Any) -> dict[str, Any] | None:
    """The resume value for a graph paused by our tools (`to_langchain_tool`,
    `tool_node_wrapper`), from the answers given on the web page, the CLI or another
    process: ``{interrupt_id: {"decisions": [...]}}`` for each waiting call that has an
    answer, or None when none has. ``snapshot`` is ``graph.get_state(config)``; resume
    with ``graph.invoke(Command(resume=value), config)``."""
    return _sync(astore_resume, runner, snapshot)


async def astore_resume(runner: ToolRunner, snapshot: Any) -> dict[str, Any] | None:
    """`store_resume` for async code."""
    values = getattr(snapshot, "values", None)
    messages = (values.get("messages") or []) if isinstance(values, dict) else []
    calls = [call for m in messages if isinstance(m, AIMessage) for call in m.tool_calls
             if call["name"] in runner.tools and call.get("id")]
    thread = ((getattr(snapshot, "config", None) or {}).get("configurable") or {}).get(
        "thread_id")
    if runner.session_id is None and thread not in (None, ""):
        runner = runner.for_session(session_key(CHANNEL, thread))
    taken: set[str] = set()
    resume: dict[str, Any] = {}
    for pending in getattr(snapshot, "interrupts", ()) or ():
        value = pending.value
        actions = value.get("action_requests") if isinstance(value, dict) else None
        if not isinstance(actions, list) or len(actions) != 1:
            continue
        action = actions[0]
        # The interrupt value is langchain's (no call id): the latest call of this tool
        # with these arguments that is not matched yet is the one it asks about.
        call = next((c for c in reversed(calls) if c["id"] not in taken
                     and c["name"] == action.get("name") and c["args"] == action.get("args")),
                    None)
        if call is None:
            continue
        taken.add(call["id"])
        verdict = await runner.would_ask(call["name"], dict(call["args"]), call["id"])
        if verdict.action == "pending" and verdict.answer is not None:
            resume[pending.id] = {"decisions": [
                _langchain_decision(call["name"], verdict.answer)]}
    return resume or None


@dataclass
class ToolNodeWrapper:
    """``ToolNode(tools, wrap_tool_call=w, awrap_tool_call=w.awrap)``: the calls to the
    runner's tools go through its gate (our tool runs, behind its approval, grants and
    journal; a pending request interrupts the graph); other calls run as they would."""

    runner: ToolRunner

    def __call__(self, request: ToolCallRequest,
                 handler: Callable[[ToolCallRequest], Any]) -> Any:
        call = request.tool_call
        if call["name"] not in self.runner.tools:
            return handler(request)
        args = dict(call.get("args") or {})
        outcome = _sync(_call_ours, self.runner, call["name"], args, call.get("id"))
        outcome = _review(self.runner, call["name"], args, call.get("id"), outcome)
        return _as_message(dict(call), outcome)

    async def awrap(self, request: ToolCallRequest,
                    handler: Callable[[ToolCallRequest], Awaitable[Any]]) -> Any:
        call = request.tool_call
        if call["name"] not in self.runner.tools:
            return await handler(request)
        args = dict(call.get("args") or {})
        outcome = await _call_ours(self.runner, call["name"], args, call.get("id"))
        outcome = await _areview(self.runner, call["name"], args, call.get("id"), outcome)
        return _as_message(dict(call), outcome)


def tool_node_wrapper(runner: ToolRunner) -> ToolNodeWrapper:
    """A ``wrap_tool_call`` for ``ToolNode`` routing calls to ``runner``'s tools through
    its gate. Pass ``wrap_tool_call=w`` and ``awrap_tool_call=w.awrap``."""
    if not isinstance(runner, ToolRunner):
        raise ConfigurationError(f"runner must be a ToolRunner, got {type(runner).__name__}")
    return ToolNodeWrapper(runner)


# -- the middleware: langchain tools behind the gate ------------------------------------


@dataclass
class _LiveCall:
    """One langchain tool call while the gate handles it (the stand-in tool reads it)."""

    request: ToolCallRequest | None = None
    handler: Callable[[ToolCallRequest], Any] | None = None
    is_async: bool = False
    hint: str | None = None
    result: Any = None
    ran_with: dict[str, Any] | None = None
    raised: BaseException | None = None


_LIVE: contextvars.ContextVar[_LiveCall] = contextvars.ContextVar("sandbox_langgraph_call")


class _StandIn(BaseTool):
    """Stands in the gate for a langchain tool named in ``interrupt_on``: its question is
    the middleware's description; running it runs the tool node's handler."""

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        live = _LIVE.get(None)
        if live is None:
            return _describe(DESCRIPTION_PREFIX, self.name, args)
        return live.hint or _describe(DESCRIPTION_PREFIX, self.name, args)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        live = _LIVE.get(None)
        if live is None or live.request is None or live.handler is None:
            # Applied outside the tool node (a queue worker draining answers): the
            # langchain tool is not reachable here. Refuse, loudly, instead of guessing.
            raise RuntimeError(f"{self.name} runs only inside its LangGraph tool node")
        request = live.request
        if args != dict(request.tool_call.get("args") or {}):
            live.ran_with = args
            request = request.override(tool_call={**request.tool_call, "args": args})
        try:
            if live.is_async:
                result = await live.handler(request)
            else:
                context = contextvars.copy_context()
                result = await anyio.to_thread.run_sync(context.run, live.handler, request)
        except BaseException as exc:  # re-raised by the middleware once recorded
            live.raised = exc
            raise
        live.result = result
        return _journal_form(result)


class SandboxApprovalMiddleware(HumanInTheLoopMiddleware):
    """langchain's `HumanInTheLoopMiddleware`, with every reviewed call behind the gate.

    ``interrupt_on`` is langchain's (``{"tool": True}``, ``{"tool": {"allowed_decisions":
    [...], "description": ..., "when": ...}}``); the interrupt value, the decisions and
    the messages the model reads are langchain's. Besides:

    - the question is parked in the gate's store (``store``: a path, a URL or an
      `ApprovalStore`; default in memory), so the web page, the CLI and the queue see it,
      and an answer given there is taken when the graph resumes;
    - ``provider`` (a terminal, a callback, the web page): the gate asks it when the tool
      is about to run, and the graph is not interrupted;
    - each approval is bound to the tool call id and the digest of its arguments, and
      used once: arguments edited in the graph state under a pending interrupt are
      refused, and resuming a checkpoint again never runs a tool twice;
    - an edit is the approval of the edited call: validated, checked again against the
      tool's hard refusals, run once without a second question.

    Sessions: ``session_id`` pins one; otherwise each LangGraph ``thread_id`` is its own
    session (`session_key("langgraph", thread_id)`).
    """

    def __init__(
        self,
        interrupt_on: dict[str, bool | InterruptOnConfig],
        *,
        provider: ConfirmationProvider | None = None,
        store: ApprovalStore | str | None = None,
        audit: AuditLog | None = None,
        approval_ttl: float | None = None,
        session_id: str | None = None,
        description_prefix: str = DESCRIPTION_PREFIX,
        edit_notice: str | None = _EDIT_NOTICE,
    ) -> None:
        super().__init__(interrupt_on, description_prefix=description_prefix,
                         edit_notice=edit_notice)
        if not self.interrupt_on:
            raise ConfigurationError("interrupt_on names no tool to review; name at least one")
        if isinstance(store, str):
            store = open_store(store)
        stand_ins = []
        for name in self.interrupt_on:
            try:
                stand_ins.append(_StandIn(name=name, description=f"langchain tool {name}"))
            except ValueError as exc:
                raise ConfigurationError(f"tool {name!r} cannot be gated: {exc}") from None
        self.runner = ToolRunner(stand_ins, provider=provider, store=store, audit=audit,
                                 approval_ttl=approval_ttl, session_id=session_id)

    # -- after the model: one interrupt for the turn's reviewed calls ----------------------

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        review = self._review_list(state, runtime)
        if review is None:
            return None
        last_ai, reviewed = review
        runner = _session_runner(self.runner)
        verdicts, stopped = _sync(self._park_all, runner, reviewed)
        update, records = self._decide(last_ai, reviewed, verdicts, stopped)
        if records:
            _sync(self._record_all, runner, records)
        return update

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        review = self._review_list(state, runtime)
        if review is None:
            return None
        last_ai, reviewed = review
        runner = _session_runner(self.runner)
        verdicts, stopped = await self._park_all(runner, reviewed)
        update, records = self._decide(last_ai, reviewed, verdicts, stopped)
        await self._record_all(runner, records)
        return update

    def _review_list(self, state: Any, runtime: Any
                     ) -> tuple[AIMessage, list[tuple[int, dict[str, Any], Any, str]]] | None:
        """The last AI message and its calls ``interrupt_on`` (and ``when``) name: index,
        call, langchain's action request and review config, the description."""
        if self.runner.provider is not None:
            return None  # the provider is asked as each call starts (wrap_tool_call)
        messages = state["messages"]
        last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if last_ai is None or not last_ai.tool_calls:
            return None
        reviewed = []
        for idx, call in enumerate(last_ai.tool_calls):
            config = self.interrupt_on.get(call["name"])
            if config is None or not self._should_interrupt(call, config, state, runtime):
                continue
            action, review_config = self._create_action_and_config(call, config, state, runtime)
            reviewed.append((idx, dict(call), (action, review_config),
                             action.get("description") or ""))
        return (last_ai, reviewed) if reviewed else None

    async def _park_all(self, runner: ToolRunner,
                        reviewed: list[tuple[int, dict[str, Any], Any, str]]
                        ) -> tuple[list[Any], list[ToolMessage]]:
        """Park each call's question (a call id asked before finds its stored one) and
        return the gate's verdict for each, and the messages of calls decided denied
        before (a checkpoint resumed again): their record answers, nobody is asked."""
        verdicts = []
        stopped: list[ToolMessage] = []
        for _idx, call, _pair, description in reviewed:
            args = dict(call.get("args") or {})
            token = _LIVE.set(_LiveCall(hint=description))
            try:
                if call.get("id"):
                    await runner.park(call["name"], args, call["id"])
                verdict = await runner.would_ask(call["name"], args, call.get("id"))
            finally:
                _LIVE.reset(token)
            verdicts.append(verdict)
            if verdict.action == "replay" and verdict.state in ("denied", "timed_out"):
                outcome = await run_call(runner, call["name"], args, call["id"])
                stopped.append(_stopped_message(call, outcome))
        return verdicts, stopped

    def _decide(self, last_ai: AIMessage,
                reviewed: list[tuple[int, dict[str, Any], Any, str]], verdicts: list[Any],
                stopped: list[ToolMessage]
                ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], Decision]]]:
        """One interrupt for the calls a human must review, then their decisions: the
        state update (langchain's) and the decisions to record in the gate's store."""
        # A call decided before (a checkpoint resumed again, a rule that approved it) is
        # not asked about again: its record answers when the tool node meets it.
        asked = [(entry, verdict) for entry, verdict in zip(reviewed, verdicts, strict=True)
                 if verdict.action in ("pending", "refuse", "ask")]
        if not asked:
            return ({"messages": [last_ai, *stopped]} if stopped else None), []
        hitl = HITLRequest(action_requests=[e[2][0] for e, _ in asked],
                           review_configs=[e[2][1] for e, _ in asked])
        answer = interrupt(hitl)
        decisions = answer.get("decisions") if isinstance(answer, dict) else None
        if not isinstance(decisions, list) or len(decisions) != len(asked):
            count = len(decisions) if isinstance(decisions, list) else 0
            raise ValueError(f"Number of human decisions ({count}) does not match number "
                             f"of hanging tool calls ({len(asked)}).")
        messages: list[ToolMessage] = list(stopped)
        records: list[tuple[dict[str, Any], Decision]] = []
        for ((_idx, call, _pair, _d), verdict), decision in zip(asked, decisions, strict=True):
            config = self.interrupt_on[call["name"]]
            # langchain's own check of the decision (allowed types) and its message.
            _same, message = self._process_decision(decision, call, config)  # type: ignore[arg-type]
            if verdict.action == "refuse":
                messages.append(ToolMessage(
                    content=f"{verdict.reason} The tool was not run.", name=call["name"],
                    tool_call_id=call["id"], status="error"))
                continue
            records.append((call, _gate_decision(decision, call["name"])))
            if message is not None:
                messages.append(message)
        return {"messages": [last_ai, *messages]}, records

    async def _record_all(self, runner: ToolRunner,
                          records: list[tuple[dict[str, Any], Decision]]) -> None:
        """Record the human's decisions: a denial closes the request at once; an approval
        or an edit waits in the store for the tool node, which applies it as the call
        starts (the grant is claimed and the tool run in one place, after the model's
        turn is settled)."""
        for call, decision in records:
            args = dict(call.get("args") or {})
            if decision.outcome == "deny":
                await answer_call(runner, call["id"], decision, args=args,
                                  tool=call["name"], channel=CHANNEL)
                continue
            verdict = await runner.would_ask(call["name"], args, call["id"])
            if verdict.action == "pending" and verdict.confirmation_id \
                    and verdict.answer is None:
                try:
                    await _in_thread(runner, functools.partial(
                        runner.store.submit_answer, verdict.confirmation_id, decision,
                        channel=CHANNEL))
                except ConfirmationStateError:
                    pass  # answered on another channel meanwhile: the first answer stands

    # -- answers given elsewhere: the resume value ----------------------------------------

    def store_decisions(self, snapshot: Any) -> dict[str, Any] | None:
        """The resume value for a graph paused by this middleware, from the answers given
        on the web page, the CLI or another process: ``{"decisions": [...]}`` in the
        interrupt's order, or None while any reviewed call still waits for an answer.

        ``snapshot`` is ``graph.get_state(config)``. Resume with
        ``graph.invoke(Command(resume=value), config)``."""
        return _sync(self.astore_decisions, snapshot)

    async def astore_decisions(self, snapshot: Any) -> dict[str, Any] | None:
        """`store_decisions` for async code."""
        values = getattr(snapshot, "values", None) or {}
        messages = values.get("messages") or [] if isinstance(values, dict) else []
        last_ai = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if last_ai is None or not getattr(snapshot, "interrupts", ()):
            return None
        thread = ((getattr(snapshot, "config", None) or {}).get("configurable") or {}).get(
            "thread_id")
        runner = self.runner
        if runner.session_id is None and thread not in (None, ""):
            runner = runner.for_session(session_key(CHANNEL, thread))
        decisions: list[dict[str, Any]] = []
        for call in last_ai.tool_calls:
            if call["name"] not in self.interrupt_on or not call.get("id"):
                continue
            args = dict(call.get("args") or {})
            verdict = await runner.would_ask(call["name"], args, call["id"])
            if verdict.action == "refuse":
                decisions.append({"type": "reject", "message": verdict.reason or ""})
                continue
            if verdict.action != "pending":
                continue  # decided before: not part of the interrupt
            answer = verdict.answer
            if answer is None:
                return None
            decisions.append(_langchain_decision(call["name"], answer))
        return {"decisions": decisions} if decisions else None

    # -- as each call starts: the gate claims the grant and runs the handler -------------

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], Any]) -> Any:
        if not self._gated(request):
            return handler(request)
        runner = _session_runner(self.runner)
        live = _LiveCall(request=request, handler=handler)
        token = _LIVE.set(live)
        try:
            outcome = _sync(self._run, runner, request)
            if outcome.awaiting and request.tool_call.get("id"):
                # Still waiting (a provider that left it pending, or a call the model
                # turn did not review): the graph pauses for it here, the same way.
                decision, message = self._ask_one(request)
                if message is not None and decision.outcome == "deny":
                    _sync(self._answer, runner, request, decision)
                    return message
                outcome = _sync(self._answer, runner, request, decision)
        finally:
            _LIVE.reset(token)
        return self._result(request, live, outcome)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[Any]]) -> Any:
        if not self._gated(request):
            return await handler(request)
        runner = _session_runner(self.runner)
        live = _LiveCall(request=request, handler=handler, is_async=True)
        token = _LIVE.set(live)
        try:
            outcome = await self._run(runner, request)
            if outcome.awaiting and request.tool_call.get("id"):
                decision, message = self._ask_one(request)
                if message is not None and decision.outcome == "deny":
                    await self._answer(runner, request, decision)
                    return message
                outcome = await self._answer(runner, request, decision)
        finally:
            _LIVE.reset(token)
        return self._result(request, live, outcome)

    def _ask_one(self, request: ToolCallRequest) -> tuple[Decision, ToolMessage | None]:
        """One call's question as langchain's interrupt value; the human's decision, and
        langchain's message for a reject or respond."""
        call = request.tool_call
        config = self.interrupt_on[call["name"]]
        action, review_config = self._create_action_and_config(
            call, config, request.state, request.runtime)  # type: ignore[arg-type]
        answer = interrupt(HITLRequest(action_requests=[action],
                                       review_configs=[review_config]))
        decisions = answer.get("decisions") if isinstance(answer, dict) else None
        if not isinstance(decisions, list) or len(decisions) != 1:
            count = len(decisions) if isinstance(decisions, list) else 0
            raise ValueError(f"Number of human decisions ({count}) does not match number "
                             "of hanging tool calls (1).")
        _same, message = self._process_decision(decisions[0], call, config)
        return _gate_decision(decisions[0], call["name"]), message

    async def _answer(self, runner: ToolRunner, request: ToolCallRequest,
                      decision: Decision) -> GateOutcome:
        call = request.tool_call
        return await answer_call(runner, str(call["id"]), decision,
                                 args=dict(call.get("args") or {}), tool=call["name"],
                                 channel=CHANNEL)

    def _gated(self, request: ToolCallRequest) -> bool:
        config = self.interrupt_on.get(request.tool_call["name"])
        if config is None:
            return False
        when = config.get("when")
        return when is None or bool(when(request))

    async def _run(self, runner: ToolRunner, request: ToolCallRequest) -> GateOutcome:
        call = request.tool_call
        return await run_call(runner, call["name"], dict(call.get("args") or {}),
                              call.get("id"))

    def _result(self, request: ToolCallRequest, live: _LiveCall, outcome: GateOutcome) -> Any:
        call = dict(request.tool_call)
        if isinstance(live.raised, GraphBubbleUp):
            # The tool paused itself (interrupt() inside the tool). LangGraph would run it
            # again from its start on resume, and the gate runs a call once: the call
            # ended here, recorded as failed, and the model is told why.
            return ToolMessage(
                content=(f"{call['name']} called interrupt() from inside the tool; behind "
                         "the sandbox gate a tool runs once and cannot pause itself "
                         "(LangGraph would run it again from its start). Nothing more "
                         "will run for this call. Ask for the input before the call (a "
                         "'respond' decision), or take the tool out of interrupt_on."),
                name=call["name"], tool_call_id=call["id"], status="error")
        if live.raised is not None:
            raise live.raised
        if outcome.ran:
            result = live.result
            if live.ran_with is not None:
                executed = {"name": call["name"], "args": live.ran_with}
                return self._annotate_edited_result(result, request, executed)  # type: ignore[arg-type]
            return result
        if outcome.tool_result:  # an earlier run of this call id: its recorded message
            return _replayed_message(call, outcome.value)
        return _stopped_message(call, outcome)


async def _in_thread(runner: ToolRunner, fn: Callable[[], Any]) -> Any:
    if not runner.store.blocking:
        return fn()
    return await anyio.to_thread.run_sync(fn)
