"""What an answer records: the one decision a request gets, planned before it is stored.

`plan` turns a provider's answer (a `Decision`, or a `consult.Failure` saying why there
is none) into the request's final status, the outcome recorded with it, and the call's
result when the decision ends the call. It touches neither the store nor the audit, so
the decision can be recorded in the very store step that read the request.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.approval.gate.consult import Failure
from sandbox.approval.gate.results import Denied, NotRun, Outcome, Status
from sandbox.approval.models import Decision


@dataclass(slots=True)
class Plan:
    """The one decision an answer records for a request: made without the store or the
    audit, so that it can be recorded in the same store step that read the request."""

    status: str
    outcome: str
    reason: str | None
    decision: Decision | None
    channel: str | None
    #: The call's outcome when the decision ends it (denied, timed out, failed).
    result: Outcome | None
    #: An approval of scope "once" claims the grant in the same step.
    start: bool


def plan(answer: Decision | Failure, channel: str | None) -> Plan:
    if isinstance(answer, Failure):
        if answer.kind == "unavailable":
            return Plan("error", answer.kind, answer.message, None, channel, NotRun(
                Status.REFUSED, f"{answer.message}. The tool was not run."), False)
        status = "timed_out" if answer.kind == "timeout" else "error"
        verb = "timed out" if status == "timed_out" else "failed"
        return Plan(status, answer.kind, answer.message, None, channel, NotRun(
            Status(status), f"Confirmation {verb}: {answer.message}. The tool was not "
            "run."), False)
    if answer.outcome == "deny":
        reason = answer.reason or "no reason given"
        return Plan("denied", "deny", reason, answer, None, Denied(reason), False)
    if answer.outcome == "approve":
        # Approving and claiming is one store step unless rules are saved in between.
        return Plan("approved", "approve", answer.reason, answer, None, None,
                    answer.scope == "once")
    return Plan("edited", "edit", answer.reason, answer, None, None, False)
