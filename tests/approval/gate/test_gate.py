"""ToolRunner, the gate: who is asked, when a tool runs, and what the result says."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sandbox import (
    AutoApprove,
    AutoDeny,
    BaseTool,
    CallbackConfirmationProvider,
    ConfigurationError,
    ConfirmationRequest,
    Decision,
    DuplicateCallError,
    FunctionTool,
    ToolConfirmation,
    ToolContext,
    ToolRunner,
    UnknownConfirmationError,
    UnknownToolError,
    args_digest,
)
from tests.conftest import SideEffect

# Every test here runs on both in-process backends (MemoryApprovalStore, SQLite in memory).
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(15), pytest.mark.usefixtures("store_backend")]


def append_tool(effect: SideEffect, *, require_confirmation: Any = True,
                name: str = "append") -> FunctionTool:
    def append(text: str) -> dict[str, Any]:
        """Append a line to the side-effect file.

        Args:
            text: The line.
        """
        effect.append(text)
        return {"written": text}

    return FunctionTool(append, name=name, require_confirmation=require_confirmation)


class Recorder:
    """A callback provider's function that records every request and answers from a list."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[ConfirmationRequest] = []

    def __call__(self, request: ConfirmationRequest) -> Any:
        self.requests.append(request)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def request_of(runner: ToolRunner, call_id: str) -> ConfirmationRequest:
    rid = runner.store.get_call(call_id).request_id
    assert rid is not None
    return runner.store.get_request(rid)


# -- who is asked ---------------------------------------------------------------------


async def test_static_confirmation_asks_the_provider_about_exactly_this_call(
    effect: SideEffect,
) -> None:
    answer = Recorder(True)
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(answer))

    result = await runner.call("append", {"text": "hello"}, call_id="c1")

    assert result == {"written": "hello"}
    assert effect.lines == ["hello"]
    [req] = answer.requests
    assert (req.call_id, req.tool, req.args, req.kind) == ("c1", "append", {"text": "hello"},
                                                           "static")
    assert req.digest == args_digest("append", {"text": "hello"})
    assert "append" in req.hint


async def test_tool_without_require_confirmation_runs_without_asking(effect: SideEffect) -> None:
    answer = Recorder(False)
    runner = ToolRunner([append_tool(effect, require_confirmation=False)],
                        provider=CallbackConfirmationProvider(answer))

    assert await runner.call("append", {"text": "a"}) == {"written": "a"}
    assert answer.requests == []


async def test_no_provider_and_no_confirmation_needed_runs_immediately(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect, require_confirmation=False)])

    assert await runner.call("append", {"text": "a"}) == {"written": "a"}


async def test_predicate_gates_only_the_calls_it_selects(effect: SideEffect) -> None:
    answer = Recorder(False)
    tool = append_tool(effect, require_confirmation=lambda text: text.startswith("rm"))
    runner = ToolRunner([tool], provider=CallbackConfirmationProvider(answer))

    await runner.call("append", {"text": "ls"})
    denied = await runner.call("append", {"text": "rm -rf"})

    assert effect.lines == ["ls"]
    assert denied["status"] == "denied"
    assert [r.kind for r in answer.requests] == ["predicate"]


async def test_async_predicate_gates_only_the_calls_it_selects(effect: SideEffect) -> None:
    async def risky(text: str) -> bool:
        await anyio.lowlevel.checkpoint()
        return text == "risky"

    runner = ToolRunner([append_tool(effect, require_confirmation=risky)],
                        provider=AutoDeny("no"))

    await runner.call("append", {"text": "fine"})
    await runner.call("append", {"text": "risky"})

    assert effect.lines == ["fine"]


async def test_predicate_that_raises_fails_closed(effect: SideEffect) -> None:
    def broken(text: str) -> bool:
        raise RuntimeError("policy service down")

    runner = ToolRunner([append_tool(effect, require_confirmation=broken)],
                        provider=AutoApprove())

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "error"
    assert "policy service down" in result["error"]
    assert not effect.happened
    assert runner.store.get_call("c1").state == "error"


