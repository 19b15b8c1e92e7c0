"""Where confirmation requests go: the `ConfirmationProvider` protocol and the basic ones.

A provider answers one `ConfirmationRequest` with a `Decision`. The runner bounds every
answer by the provider's `timeout`; what happens when it runs out is the provider's
`on_timeout`: ``"deny"`` (the default: the call is refused and recorded as *timed out*,
never as denied or approved) or ``"pending"`` (the request stays in the store for a
human to answer later through `ToolRunner.resume`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, runtime_checkable

from sandbox.approval.models import ConfirmationRequest, Decision
from sandbox.approval.store.answers import _PLAIN
from sandbox.approval.store.answers import parse_answer as parse_answer
from sandbox.approval.store.answers import plain_approval as plain_approval
from sandbox.approval.store.answers import to_decision as to_decision
from sandbox.errors import ConfigurationError
from sandbox.tools.context import ToolConfirmation

OnTimeout = Literal["deny", "pending"]
#: What a callback may return: a bool, an ADK `ToolConfirmation`, or a `Decision`.
CallbackAnswer = bool | ToolConfirmation | Decision


@runtime_checkable
class ConfirmationProvider(Protocol):
    """Answers confirmation requests. Implement `confirm`; set `timeout` and `on_timeout`."""

    name: str
    timeout: float | None
    on_timeout: OnTimeout

    async def confirm(self, request: ConfirmationRequest) -> Decision: ...


def _check_timeout(timeout: float | None, on_timeout: str) -> None:
    if timeout is not None and not timeout > 0:
        raise ConfigurationError(
            f"provider timeout must be a positive number of seconds or None, got {timeout!r}"
        )
    if on_timeout not in ("deny", "pending"):
        raise ConfigurationError(
            f"on_timeout must be 'deny' or 'pending', got {on_timeout!r}"
        )


class AutoApprove:
    """Approves every request. For tests, demos and fully trusted tools only."""

    name = "auto-approve"

    def __init__(self, *, timeout: float | None = None, on_timeout: OnTimeout = "deny") -> None:
        _check_timeout(timeout, on_timeout)
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        return AUTO_APPROVED  # immutable: one instance serves every request


AUTO_APPROVED = Decision.approve(decided_by=AutoApprove.name, channel=AutoApprove.name)
#: What the store records for it, as JSON text (computed once: the decision is immutable).
AUTO_APPROVED_JSON = json.dumps(AUTO_APPROVED.model_dump(mode="json"), ensure_ascii=False)
_AUTO_APPROVE_CONFIRM = AutoApprove.confirm


def recorded_form(decision: Decision) -> str | dict[str, Any]:
    """A decision as the store records it: JSON text for the shared immutable ones
    (computed once), else the model as a JSON-able dict."""
    if decision is AUTO_APPROVED:
        return AUTO_APPROVED_JSON
    if decision.channel is not None:
        known = _PLAIN.get(decision.channel)
        if known is not None and known[0] is decision:
            return known[1]
    return decision.model_dump(mode="json")


def fixed_answer(provider: object) -> Decision | None:
    """The decision `provider` would give any request, when that is known without asking.

    Only an `AutoApprove` whose `confirm` is the original (not overridden in a subclass,
    on the instance, or patched) qualifies; the runner then needs neither the request
    model nor a timeout scope for it. Anything else returns None and is asked.
    """
    confirm = getattr(provider, "confirm", None)
    if getattr(confirm, "__func__", None) is _AUTO_APPROVE_CONFIRM:
        return AUTO_APPROVED
    return None


class AutoDeny:
    """Denies every request with a fixed reason, which the model sees."""

    name = "auto-deny"

    def __init__(
        self,
        reason: str = "denied by policy",
        *,
        timeout: float | None = None,
        on_timeout: OnTimeout = "deny",
    ) -> None:
        _check_timeout(timeout, on_timeout)
        self.reason = reason
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        return Decision.deny(self.reason, decided_by=self.name, channel=self.name)


class CallbackConfirmationProvider:
    """Hands each request to your function: the hook for a custom UI.

    ``fn(request)`` may be sync or async and returns ``True``/``False``, a
    `ToolConfirmation` (``confirmed`` decides; its ``payload`` reaches the tool), or a
    `Decision` (approve, deny with a reason, edit the arguments). A sync ``fn`` runs in
    a worker thread, so a blocking UI call cannot stall the event loop. Anything else,
    or an exception, fails closed.
    """

    def __init__(
        self,
        fn: Callable[[ConfirmationRequest], CallbackAnswer | Awaitable[CallbackAnswer]],
        *,
        timeout: float | None = 300.0,
        on_timeout: OnTimeout = "deny",
        name: str = "callback",
    ) -> None:
        if not callable(fn):
            raise ConfigurationError(
                f"CallbackConfirmationProvider needs a callable, got {type(fn).__name__}"
            )
        _check_timeout(timeout, on_timeout)
        self.fn = fn
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout
        self.name = name
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004
        )

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        if self._is_async:
            answer: Any = await self.fn(request)  # type: ignore[misc]
        else:
            import anyio.to_thread

            # abandon_on_cancel: a callback stuck waiting for a human must not keep the
            # runner past the provider timeout; its eventual answer is discarded.
            answer = await anyio.to_thread.run_sync(self.fn, request, abandon_on_cancel=True)
            if inspect.isawaitable(answer):
                answer = await answer
        return to_decision(answer, channel=self.name)
