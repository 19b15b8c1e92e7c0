"""Consulting a provider: one request, one answer or one typed failure, within a deadline.

The gate hands a `ConfirmationRequest` to a `ConfirmationProvider` and gets back a
`Decision`, or a `Failure` saying why there is none: the provider raised (``error``), ran
out of time (``timeout``), ran out of time with ``on_timeout="pending"`` (``pending``:
the request stays in the store for another channel to answer), or has no way to reach a
human for this call (``unavailable``: it raised `ApprovalUnavailableError`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import anyio

from sandbox.approval.models import ConfirmationRequest, Decision
from sandbox.approval.providers import ConfirmationProvider, to_decision
from sandbox.errors import ApprovalUnavailableError, ConfirmationTimedOutError

FailureKind = Literal["error", "timeout", "pending", "unavailable"]


@dataclass(frozen=True)
class Failure:
    """Why a provider produced no decision."""

    kind: FailureKind
    message: str
    #: What happened, without what it means for the request (a pending wait that then
    #: turns out expired is reported from it).
    cause: str = field(default="")

    def __post_init__(self) -> None:
        if not self.cause:
            object.__setattr__(self, "cause", self.message)


async def consult(provider: ConfirmationProvider,
                  request: ConfirmationRequest) -> Decision | Failure:
    """Ask ``provider`` about ``request``, within ``provider.timeout`` seconds."""
    timeout = provider.timeout
    try:
        if timeout:
            # move_on_after, not fail_after: only our own deadline is a timeout. A
            # TimeoutError the provider raises itself (its HTTP client, say) is a failure.
            with anyio.move_on_after(timeout) as scope:
                answer = await provider.confirm(request)
            timed_out = scope.cancelled_caught
        else:  # no deadline: no cancel scope
            answer = await provider.confirm(request)
            timed_out = False
    except ConfirmationTimedOutError as exc:
        # The request itself expired while the provider waited (its deadline is in the
        # store): a timeout, whatever on_timeout says.
        return Failure("timeout", str(exc))
    except ApprovalUnavailableError as exc:
        return Failure("unavailable", str(exc))
    except Exception as exc:
        return Failure("error", f"confirmation provider {provider.name} failed: "
                                f"{type(exc).__name__}: {exc}")
    if timed_out:
        cause = f"no answer from {provider.name} within {timeout:g}s"
        if provider.on_timeout == "pending":
            return Failure("pending", f"{cause}; the request stays pending", cause=cause)
        return Failure("timeout", cause)
    try:
        return to_decision(answer, channel=provider.name)
    except Exception as exc:
        return Failure("error", f"confirmation provider {provider.name} failed: "
                                f"{type(exc).__name__}: {exc}")