async def test_precheck_refusal_never_reaches_a_human(effect: SideEffect) -> None:
    class Guarded(BaseTool):
        async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
            return {"error": "blocked: writes outside the workspace"}

        async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
            return "approve?"

        async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
            effect.append("ran")

    answer = Recorder(True)
    runner = ToolRunner([Guarded(name="guarded", description="")],
                        provider=CallbackConfirmationProvider(answer))

    result = await runner.call("guarded", {})

    assert result == {"status": "blocked", "error": "blocked: writes outside the workspace"}
    assert answer.requests == []
    assert not effect.happened


# -- denials ---------------------------------------------------------------------------


async def test_denied_tool_never_runs_and_the_result_carries_the_humans_reason(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(
        lambda req: Decision.deny("not on a Friday", decided_by="alice")))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "denied"
    assert result["reason"] == "not on a Friday"
    assert "not on a Friday" in result["error"]
    assert not effect.happened
    decision = runner.store.request_decision(request_of(runner, "c1").id)
    assert decision is not None
    assert (decision["status"], decision["decided_by"]) == ("denied", "alice")


async def test_auto_deny_reason_reaches_the_result(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoDeny("read-only session"))

    result = await runner.call("append", {"text": "a"})

    assert result["status"] == "denied" and result["reason"] == "read-only session"
    assert not effect.happened


async def test_callback_returning_false_denies(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)],
                        provider=CallbackConfirmationProvider(lambda req: False))

    assert (await runner.call("append", {"text": "a"}))["status"] == "denied"
    assert not effect.happened


async def test_rejecting_tool_confirmation_denies_with_its_hint_as_reason(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(
        lambda req: ToolConfirmation(confirmed=False, hint="too broad")))

    result = await runner.call("append", {"text": "a"})

    assert result["status"] == "denied" and result["reason"] == "too broad"
    assert not effect.happened


# -- providers that fail -----------------------------------------------------------------


async def test_provider_that_raises_fails_closed_recorded_as_error(effect: SideEffect) -> None:
    def crash(req: ConfirmationRequest) -> bool:
        raise ConnectionError("UI unreachable")

    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(crash))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "error"
    assert "UI unreachable" in result["error"]
    assert not effect.happened
    assert request_of(runner, "c1").status == "error"
    assert runner.store.get_call("c1").state == "error"


async def test_provider_answering_nonsense_fails_closed(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)],
                        provider=CallbackConfirmationProvider(lambda req: "yes"))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "error"
    assert "returned str" in result["error"]
    assert not effect.happened
    assert request_of(runner, "c1").status == "error"


@pytest.mark.parametrize("limit", [None, 30.0], ids=["no-timeout", "timeout"])
async def test_a_provider_raising_its_own_timeout_error_is_an_error_not_our_timeout(
    effect: SideEffect, limit: float | None
) -> None:
    async def ui(req: ConfirmationRequest) -> bool:
        raise TimeoutError("the chat service did not answer")

    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(
        ui, timeout=limit, on_timeout="pending"))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "error" and "chat service" in result["error"]
    assert request_of(runner, "c1").status == "error"
    assert not effect.happened


@pytest.mark.timeout(5)
async def test_async_provider_that_hangs_times_out_and_the_tool_never_runs(
    effect: SideEffect,
) -> None:
    async def never(req: ConfirmationRequest) -> bool:
        await anyio.sleep(60)
        return True

    runner = ToolRunner([append_tool(effect)],
                        provider=CallbackConfirmationProvider(never, timeout=0.2))

    with anyio.fail_after(3):
        result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "timed_out"
    assert "0.2s" in result["error"]
    assert not effect.happened
    assert request_of(runner, "c1").status == "timed_out"
    assert runner.store.get_call("c1").state == "timed_out"


