"""Execution: claim, run, finish; a run that was interrupted is in doubt, never re-run.

`run` claims the call's grant (unless the approval already claimed it), runs the tool
with the call's one `ToolContext`, and records the end. A tool that asks for a
confirmation from inside (`ToolContext.request_confirmation`) returns `AskedInside`; it
is run again with the answer. `replay` answers a call id that was used before from its
record: a call is never started twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from sandbox.approval.gate.call import Call
from sandbox.approval.gate.journal import Transitions
from sandbox.approval.gate.results import Awaiting, NotRun, Outcome, Ran, Replayed, Status
from sandbox.approval.store import CallRecord, Owner
from sandbox.errors import DuplicateCallError
from sandbox.tools.context import ToolConfirmation, ToolContext


@dataclass(frozen=True, slots=True)
class AskedInside:
    """The tool asked for a confirmation from inside (hint and payload for the human)."""

    hint: str
    payload: Any


class Execution:
    def __init__(self, transitions: Transitions) -> None:
        self.transitions = transitions

    async def run(self, call: Call, confirmation: ToolConfirmation | None, ctx: ToolContext,
                  *, claimed: bool) -> Outcome | AskedInside:
        t = self.transitions
        if not claimed:
            refused = await t.start(call)
            if refused is not None:
                return refused
        ctx.tool_confirmation = confirmation
        ctx.gated = True
        try:
            result = await call.tool.run_async(args=call.args, tool_context=ctx)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await t.in_doubt(call, "cancelled while running")
            raise
        except Exception as exc:
            return await t.end(call, "failed", NotRun(
                Status.ERROR, f"{call.name} raised {type(exc).__name__}: {exc}"), "tool.failed")
        requested = ctx.take_confirmation_request()
        if requested is not None:
            return AskedInside(requested.hint, requested.payload)
        ran = Ran(result if isinstance(result, dict) else {"result": result}, result)
        if not t.finish_now(call, ran.result):
            await t.finish(call, ran.result)
        return ran

    async def replay(self, rec: CallRecord, call: Call) -> Outcome:
        """The recorded outcome of a call id used before (never a second run)."""
        if rec.session_id != call.session_id:
            # Another session's call: its outcome is that session's to read, and this
            # call is not run under an id that is spent (ids may repeat across sessions
            # when a model or a test model makes them up).
            raise DuplicateCallError(
                f"call id {rec.call_id!r} was already used in another session; nothing was "
                "run. Every new call needs a new call id")
        if rec.tool != call.name or rec.digest != call.digest:
            raise DuplicateCallError(
                f"call id {rec.call_id!r} was already used for {rec.tool} with other "
                "arguments; every new call needs a new call id")
        step = self.transitions.step
        store = self.transitions.store
        if rec.state == "awaiting" and rec.request_id:
            req = await step(store.get_request, rec.request_id)
            if req.status == "pending":
                return Awaiting(req.id, req.call_id, req.tool, req.hint)
            rec = await step(store.get_call, rec.call_id)
        if rec.state == "started" and Owner.alive(rec.owner) is not True:
            # Dead here, or on another host (the store's sweep judges by its lease).
            await self.transitions.sweep()
            rec = await step(store.get_call, rec.call_id)
        if rec.state == "in_doubt":
            return NotRun(Status.IN_DOUBT, (
                f"call {rec.call_id} started but its process ended before recording the "
                "outcome; it will not be run again. Check its effects, then make a new call "
                "with a new call id if it is still needed"), rec.call_id)
        if isinstance(rec.result, dict):
            return Replayed(rec.result, rec.state)
        return NotRun(Status.RUNNING, f"call {rec.call_id} is already {rec.state}; it will "
                      "not be started twice", rec.call_id)
