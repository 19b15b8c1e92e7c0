"""Confirmation providers: the protocol, AutoApprove, AutoDeny, CallbackConfirmationProvider."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from sandbox import (
    AutoApprove,
    AutoDeny,
    CallbackConfirmationProvider,
    ConfigurationError,
    ConfirmationProvider,
    ConfirmationRequest,
    Decision,
    FunctionTool,
    ToolConfirmation,
    ToolRunner,
)
from sandbox.approval.providers import parse_answer, to_decision

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


def request(**overrides: Any) -> ConfirmationRequest:
    fields: dict[str, Any] = dict(id="cf_1", call_id="c1", tool="t", args={}, digest="d",
                                  created_at=datetime.now(UTC))
    fields.update(overrides)
    return ConfirmationRequest(**fields)


def noop(x: int = 0) -> int:
    return x


# -- the protocol -----------------------------------------------------------------------------


def test_the_built_in_providers_satisfy_the_protocol() -> None:
    for provider in (AutoApprove(), AutoDeny(), CallbackConfirmationProvider(lambda r: True)):
        assert isinstance(provider, ConfirmationProvider)


async def test_a_custom_provider_class_plugs_into_the_runner() -> None:
    class Pager:
        name = "pager"
        timeout: float | None = 5.0
        on_timeout = "deny"

        def __init__(self) -> None:
            self.asked: list[str] = []

        async def confirm(self, request: ConfirmationRequest) -> Decision:
            self.asked.append(request.tool)
            return Decision.deny("on-call said no", decided_by="oncall")

    pager = Pager()
    runner = ToolRunner([FunctionTool(noop, require_confirmation=True)], provider=pager)

    result = await runner.call("noop", {"x": 1})

    assert result["reason"] == "on-call said no"
    assert pager.asked == ["noop"]


async def test_the_request_a_provider_sees_carries_its_expiry() -> None:
    seen: list[ConfirmationRequest] = []

    def ui(req: ConfirmationRequest) -> bool:
        seen.append(req)
        return True

    runner = ToolRunner([FunctionTool(noop, require_confirmation=True)],
                        provider=CallbackConfirmationProvider(ui), approval_ttl=60)
    await runner.call("noop", {"x": 1})

    [req] = seen
    assert req.expires_at is not None
    assert 59 < (req.expires_at - req.created_at).total_seconds() <= 60


# -- AutoApprove / AutoDeny ----------------------------------------------------------------------


async def test_auto_approve_approves_and_says_who() -> None:
    decision = await AutoApprove().confirm(request())

    assert (decision.outcome, decision.decided_by, decision.channel) == (
        "approve", "auto-approve", "auto-approve")


async def test_auto_deny_denies_with_its_reason() -> None:
    decision = await AutoDeny("read-only").confirm(request())

    assert (decision.outcome, decision.reason) == ("deny", "read-only")


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_a_timeout_that_is_not_positive_is_refused(timeout: float) -> None:
    with pytest.raises(ConfigurationError, match="positive"):
        AutoApprove(timeout=timeout)


def test_an_unknown_on_timeout_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'deny' or 'pending'"):
        CallbackConfirmationProvider(lambda r: True, on_timeout="approve")  # type: ignore[arg-type]


def test_the_callback_provider_times_out_by_default_and_then_denies() -> None:
    provider = CallbackConfirmationProvider(lambda r: True)

    assert provider.timeout is not None and provider.on_timeout == "deny"


def test_the_callback_provider_needs_a_callable() -> None:
    with pytest.raises(ConfigurationError, match="callable"):
        CallbackConfirmationProvider("not a function")  # type: ignore[arg-type]


# -- CallbackConfirmationProvider -----------------------------------------------------------------


async def test_a_sync_callback_runs_in_a_worker_thread() -> None:
    threads: list[int] = []

    def ui(req: ConfirmationRequest) -> bool:
        threads.append(threading.get_ident())
        return True

    await CallbackConfirmationProvider(ui).confirm(request())

    assert threads and threads[0] != threading.get_ident()


async def test_an_async_callback_runs_on_the_event_loop() -> None:
    threads: list[int] = []

    async def ui(req: ConfirmationRequest) -> bool:
        threads.append(threading.get_ident())
        return True

    await CallbackConfirmationProvider(ui).confirm(request())

    assert threads == [threading.get_ident()]


async def test_a_callable_object_with_async_call_is_awaited() -> None:
    class UI:
        async def __call__(self, req: ConfirmationRequest) -> Decision:
            return Decision.deny("object says no")

    decision = await CallbackConfirmationProvider(UI()).confirm(request())

    assert decision.reason == "object says no"


async def test_a_sync_callback_returning_an_awaitable_is_awaited() -> None:
    async def later() -> bool:
        return True

    decision = await CallbackConfirmationProvider(lambda r: later()).confirm(request())

    assert decision.outcome == "approve"


async def test_the_callback_provider_names_its_channel() -> None:
    decision = await CallbackConfirmationProvider(lambda r: True, name="slack").confirm(request())

    assert decision.channel == "slack"


# -- normalising answers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (True, "approve"),
        (False, "deny"),
        (ToolConfirmation(confirmed=True), "approve"),
        (ToolConfirmation(confirmed=False), "deny"),
        (Decision.edit({"x": 2}), "edit"),
    ],
)
def test_to_decision_understands_bools_confirmations_and_decisions(answer: Any,
                                                                   outcome: str) -> None:
    assert to_decision(answer, channel="ui").outcome == outcome


def test_to_decision_keeps_a_decisions_own_channel_and_fills_a_missing_one() -> None:
    assert to_decision(Decision.approve(channel="web"), channel="ui").channel == "web"
    assert to_decision(Decision.approve(), channel="ui").channel == "ui"


@pytest.mark.parametrize("answer", ["yes", 1, None, {"confirmed": True}])
def test_to_decision_refuses_anything_unclear_and_says_what_to_return(answer: Any) -> None:
    with pytest.raises(ConfigurationError, match="return True/False, a ToolConfirmation"):
        to_decision(answer, channel="ui")


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ({"confirmed": True, "payload": {"a": 1}}, "approve"),
        ('{"confirmed": false}', "deny"),
        ({"response": '{"confirmed": true}'}, "approve"),
        ({"outcome": "edit", "args": {"x": 3}}, "edit"),
        (b'{"outcome": "deny", "reason": "r"}', "deny"),
    ],
)
def test_parse_answer_reads_serialised_answers_of_either_shape(answer: Any,
                                                               outcome: str) -> None:
    assert parse_answer(answer, channel="web").outcome == outcome


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ("{", "not valid JSON"),
        ({"outcome": "edit"}, "needs args"),
        ({"outcome": "approve", "args": {"x": 1}}, "only an 'edit' decision"),
        ({"outcome": "approve", "extra": 1}, "extra"),
    ],
)
def test_parse_answer_refuses_malformed_answers_naming_the_problem(answer: Any,
                                                                   named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        parse_answer(answer, channel="web")


def test_decision_constructors_build_valid_decisions() -> None:
    assert Decision.approve(payload=1).payload == 1
    assert Decision.deny("r").reason == "r"
    assert Decision.edit({"a": 1}).args == {"a": 1}
    with pytest.raises(ValueError, match="needs args"):
        Decision(outcome="edit")