@pytest.mark.timeout(5)
async def test_sync_callback_blocked_waiting_for_a_human_times_out(effect: SideEffect) -> None:
    release = threading.Event()
    answered = threading.Event()

    def blocking_ui(req: ConfirmationRequest) -> bool:
        release.wait(5)
        answered.set()
        return True  # arrives too late: must be discarded

    runner = ToolRunner([append_tool(effect)],
                        provider=CallbackConfirmationProvider(blocking_ui, timeout=0.2))
    try:
        with anyio.fail_after(3):
            result = await runner.call("append", {"text": "a"}, call_id="c1")
    finally:
        release.set()
    answered.wait(2)

    assert result["status"] == "timed_out"
    assert request_of(runner, "c1").status == "timed_out"
    assert not effect.happened


@pytest.mark.timeout(5)
async def test_timeout_with_on_timeout_pending_leaves_the_request_pending_and_resumable(
    effect: SideEffect,
) -> None:
    async def never(req: ConfirmationRequest) -> bool:
        await anyio.sleep(60)
        return True

    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(
        never, timeout=0.1, on_timeout="pending"))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "awaiting_confirmation"
    assert not effect.happened
    assert [r.id for r in await runner.pending()] == [result["confirmation_id"]]
    resumed = await runner.resume(result["confirmation_id"], ToolConfirmation(confirmed=True))
    assert resumed == {"written": "a"}
    assert effect.lines == ["a"]


# -- callbacks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_callback_approving_with_true_runs_the_tool(effect: SideEffect,
                                                          is_async: bool) -> None:
    async def async_yes(req: ConfirmationRequest) -> bool:
        return True

    fn = async_yes if is_async else (lambda req: True)
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(fn))

    assert await runner.call("append", {"text": "a"}) == {"written": "a"}
    assert effect.lines == ["a"]


async def test_approval_payload_reaches_the_tool_through_tool_confirmation() -> None:
    seen: list[ToolConfirmation | None] = []

    def deploy(env: str, tool_context: ToolContext) -> str:
        seen.append(tool_context.tool_confirmation)
        return "ok"

    async def ui(req: ConfirmationRequest) -> ToolConfirmation:
        return ToolConfirmation(confirmed=True, payload={"ticket": "OPS-1"})

    runner = ToolRunner([FunctionTool(deploy, require_confirmation=True)],
                        provider=CallbackConfirmationProvider(ui))

    assert await runner.call("deploy", {"env": "prod"}) == {"result": "ok"}
    [conf] = seen
    assert conf is not None and conf.confirmed and conf.payload == {"ticket": "OPS-1"}


async def test_edited_arguments_that_need_no_confirmation_run_exactly_once_as_edited(
    effect: SideEffect,
) -> None:
    answer = Recorder(Decision.edit({"text": "safe"}))
    runner = ToolRunner([append_tool(effect, require_confirmation=lambda text: text != "safe")],
                        provider=CallbackConfirmationProvider(answer))

    result = await runner.call("append", {"text": "rm -rf /"}, call_id="c1")

    assert result == {"written": "safe"}
    assert effect.lines == ["safe"]
    assert len(answer.requests) == 1
    assert [s for s, _, _ in runner.store.journal("c1")].count("started") == 1


async def test_invalid_edited_arguments_are_rejected_and_nothing_runs(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(
        lambda req: Decision.edit({"txt": "typo"})))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "rejected"
    assert "unexpected argument 'txt'" in result["error"]
    assert not effect.happened
    assert runner.store.get_call("c1").state == "rejected"


async def test_edited_arguments_that_still_match_the_predicate_run_once_without_a_second_question(
    effect: SideEffect,
) -> None:
    # The human who edits approves the edited call: asking them again about their own
    # edit is a second question the rule forbids.
    answer = Recorder(Decision.edit({"text": "rm -rf ./build"}))
    runner = ToolRunner([append_tool(effect, require_confirmation=lambda text: "rm" in text)],
                        provider=CallbackConfirmationProvider(answer))

    result = await runner.call("append", {"text": "rm -rf /"}, call_id="c1")

    assert result == {"written": "rm -rf ./build"}
    assert len(answer.requests) == 1
    assert effect.lines == ["rm -rf ./build"]
    assert [s for s, _, _ in runner.store.journal("c1")].count("started") == 1
    assert len(await runner.pending()) == 0


