"""Grants: an answer to a parked request becomes a decision, a claim, an edit, a rule.

`settle` records the request's one decision and says what comes next, as a typed value:

- `Ended`: the call ends with this result (denied, timed out, failed, refused, or the
  decision was refused because another channel had answered first);
- `Run`: approved; run ``call`` with ``confirmation`` (``claimed``: the grant was claimed
  in the same store step as the approval, so nobody else can run it in between);
An approval is a single-use grant for the call id and the exact digest approved. An
edit is the human approving the edited call: the edited arguments are validated against
the tool's schema and pass its hard refusals again (a blocked bash command stays
blocked), and the edited call is then granted for its own digest and run once, without
a second question (the one rule on every channel: web, CLI, console, ADK, MCP, the
framework adapters). Saving "remember" rules happens between approving and
claiming, so that journal still reads approved → started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.approval.gate import check as gate
from sandbox.approval.gate.call import Call, Request
from sandbox.approval.gate.consult import Failure
from sandbox.approval.gate.journal import Transitions
from sandbox.approval.gate.plan import Plan, plan
from sandbox.approval.gate.results import NotRun, Outcome, Status
from sandbox.approval.models import Decision, canonical_json, digest_of
from sandbox.errors import ConfigurationError
from sandbox.tools.base import ToolArgumentError
from sandbox.tools.context import ToolConfirmation, ToolContext


@dataclass(slots=True)
class Ended:
    result: Outcome


@dataclass(slots=True)
class Run:
    call: Call
    confirmation: ToolConfirmation
    claimed: bool


Next = Ended | Run


class Grants:
    def __init__(self, transitions: Transitions, *, channel: str | None,
                 rule_session: str) -> None:
        self.transitions = transitions
        self.channel = channel
        self.rule_session = rule_session

    async def settle(self, call: Call, req: Request, answer: Decision | Failure,
                     ctx: ToolContext) -> Next:
        """Record the decision ``answer`` makes, then say what comes next."""
        decided = plan(answer, self.channel)
        refused = await self.transitions.decide(call, req, decided)
        if refused is not None:
            return Ended(refused)
        return await self.decided(call, req, answer, decided, ctx)

    async def decided(self, call: Call, req: Request, answer: Decision | Failure,
                      decided: Plan, ctx: ToolContext) -> Next:
        """What comes after a decision the store has recorded."""
        if decided.result is not None:
            return Ended(decided.result)
        assert not isinstance(answer, Failure)  # a failure's plan ends the call
        if answer.outcome == "approve":
            if not decided.start:
                await self.transitions.remember(
                    call, req, answer, gate.rule_subjects(call.tool, req.args),
                    self.rule_session)
            return Run(call, approval(req.hint, answer.payload), decided.start)
        return await self._edit(call, req, answer, ctx)

    async def _edit(self, call: Call, req: Request, answer: Decision,
                    ctx: ToolContext) -> Next:
        t = self.transitions
        tool = call.tool
        try:
            new_args = tool.validate_args(answer.args or {})
            text = canonical_json(new_args)
        except (ToolArgumentError, ConfigurationError) as exc:
            message = exc.message if isinstance(exc, ToolArgumentError) else str(exc)
            return Ended(await t.end(call, "rejected", NotRun(
                Status.REJECTED, f"The edited arguments are invalid: {message}. The tool "
                "was not run."), "tool.rejected"))
        edited = call.edited(new_args, text, digest_of(tool.name, text))
        # The human approved the edited call: its confirmation predicate is not asked
        # again (that human is the answer), but no approval overrides a hard refusal.
        stopped = await gate.refusal(tool, new_args)
        if stopped is not None:
            return Ended(await t.end(edited, stopped.state, stopped.result, stopped.event))
        await t.grant(edited)
        return Run(edited, approval(req.hint, answer.payload), False)


_APPROVALS: dict[str, ToolConfirmation] = {}


def approval(hint: str, payload: Any) -> ToolConfirmation:
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
