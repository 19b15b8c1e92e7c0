"""What every framework adapter needs from the gate, built once.

An adapter (Pydantic AI, OpenAI Agents, LangGraph) routes each gated call through a
`ToolRunner` and hands the framework what it expects:

- `run_call` / `answer_call` run or answer a call and return a `GateOutcome`: the tool's
  own return value exactly as the tool returned it (never the contract's
  ``{"result": ...}`` wrapping, never a ``"replayed"`` marker shown to the model), or what
  the gate made instead (awaiting, denied with the human's reason, blocked, refused);
- `DuplicateCallError` (a call id reused for other arguments) becomes a ``rejected``
  outcome and `UnknownCallError` (an answer for a call never asked) too, as the ADK
  adapter maps them: nothing runs, the model reads why;
- an answer another channel recorded (the web page, the CLI) is applied when the call
  is met again, so a request answered on the page runs (or not) in the framework's run;
- `session_key` names a framework conversation (a Pydantic AI ``conversation_id``, an
  OpenAI ``RunState``, a LangGraph ``thread_id``) as the gate's session id; pass it to
  `ToolRunner.for_session`.

The runner's own pieces these use: `ToolRunner.would_ask` (the verdict, recording
nothing), `ToolRunner.park` (record the question without running),
`ToolRunner.answer` / `ToolRunner.deny` (answers and denials made on the framework's
side, applied to the stored request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.approval.gate.results import Awaiting, NotRun, Outcome, Ran, Replayed, Status
from sandbox.approval.models import Decision
from sandbox.approval.runner import ToolRunner
from sandbox.errors import ConfirmationStateError, DuplicateCallError, UnknownCallError
from sandbox.tools.context import ToolConfirmation
from sandbox.tools.model_view import for_model

__all__ = ["GateOutcome", "answer_call", "run_call", "session_key"]

#: The statuses a gate result carries when the tool did not run (or not yet).
GATE_STATUSES = frozenset(status.value for status in Status)


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """One call's outcome as a framework adapter needs it.

    ``value`` is what the model should see: the tool's own return value when the tool
    ran (now, or in an earlier run this call id replays), else the gate's result dict.
    ``result`` is the contract's dict (`ToolRunner.call`'s), without ``"replayed"``.
    """

    result: dict[str, Any]
    value: Any
    #: The tool ran in this call (``value`` is its return value, as it returned it).
    ran: bool = False
    #: Answered from the record of an earlier call with this id (nothing ran now).
    replayed: bool = False
    #: ``value`` is the tool's own return value (it ran, now or before).
    tool_result: bool = False

    @property
    def status(self) -> str | None:
        """The gate's status (awaiting_confirmation, denied, blocked, rejected, error,
        timed_out, in_doubt, refused, running), or None when ``value`` is the tool's."""
        if self.tool_result:
            return None
        status = self.result.get("status")
        return status if isinstance(status, str) else None

    @property
    def awaiting(self) -> bool:
        return self.status == Status.AWAITING.value

    @property
    def denied(self) -> bool:
        return self.status == Status.DENIED.value

    @property
    def confirmation_id(self) -> str | None:
        cid = self.result.get("confirmation_id") if self.awaiting else None
        return cid if isinstance(cid, str) else None

    @property
    def message(self) -> str:
        """One line for the model when the gate stopped the call: the human's reason for
        a denial, else the gate's error."""
        if self.denied and isinstance(self.result.get("reason"), str):
            return str(self.result["reason"])
        for key in ("error", "message"):
            text = self.result.get(key)
            if isinstance(text, str) and text:
                return text
        return str(self.status or "")


def outcome(result: Outcome) -> GateOutcome:
    """A `GateOutcome` from the gate's typed outcome: the one place an adapter's result
    becomes the contract's dict."""
    shown = {k: v for k, v in result.to_dict().items() if k != "replayed"}
    if isinstance(result, Ran):
        return GateOutcome(shown, for_model(result.value), ran=True, tool_result=True)
    if isinstance(result, Replayed):
        if result.state == "done":
            # The record holds the contract's dict: a non-dict return value was wrapped
            # as {"result": value}. (A tool returning exactly {"result": x} itself reads
            # back as x here: the one case a replay cannot tell apart.)
            value: Any = shown["result"] if set(shown) == {"result"} else shown
            return GateOutcome(shown, for_model(value), replayed=True, tool_result=True)
        return GateOutcome(shown, shown, replayed=True)
    return GateOutcome(shown, shown)


def rejected(message: str) -> Outcome:
    return NotRun(Status.REJECTED, message)


async def run_call(runner: ToolRunner, name: str, args: dict[str, Any] | None,
                   call_id: str | None) -> GateOutcome:
    """``runner.call(name, args, call_id)`` for a framework.

    A call id reused for other arguments is ``rejected`` (nothing runs). A call that is
    still waiting, and that another channel (the web page, the CLI) has answered in the
    meantime, has that answer applied now (`ToolRunner.resume`): approved, it runs once
    here; denied, the model reads the reason.
    """
    try:
        result = await runner.call_outcome(name, args, call_id=call_id)
    except DuplicateCallError as exc:
        return outcome(rejected(f"{exc}. Nothing was run."))
    if isinstance(result, Awaiting) and await _has_answer(runner, result.confirmation_id):
        try:
            result = await runner.resume_outcome(result.confirmation_id)
        except ConfirmationStateError:
            pass  # applied by someone else meanwhile: the record answers next time
    return outcome(result)


async def answer_call(
    runner: ToolRunner, ref: str,
    decision: Decision | ToolConfirmation | dict[str, Any] | bool | None = None, *,
    args: dict[str, Any] | None = None, tool: str | None = None,
    decided_by: str | None = None, channel: str = "framework",
) -> GateOutcome:
    """`ToolRunner.answer` for a framework: the framework's own approval, denial or edit
    of call ``ref`` applied to the stored request, as a `GateOutcome`."""
    try:
        result = await runner.answer_outcome(ref, decision, args=args, tool=tool,
                                             decided_by=decided_by, channel=channel)
    except (DuplicateCallError, UnknownCallError) as exc:
        return outcome(rejected(f"{exc}. Nothing was run."))
    except ConfirmationStateError as exc:
        # The recorded answer this meant to apply was applied meanwhile (another
        # process, another channel): the request is decided, and its record answers.
        rec, req = await runner.find(ref)
        if rec is None or (req is not None and req.status == "pending"):
            return outcome(rejected(f"{exc}. Nothing was run."))
        result = await runner.answer_outcome(ref, Decision.approve(channel=channel),
                                             channel=channel)
    return outcome(result)


def session_key(framework: str, *parts: object) -> str:
    """The gate's session id for a framework conversation: ``framework:part:part``.

    ``session_key("pydantic-ai", ctx.conversation_id)``,
    ``session_key("langgraph", config["configurable"]["thread_id"])``. Requests asked in
    one session are applied only by a runner of that session, and "approve for this
    session" covers it alone (`ToolRunner.for_session`).
    """
    if not framework or any(p is None or p == "" for p in parts):
        raise ValueError(f"session_key needs a framework name and non-empty parts, got "
                         f"{framework!r} {parts!r}")
    return ":".join([framework, *(str(p) for p in parts)])[:256]


async def _has_answer(runner: ToolRunner, confirmation_id: str) -> bool:
    recorded = await runner._transitions.step(runner.store.get_answer, confirmation_id)
    return recorded is not None