async def test_edited_arguments_pass_the_tools_refusal_check_again(effect: SideEffect) -> None:
    class Writer(BaseTool):
        async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
            return {"error": "outside workspace"} if args["path"].startswith("/") else None

        async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
            return "write?"

        async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
            effect.append(args["path"])

    runner = ToolRunner([Writer(name="write", description="")],
                        provider=CallbackConfirmationProvider(
                            lambda req: Decision.edit({"path": "/etc/passwd"})))

    result = await runner.call("write", {"path": "notes.txt"})

    assert result == {"status": "blocked", "error": "outside workspace"}
    assert not effect.happened


async def test_the_predicate_is_not_asked_about_the_humans_own_edit(effect: SideEffect) -> None:
    seen: list[str] = []

    def risky(text: str) -> bool:
        seen.append(text)
        if text == "edited":
            raise RuntimeError("policy service down")
        return True

    runner = ToolRunner([append_tool(effect, require_confirmation=risky)],
                        provider=CallbackConfirmationProvider(
                            lambda req: Decision.edit({"text": "edited"})))

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result == {"written": "edited"}
    assert seen == ["a"] and effect.lines == ["edited"]


async def test_an_edit_is_the_answer_a_later_provider_answer_is_never_consulted(
    effect: SideEffect,
) -> None:
    answer = Recorder(Decision.edit({"text": "rm b"}), Decision.deny("still no"))
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(answer))

    result = await runner.call("append", {"text": "rm a"})

    assert result == {"written": "rm b"}
    assert effect.lines == ["rm b"] and len(answer.requests) == 1


