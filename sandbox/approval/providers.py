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

from pydantic import ValidationError

from sandbox.approval.models import ConfirmationRequest, Decision
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


#: One immutable "approve once" per channel, and what the store records for it.
_PLAIN: dict[str, tuple[Decision, str]] = {}


def plain_approval(channel: str) -> Decision:
    """``Decision.approve(channel=channel)``, made (and validated) once per channel."""
    known = _PLAIN.get(channel)
    if known is not None:
        return known[0]
    decision = Decision.approve(channel=channel)
    if len(_PLAIN) < 64:
        _PLAIN[channel] = (decision, json.dumps(decision.model_dump(mode="json"),
                                                ensure_ascii=False))
    return decision


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


def parse_answer(answer: Any, *, channel: str) -> Decision:
    """Normalise an answer that may have crossed a process boundary.

    Accepts what `to_decision` does, plus the serialised forms: a dict or JSON text in
    either shape (a dict with ``outcome`` is a `Decision`; anything else is read as ADK's
    `ToolConfirmation`, ``{"response": json}`` wrapper included). Anything unclear is a
    `ConfigurationError` naming what was wrong.
    """
    if isinstance(answer, (str, bytes)):
        answer = _load_json(answer)
    if isinstance(answer, dict):
        answer = (
            _decision_from_dict(answer) if "outcome" in answer
            else ToolConfirmation.parse(answer)
        )
    return to_decision(answer, channel=channel)


def to_decision(answer: Any, *, channel: str) -> Decision:
    """Normalise what a provider or callback returned; anything unclear is an error."""
    if isinstance(answer, Decision):
        if answer.channel is None:
            return answer.model_copy(update={"channel": channel})
        return answer
    if isinstance(answer, bool):
        return (
            plain_approval(channel)
            if answer
            else Decision.deny(f"denied by {channel}", channel=channel)
        )
    if isinstance(answer, ToolConfirmation):
        if answer.confirmed:
            if answer.payload is None:
                return plain_approval(channel)
            return Decision.approve(payload=answer.payload, channel=channel)
        return Decision.deny(answer.hint or f"denied by {channel}", channel=channel)
    raise ConfigurationError(
        f"confirmation provider {channel!r} returned {type(answer).__name__}; return True/False, "
        "a ToolConfirmation or a Decision (Decision.approve(), Decision.deny(reason), "
        "Decision.edit(args))"
    )


def _load_json(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"the answer is not valid JSON ({exc.msg} at position {exc.pos}); send "
            '{"confirmed": true} (ADK) or {"outcome": "approve"} (a Decision)'
        ) from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ConfigurationError(
            f"the answer could not be read ({type(exc).__name__}); send UTF-8 JSON like "
            '{"confirmed": true} (ADK) or {"outcome": "approve"} (a Decision)'
        ) from None


def _decision_from_dict(data: dict[str, Any]) -> Decision:
    try:
        return Decision.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(
            f"invalid Decision ({problems}); send outcome 'approve', 'deny' (with a reason) "
            "or 'edit' (with args)"
        ) from None