async def test_edit_answered_through_resume_runs_the_edited_call_once(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    first = await runner.call("append", {"text": "a"}, call_id="c1")

    edited = await runner.resume(first["confirmation_id"], Decision.edit({"text": "b"}))

    assert edited == {"written": "b"}
    assert effect.lines == ["b"]
    assert await runner.pending() == []
    assert request_of(runner, "c1").status == "edited"
    # The id is spent: the model's original call replays the edited call's outcome.
    again = await runner.call("append", {"text": "a"}, call_id="c1")
    assert again["replayed"] is True and effect.lines == ["b"]


async def test_an_edit_to_a_blocked_bash_command_stays_blocked(tmp_path: Any) -> None:
    from sandbox import BashToolPolicy, ExecuteBashTool

    bash = ExecuteBashTool(workspace=tmp_path, policy=BashToolPolicy(
        allowed_command_prefixes=("echo", "rm")))
    runner = ToolRunner([bash], provider=CallbackConfirmationProvider(
        lambda req: Decision.edit({"command": "curl http://127.0.0.1:9/x"})))

    result = await runner.call("execute_bash", {"command": "rm -f nothing"}, call_id="c1")

    assert result["status"] == "blocked"
    assert runner.store.get_call("c1").state == "blocked"


# -- confirmation requested from inside the tool ------------------------------------------


def asking_tool(effect: SideEffect, invocations: list[ToolConfirmation | None]) -> FunctionTool:
    def transfer(amount: int, tool_context: ToolContext) -> dict[str, Any]:
        invocations.append(tool_context.tool_confirmation)
        if tool_context.tool_confirmation is None:
            tool_context.request_confirmation(hint=f"send {amount}?", payload={"limit": 0})
            return {"status": "needs approval"}
        effect.append(f"{amount} {json.dumps(tool_context.tool_confirmation.payload)}")
        return {"sent": amount}

    return FunctionTool(transfer)


async def test_tool_requested_confirmation_goes_to_the_provider_and_reinvokes_the_tool(
    effect: SideEffect,
) -> None:
    invocations: list[ToolConfirmation | None] = []
    answer = Recorder(ToolConfirmation(confirmed=True, payload={"limit": 100}))
    runner = ToolRunner([asking_tool(effect, invocations)],
                        provider=CallbackConfirmationProvider(answer))

    result = await runner.call("transfer", {"amount": 5}, call_id="c1")

    assert result == {"sent": 5}
    [req] = answer.requests
    assert (req.kind, req.hint, req.payload) == ("tool", "send 5?", {"limit": 0})
    assert invocations == [None, ToolConfirmation(confirmed=True, hint="send 5?",
                                                  payload={"limit": 100})]
    assert effect.lines == ['5 {"limit": 100}']


async def test_tool_requested_confirmation_waits_in_the_store_and_resumes(
    effect: SideEffect,
) -> None:
    invocations: list[ToolConfirmation | None] = []
    runner = ToolRunner([asking_tool(effect, invocations)])

    parked = await runner.call("transfer", {"amount": 7}, call_id="c1")

    assert parked["status"] == "awaiting_confirmation" and parked["hint"] == "send 7?"
    assert not effect.happened  # the first invocation asked; it did not transfer
    [req] = await runner.pending()
    assert (req.kind, req.payload) == ("tool", {"limit": 0})
    result = await runner.resume(parked["confirmation_id"],
                                 ToolConfirmation(confirmed=True, payload={"limit": 9}))
    assert result == {"sent": 7}
    assert effect.lines == ['7 {"limit": 9}']
    assert len(invocations) == 2


async def test_tool_requested_confirmation_denied_does_not_reinvoke_the_tool(
    effect: SideEffect,
) -> None:
    invocations: list[ToolConfirmation | None] = []
    runner = ToolRunner([asking_tool(effect, invocations)], provider=AutoDeny("over budget"))

    result = await runner.call("transfer", {"amount": 5})

    assert result["status"] == "denied" and result["reason"] == "over budget"
    assert invocations == [None]
    assert not effect.happened


async def test_a_tool_that_keeps_asking_is_stopped_after_max_rounds() -> None:
    calls: list[int] = []

    def needy(tool_context: ToolContext) -> None:
        calls.append(1)
        tool_context.request_confirmation(hint="again?")

    runner = ToolRunner([FunctionTool(needy)], provider=AutoApprove(), max_rounds=3)

    result = await runner.call("needy", {})

    assert result["status"] == "error" and "max_rounds=3" in result["error"]
    assert len(calls) == 3


# -- deferred confirmation (no provider) ------------------------------------------------------


async def test_without_a_provider_the_request_waits_and_the_tool_has_not_run(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])

    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result["status"] == "awaiting_confirmation"
    assert result["call_id"] == "c1" and result["tool"] == "append"
    assert not effect.happened
    [req] = await runner.pending()
    assert (req.id, req.call_id, req.tool, req.args) == (result["confirmation_id"], "c1",
                                                         "append", {"text": "a"})
    assert req.hint


async def test_resume_with_approval_runs_the_call_once(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    result = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))

    assert result == {"written": "a"}
    assert effect.lines == ["a"]
    assert await runner.pending() == []


async def test_resume_with_denial_returns_the_reason_and_never_runs(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    result = await runner.resume(parked["confirmation_id"], Decision.deny("wrong branch"))

    assert result["status"] == "denied" and result["reason"] == "wrong branch"
    assert not effect.happened


@pytest.mark.parametrize(
    "answer",
    [{"confirmed": True}, {"response": '{"confirmed": true}'}, '{"confirmed": true}'
     , {"outcome": "approve"}, True],
    ids=["adk-dict", "adk-response-wrapper", "json-text", "decision-dict", "bool"],
)
async def test_resume_accepts_adk_and_decision_shapes(effect: SideEffect, answer: Any) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    assert await runner.resume(parked["confirmation_id"], answer) == {"written": "a"}


@pytest.mark.parametrize(
    "answer",
    [{"confirm": True}, {"outcome": "maybe"}, {"outcome": "approve", "confirmed": True}],
    ids=["typo", "bad-outcome", "mixed-shapes"],
)
async def test_resume_with_a_malformed_answer_is_a_clear_error_and_nothing_runs(
    effect: SideEffect, answer: dict[str, Any]
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    with pytest.raises(ConfigurationError):
        await runner.resume(parked["confirmation_id"], answer)

    assert not effect.happened
    assert [r.id for r in await runner.pending()] == [parked["confirmation_id"]]


# -- identity of calls ------------------------------------------------------------------------


async def test_unknown_tool_name_is_an_unknown_tool_error() -> None:
    runner = ToolRunner([FunctionTool(lambda_free)])

    with pytest.raises(UnknownToolError, match=r"'nope'.*lambda_free"):
        await runner.call("nope", {})


def lambda_free() -> None: ...


async def test_unknown_confirmation_id_is_an_unknown_confirmation_error() -> None:
    runner = ToolRunner([FunctionTool(lambda_free)])

    with pytest.raises(UnknownConfirmationError, match="cf_missing"):
        await runner.resume("cf_missing", True)


async def test_reusing_a_call_id_with_other_arguments_is_a_duplicate_call_error(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect, require_confirmation=False)])
    await runner.call("append", {"text": "a"}, call_id="c1")

    with pytest.raises(DuplicateCallError, match="c1"):
        await runner.call("append", {"text": "b"}, call_id="c1")
    assert effect.lines == ["a"]


async def test_reusing_a_call_id_with_the_same_arguments_replays_the_recorded_result(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoApprove())
    first = await runner.call("append", {"text": "a"}, call_id="c1")

    again = await runner.call("append", {"text": "a"}, call_id="c1")

    assert first == {"written": "a"}
    assert again == {"written": "a", "replayed": True}
    assert effect.lines == ["a"]


async def test_replaying_a_denied_call_replays_the_denial(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoDeny("no"))
    await runner.call("append", {"text": "a"}, call_id="c1")

    again = await runner.call("append", {"text": "a"}, call_id="c1")

    assert again["status"] == "denied" and again["replayed"] is True
    assert not effect.happened


async def test_replaying_a_parked_call_returns_the_same_pending_request(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    first = await runner.call("append", {"text": "a"}, call_id="c1")

    again = await runner.call("append", {"text": "a"}, call_id="c1")

    assert again["confirmation_id"] == first["confirmation_id"]
    assert len(await runner.pending()) == 1


async def test_invalid_arguments_are_refused_before_any_human_is_asked(
    effect: SideEffect,
) -> None:
    answer = Recorder(True)
    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(answer))

    result = await runner.call("append", {"txt": "a"})

    assert result["status"] == "error" and "'txt'" in result["error"]
    assert answer.requests == []


async def test_arguments_that_are_not_json_values_are_refused(effect: SideEffect) -> None:
    runner = ToolRunner([FunctionTool(lambda_any)], provider=AutoApprove())

    result = await runner.call("lambda_any", {"x": {1, 2}})

    assert result["status"] == "error" and "JSON values" in result["error"]


def lambda_any(x: Any) -> None: ...


async def test_a_tool_that_raises_reports_the_error_and_records_failed(
    effect: SideEffect,
) -> None:
    def boom() -> None:
        raise OSError("disk full")

    runner = ToolRunner([FunctionTool(boom)])

    result = await runner.call("boom", {}, call_id="c1")

    assert result["status"] == "error" and "OSError: disk full" in result["error"]
    assert runner.store.get_call("c1").state == "failed"


def test_call_sync_and_resume_sync_work_without_an_event_loop(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])

    parked = runner.call_sync("append", {"text": "a"})
    result = runner.resume_sync(parked["confirmation_id"], True)

    assert result == {"written": "a"}


# -- what runs is what was approved (hot-path shortcuts keep it so) --------------------------------


async def test_a_provider_that_changes_the_request_it_was_shown_cannot_change_what_runs(
    effect: SideEffect,
) -> None:
    def sneaky(request: ConfirmationRequest) -> bool:
        request.args["text"] = "rm -rf /"  # the request shown is a copy: changes stay there
        return True

    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(sneaky))

    assert await runner.call("append", {"text": "ls"}, call_id="c1") == {"written": "ls"}
    assert effect.lines == ["ls"]
    assert request_of(runner, "c1").args == {"text": "ls"}


async def test_a_provider_that_changes_nested_arguments_it_was_shown_cannot_change_what_runs(
    effect: SideEffect,
) -> None:
    def keep(data: Any) -> dict[str, Any]:
        effect.append(json.dumps(data))
        return {"kept": data}

    def sneaky(request: ConfirmationRequest) -> bool:
        request.args["data"]["path"] = "/etc"  # nested: still only the copy shown
        return True

    runner = ToolRunner([FunctionTool(keep, require_confirmation=True)],
                        provider=CallbackConfirmationProvider(sneaky))

    assert await runner.call("keep", {"data": {"path": "/tmp"}}) == {"kept": {"path": "/tmp"}}
    assert effect.lines == ['{"path": "/tmp"}']


async def test_a_caller_changing_its_arguments_while_a_human_decides_cannot_change_what_runs(
    effect: SideEffect,
) -> None:
    args = {"text": "ls"}

    def human(request: ConfirmationRequest) -> bool:
        args["text"] = "rm -rf /"  # the caller's dict, changed while the call waits
        return True

    runner = ToolRunner([append_tool(effect)], provider=CallbackConfirmationProvider(human))

    assert await runner.call("append", args, call_id="c1") == {"written": "ls"}
    assert effect.lines == ["ls"]


async def test_auto_approve_with_its_own_confirm_is_asked_like_any_provider(
    effect: SideEffect,
) -> None:
    asked: list[ConfirmationRequest] = []

    class Recording(AutoApprove):
        async def confirm(self, request: ConfirmationRequest) -> Decision:
            asked.append(request)
            return Decision.deny("seen and refused")

    patched = AutoApprove()

    async def refuse(request: ConfirmationRequest) -> Decision:
        asked.append(request)
        return Decision.deny("patched")

    patched.confirm = refuse  # type: ignore[method-assign]

    for provider in (Recording(), patched):
        runner = ToolRunner([append_tool(effect)], provider=provider)
        result = await runner.call("append", {"text": "a"})
        assert result["status"] == "denied"
    assert [r.args for r in asked] == [{"text": "a"}, {"text": "a"}]
    assert not effect.happened


async def test_auto_approve_records_the_same_decision_and_confirmation_as_before(
    effect: SideEffect,
) -> None:
    seen: list[ToolContext] = []

    async def look(tool_context: ToolContext) -> dict[str, Any]:
        seen.append(tool_context)
        return {}

    runner = ToolRunner([FunctionTool(look, require_confirmation=True)], provider=AutoApprove())
    await runner.call("look", {}, call_id="c1")
    await runner.call("look", {}, call_id="c2")

    decision = runner.store.request_decision(request_of(runner, "c1").id)
    assert decision is not None
    assert decision["decision"] == Decision.approve(
        decided_by="auto-approve", channel="auto-approve").model_dump(mode="json")
    assert (decision["decided_by"], decision["channel"]) == ("auto-approve", "auto-approve")
    confirmation = seen[0].tool_confirmation
    assert confirmation is not None and confirmation.confirmed and confirmation.payload is None
    assert confirmation.model_fields_set == {"confirmed", "hint", "payload"}
    assert [s for s, _, _ in runner.store.journal("c2")] == [
        "new", "awaiting", "approved", "started", "done"]


# -- configuration ------------------------------------------------------------------------------


def test_runner_refuses_a_plain_function_and_says_how_to_wrap_it() -> None:
    with pytest.raises(ConfigurationError, match="FunctionTool"):
        ToolRunner([lambda_free])  # type: ignore[list-item]


def test_runner_refuses_two_tools_with_one_name() -> None:
    with pytest.raises(ConfigurationError, match="two tools"):
        ToolRunner([FunctionTool(lambda_free), FunctionTool(lambda_free)])


def test_runner_refuses_an_object_that_is_not_a_provider() -> None:
    with pytest.raises(ConfigurationError, match="not a ConfirmationProvider"):
        ToolRunner([], provider=object())  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_oversized_arguments_are_refused_without_running() -> None:
    from sandbox import AutoApprove, FunctionTool, ToolRunner

    ran: list[int] = []

    def store_blob(blob: str) -> dict[str, int]:
        ran.append(len(blob))
        return {"stored": len(blob)}

    runner = ToolRunner(tools=[FunctionTool(store_blob)], provider=AutoApprove(),
                        max_args_bytes=1000)
    result = await runner.call("store_blob", {"blob": "x" * 5000})
    assert result["status"] == "error" and "max_args_bytes" in result["error"]
    assert ran == [] and await runner.pending() == []
    assert (await runner.call("store_blob", {"blob": "x" * 10}))["stored"] == 10


@pytest.mark.anyio
async def test_an_oversized_call_id_is_a_clear_error() -> None:
    from sandbox import AutoApprove, ConfigurationError, FunctionTool, ToolRunner

    def noop() -> dict[str, bool]:
        return {"ok": True}

    runner = ToolRunner(tools=[FunctionTool(noop)], provider=AutoApprove())
    with pytest.raises(ConfigurationError, match="call_id"):
        await runner.call("noop", {}, call_id="c" * 10_000)


@pytest.mark.parametrize("file", [False, True])
async def test_auto_approve_is_parked_and_decided_in_one_step_with_every_record_and_event(
        effect: SideEffect, tmp_path: Any, file: bool) -> None:
    # AutoApprove's answer is known before the request is parked: the call is opened,
    # parked and decided in one store step. A remembered rule still answers first, and
    # the journal, the decision and the audit trail read as for parking then deciding.
    from sandbox import ApprovalStore

    audit = tmp_path / "audit.jsonl"
    runner = ToolRunner([append_tool(effect)], provider=AutoApprove(), session_id="s1",
                        store=ApprovalStore(tmp_path / "a.db") if file else None,
                        audit_path=str(audit))
    assert await runner.call("append", {"text": "a"}, call_id="c1") == {"written": "a"}
    rule = runner.rules.add(tool="append", kind="args", scope="session", ttl=60,
                            args={"text": "b"}, session_id="s1")
    assert await runner.call("append", {"text": "b"}, call_id="c2") == {"written": "b"}
    assert effect.lines == ["a", "b"]
    by_provider = runner.store.request_decision(request_of(runner, "c1").id)
    by_rule = runner.store.request_decision(request_of(runner, "c2").id)
    assert by_provider is not None and by_rule is not None
    assert (by_provider["decided_by"], by_provider["channel"]) == ("auto-approve",
                                                                  "auto-approve")
    assert (by_rule["decided_by"], by_rule["channel"]) == (rule.id, "rule")
    assert runner.rules.get(rule.id).uses == 1
    for call_id in ("c1", "c2"):
        assert [s for s, _, _ in runner.store.journal(call_id)] == [
            "new", "awaiting", "approved", "started", "done"]
    events = [(e["event"], e["call_id"]) for e in map(json.loads, audit.read_text().splitlines())]
    assert events == [(event, call_id) for call_id in ("c1", "c2") for event in (
        "tool.requested", "tool.decided", "tool.started", "tool.finished")]
    # The call ids are answered from their records, never run again.
    assert (await runner.call("append", {"text": "a"}, call_id="c1"))["replayed"] is True
    assert effect.lines == ["a", "b"]
