"""The OpenAI Agents SDK adapter inside a real ``agents.Runner``, driven by the SDK's own
offline model (`agents.testing.ScriptedModel`).

Side effects are appended to a list (or, for bash, files in the workspace) and counted
after each run: "runs nothing twice" and "runs nothing" are measured, not assumed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    Runner,
    RunState,
    ToolGuardrailFunctionOutput,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents._tool_invocation import tool_invocation_identity
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseFunctionShellToolCall

from sandbox import (
    AutoApprove,
    AutoDeny,
    BashToolPolicy,
    ExecuteBashTool,
    FunctionTool,
    ToolRunner,
)
from sandbox.errors import ConfirmationStateError, ConfirmationTimedOutError
from sandbox.integrations.openai_agents import (
    RunStateBridge,
    shell_tool,
    to_openai_tool,
    to_openai_tools,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

set_tracing_disabled(True)


class Effects:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    def wipe(self, scope: str) -> dict[str, Any]:
        """Wipe one scope."""
        self.ran.append({"scope": scope})
        return {"wiped": scope}


def make(store: str | None = None, provider: Any = None, session_id: str | None = None,
         approval_ttl: float | None = None) -> tuple[Effects, ToolRunner]:
    fx = Effects()
    tool = FunctionTool(fx.wipe, require_confirmation=lambda scope: scope != "dry-run")
    runner = ToolRunner([tool], provider=provider, store_path=store, session_id=session_id,
                        approval_ttl=approval_ttl)
    return fx, runner


def agent_for(runner: ToolRunner, *steps: Any, **tool_kwargs: Any) -> tuple[Agent[Any],
                                                                           ScriptedModel]:
    model = ScriptedModel(list(steps))
    tools = ([to_openai_tool(t, runner=runner, **tool_kwargs) for t in runner.tools.values()]
             if tool_kwargs else to_openai_tools(runner))
    return Agent(name="ops", model=model, tools=tools), model


def wipe_call(scope: str, call_id: str = "call_1") -> Any:
    return [function_call("wipe", {"scope": scope}, call_id=call_id)]


def outputs(model: ScriptedModel) -> dict[str, str]:
    """The tool outputs (by call id) in the last input the model received."""
    last = model.last_call
    assert last is not None
    found: dict[str, str] = {}
    for item in last.input if isinstance(last.input, list) else []:
        if isinstance(item, dict) and item.get("type") in ("function_call_output",
                                                           "shell_call_output"):
            found[item["call_id"]] = item["output"]
    return found


def recompute_fingerprints(saved: str, calls: dict[str, tuple[dict[str, Any], dict[str, Any]]],
                           old_id: str | None = None) -> str:
    """What an attacker who edits a saved state does: the SDK binds a call's approval to
    an unkeyed SHA-256 of the call, so recompute it for the edited call."""
    for call_id, (old_args, new_args) in calls.items():
        old = tool_invocation_identity(function_call("wipe", old_args,
                                                     call_id=old_id or call_id))
        new = tool_invocation_identity(function_call("wipe", new_args, call_id=call_id))
        assert old is not None and new is not None
        saved = saved.replace(old[2], new[2])
    return saved


async def test_pause_then_approve_in_process_runs_once() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("done")])
    result = await Runner.run(agent, "wipe prod")
    # Paused: the SDK's own interruption, the gate's request in the store, nothing ran.
    assert [i.name for i in result.interruptions] == ["wipe"]
    assert fx.ran == []
    [pending] = await runner.pending()
    assert (pending.call_id, pending.args) == ("call_1", {"scope": "prod"})
    state = result.to_state()
    await RunStateBridge(runner).approve(state, result.interruptions[0])
    assert fx.ran == []  # approving records the answer; the tool runs when the run resumes
    resumed = await Runner.run(agent, state)
    assert resumed.final_output == "done"
    assert fx.ran == [{"scope": "prod"}]
    # The model reads the tool's own output, as the SDK gives a function tool's: no
    # {"result": ...} wrapping, no gate fields.
    assert outputs(model) == {"call_1": str({"wiped": "prod"})}
    assert await runner.pending() == []


async def test_no_question_runs_without_interruption() -> None:
    fx, runner = make()
    agent, _model = agent_for(runner, wipe_call("dry-run"), [assistant_message("ok")])
    result = await Runner.run(agent, "dry run")
    assert result.interruptions == [] and result.final_output == "ok"
    assert fx.ran == [{"scope": "dry-run"}]


async def test_deny_with_reason_reaches_the_model_and_closes_the_request() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("understood")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    await RunStateBridge(runner).reject(state, result.interruptions[0], "not on a Friday")
    # Recorded at once (audited, no longer pending), not left to expire.
    assert await runner.pending() == []
    record = runner.store.get_call("call_1")
    assert record.state == "denied"
    resumed = await Runner.run(agent, state)
    assert resumed.final_output == "understood"
    assert fx.ran == []
    # Exactly the SDK's behaviour for reject(rejection_message=...): that text.
    assert outputs(model) == {"call_1": "not on a Friday"}
    # The call id never runs afterwards, whatever arrives for it.
    verdict = await runner.would_ask("wipe", {"scope": "prod"}, "call_1")
    assert verdict.action == "replay"


async def test_reject_without_message_uses_the_sdk_text() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    await RunStateBridge(runner).reject(state, result.interruptions[0])
    await Runner.run(agent, state)
    assert outputs(model) == {"call_1": "Tool execution was not approved."}
    assert fx.ran == []


async def test_edit_runs_the_edited_call_once_without_a_second_question() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    await RunStateBridge(runner).approve(state, result.interruptions[0],
                                         args={"scope": "staging"})
    resumed = await Runner.run(agent, state)
    assert resumed.interruptions == []
    assert fx.ran == [{"scope": "staging"}]
    assert outputs(model) == {"call_1": str({"wiped": "staging"})}


async def test_edit_with_invalid_arguments_runs_nothing() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    await RunStateBridge(runner).approve(state, result.interruptions[0],
                                         args={"scope": 42})
    await Runner.run(agent, state)
    assert fx.ran == []
    assert "invalid" in outputs(model)["call_1"]


async def test_replaying_a_saved_state_runs_nothing_twice() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("first")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    bridge = RunStateBridge(runner)
    await bridge.approve(state, result.interruptions[0])
    saved = state.to_string()  # the approved state, saved before it resumes
    await Runner.run(agent, state)
    assert fx.ran == [{"scope": "prod"}]
    # The same saved state resumed again (a second worker, a retry, an attacker).
    model.extend([[assistant_message("second")]])
    copy = await RunState.from_string(agent, saved)
    again = await Runner.run(agent, copy)
    assert again.final_output == "second"
    assert fx.ran == [{"scope": "prod"}]  # once
    assert outputs(model) == {"call_1": str({"wiped": "prod"})}  # the recorded output


async def test_tampered_arguments_in_a_saved_state_are_refused() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("dry-run-prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe")
    saved = result.to_state().to_string()
    # The saved state is edited: other arguments under the same call id, then approved
    # in the RunState (the SDK's digest is unkeyed: the editor recomputes it).
    tampered = recompute_fingerprints(saved.replace("dry-run-prod", "everything"), {
        "call_1": ({"scope": "dry-run-prod"}, {"scope": "everything"})})
    assert tampered != saved
    state = await RunState.from_string(agent, tampered)
    [item] = state.get_interruptions()
    assert json.loads(item.arguments or "{}") == {"scope": "everything"}
    with pytest.raises(ConfirmationStateError, match="other arguments"):
        await RunStateBridge(runner).approve(state, item)
    state.approve(item)  # natively, without the bridge
    await Runner.run(agent, state)
    assert fx.ran == []
    assert "other arguments" in outputs(model)["call_1"]


async def test_an_approval_only_in_the_run_state_runs_nothing() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    state.approve(result.interruptions[0])  # planted: the gate never heard of it
    await Runner.run(agent, state)
    assert fx.ran == []
    assert "Waiting for a human" in outputs(model)["call_1"]
    [pending] = await runner.pending()  # still waiting for a real answer
    assert pending.call_id == "call_1"


async def test_an_approval_planted_for_a_call_never_asked_runs_nothing() -> None:
    fx, runner = make()
    agent, model = agent_for(runner, wipe_call("prod", "call_1"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    # The saved state now names a call id the gate never asked about, approved.
    planted = recompute_fingerprints(
        result.to_state().to_string().replace("call_1", "call_planted"),
        {"call_planted": ({"scope": "prod"}, {"scope": "prod"})}, old_id="call_1")
    state = await RunState.from_string(agent, planted)
    [item] = state.get_interruptions()
    assert item.call_id == "call_planted"
    state.approve(item)
    await Runner.run(agent, state)
    assert fx.ran == []
    assert "Waiting for a human" in outputs(model)["call_planted"]


async def test_a_rejecting_tool_input_guardrail_still_stops_the_call() -> None:
    fx, runner = make()

    @tool_input_guardrail
    def no_prod(data: Any) -> ToolGuardrailFunctionOutput:
        args = json.loads(data.context.tool_arguments or "{}")
        if args.get("scope") == "prod":
            return ToolGuardrailFunctionOutput.reject_content("prod is off limits")
        return ToolGuardrailFunctionOutput.allow()

    [tool] = runner.tools.values()
    sdk_tool = to_openai_tool(tool, runner=runner)
    sdk_tool.tool_input_guardrails = [no_prod]
    model = ScriptedModel([wipe_call("prod"), [assistant_message("ok")]])
    agent = Agent(name="ops", model=model, tools=[sdk_tool])
    result = await Runner.run(agent, "wipe prod")
    assert fx.ran == []  # needs_approval asked the gate; it ran nothing
    state = result.to_state()
    await RunStateBridge(runner).approve(state, result.interruptions[0])
    await Runner.run(agent, state)
    assert fx.ran == []  # the human approved, the guardrail rejected: nothing ran
    assert outputs(model) == {"call_1": "prod is off limits"}


async def test_parallel_calls_in_one_turn_are_answered_each_on_its_own() -> None:
    fx, runner = make()
    turn = [function_call("wipe", {"scope": "a"}, call_id="call_a"),
            function_call("wipe", {"scope": "b"}, call_id="call_b"),
            function_call("wipe", {"scope": "dry-run"}, call_id="call_c")]
    agent, model = agent_for(runner, turn, [assistant_message("ok")])
    result = await Runner.run(agent, "wipe a and b")
    assert sorted(i.call_id or "" for i in result.interruptions) == ["call_a", "call_b"]
    assert len(await runner.pending()) == 2
    state = result.to_state()
    bridge = RunStateBridge(runner)
    by_id = {i.call_id: i for i in state.get_interruptions()}
    await bridge.approve(state, by_id["call_a"])
    await bridge.reject(state, by_id["call_b"], "keep b")
    await Runner.run(agent, state)
    assert sorted(r["scope"] for r in fx.ran) == ["a", "dry-run"]
    seen = outputs(model)
    assert seen["call_b"] == "keep b"
    assert seen["call_a"] == str({"wiped": "a"})


async def test_answer_from_another_process_over_sqlite_then_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "approvals.db")
    fx, runner = make(store=store, session_id="ops")
    agent, _ = agent_for(runner, wipe_call("prod"))
    result = await Runner.run(agent, "wipe prod")
    saved = result.to_state().to_string()
    [pending] = await runner.pending()
    # Another process (the CLI a human uses) answers it.
    cli = subprocess.run(
        [sys.executable, "-m", "sandbox", "approvals", "deny", pending.id, "--reason",
         "use staging", "--store", store],
        capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    # This process restarts: a new runner, a new agent, the saved state.
    fx2, runner2 = make(store=store, session_id="ops")
    agent2, model2 = agent_for(runner2, [assistant_message("ok")])
    state = await RunState.from_string(agent2, saved)
    assert await RunStateBridge(runner2).apply_store_answers(state) == {"call_1": "rejected"}
    await Runner.run(agent2, state)
    assert fx.ran == fx2.ran == []
    assert outputs(model2) == {"call_1": "use staging"}
    assert await runner2.pending() == []


async def test_approval_on_another_channel_runs_once_after_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "approvals.db")
    _fx, runner = make(store=store)
    agent, _ = agent_for(runner, wipe_call("prod"))
    result = await Runner.run(agent, "wipe prod")
    saved = result.to_state().to_string()
    [pending] = await runner.pending()
    cli = subprocess.run(
        [sys.executable, "-m", "sandbox", "approvals", "approve", pending.id, "--store",
         store], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    fx2, runner2 = make(store=store)
    agent2, _model2 = agent_for(runner2, [assistant_message("ok")], [assistant_message("x")])
    state = await RunState.from_string(agent2, saved)
    bridge = RunStateBridge(runner2)
    assert await bridge.apply_store_answers(state) == {"call_1": "approved"}
    await Runner.run(agent2, state)
    assert fx2.ran == [{"scope": "prod"}]
    # And the same saved state applied and resumed once more: recorded, not run.
    copy = await RunState.from_string(agent2, saved)
    assert await bridge.apply_store_answers(copy) == {"call_1": "approved"}
    await Runner.run(agent2, copy)
    assert fx2.ran == [{"scope": "prod"}]


async def test_unanswered_requests_stay_pending_in_apply_store_answers() -> None:
    _fx, runner = make()
    agent, _ = agent_for(runner, wipe_call("prod"))
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    assert await RunStateBridge(runner).apply_store_answers(state) == {"call_1": "pending"}


async def test_a_runner_with_a_provider_answers_without_interrupting() -> None:
    fx, runner = make(provider=AutoDeny("the on-call engineer said no"))
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    assert result.interruptions == []
    assert fx.ran == []
    assert outputs(model) == {"call_1": "the on-call engineer said no"}
    fx, runner = make(provider=AutoApprove())
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    await Runner.run(agent, "wipe prod")
    assert fx.ran == [{"scope": "prod"}]


async def test_a_call_id_reused_in_a_later_run_runs_nothing_again() -> None:
    # Within one run the SDK refuses a reused call id itself; across runs (a new history,
    # another worker) only the gate's journal knows it.
    fx, runner = make()
    agent, _ = agent_for(runner, wipe_call("dry-run", "same"), [assistant_message("ok")])
    await Runner.run(agent, "once")
    agent, model = agent_for(runner, wipe_call("dry-run", "same"), [assistant_message("ok")])
    await Runner.run(agent, "again, same arguments")
    assert outputs(model) == {"same": str({"wiped": "dry-run"})}  # the recorded output
    agent, model = agent_for(runner, wipe_call("dry-run-2", "same"), [assistant_message("ok")])
    await Runner.run(agent, "again, other arguments")
    assert "other arguments" in outputs(model)["same"]
    assert fx.ran == [{"scope": "dry-run"}]


async def test_session_of_maps_the_run_context_to_a_gate_session() -> None:
    fx, runner = make()
    [tool] = runner.tools.values()

    def session_of(context: Any) -> str | None:
        return context.get("conversation") if isinstance(context, dict) else None

    sdk_tool = to_openai_tool(tool, runner=runner, session_of=session_of)
    model = ScriptedModel([wipe_call("prod"), [assistant_message("ok")]])
    agent = Agent(name="ops", model=model, tools=[sdk_tool])
    result = await Runner.run(agent, "wipe", context={"conversation": "c-42"})
    # A runner lists only its own session's requests: the base runner has none, the
    # conversation's runner has the one the run asked.
    assert await runner.pending() == []
    [pending] = await runner.for_session("openai-agents:c-42").pending()
    assert pending.session_id == "openai-agents:c-42"
    state = result.to_state()
    await RunStateBridge(runner, session_of=session_of).approve(state,
                                                                result.interruptions[0])
    await Runner.run(agent, state)
    assert fx.ran == [{"scope": "prod"}]


# -- ExecuteBashTool as the SDK's ShellTool ----------------------------------------------


def shell_call(call_id: str, *commands: str) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall(
        id=call_id, call_id=call_id, type="shell_call", status="completed",
        action={"commands": list(commands)})


@pytest.fixture
def bash(tmp_path: Path) -> ExecuteBashTool:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    policy = BashToolPolicy(allowed_command_prefixes=("echo", "ls", "touch"),
                            blocked_operators=(";", "&&", "|"),
                            no_confirmation_prefixes=("echo", "ls"), timeout_seconds=20)
    return ExecuteBashTool(workspace=workspace, policy=policy)


async def test_shell_tool_runs_under_the_policy_and_asks_before_touching(
        bash: ExecuteBashTool) -> None:
    runner = ToolRunner([bash])
    model = ScriptedModel([
        [shell_call("sh_1", "echo hello", "touch made.txt")],
        [assistant_message("ok")]])
    agent = Agent(name="ops", model=model, tools=[shell_tool(bash, runner=runner)])
    result = await Runner.run(agent, "make a file")
    # One item for the shell call; the gate asked about the command that needs it.
    [item] = result.interruptions
    assert item.call_id == "sh_1"
    assert [(r.call_id, r.args) for r in await runner.pending()] == [
        ("sh_1#1", {"command": "touch made.txt"})]
    assert not (bash.workspace / "made.txt").exists()
    state = result.to_state()
    await RunStateBridge(runner).approve(state, item)
    await Runner.run(agent, state)
    assert (bash.workspace / "made.txt").exists()
    shell_output = next(i for i in model.last_call.input  # type: ignore[union-attr]
                        if isinstance(i, dict) and i.get("type") == "shell_call_output")
    first = shell_output["output"][0]
    assert first["stdout"].strip() == "hello"
    assert first["outcome"] == {"type": "exit", "exit_code": 0}


async def test_shell_tool_blocked_and_denied_commands_never_run(
        bash: ExecuteBashTool) -> None:
    runner = ToolRunner([bash])
    model = ScriptedModel([
        [shell_call("sh_1", "echo a; touch evil.txt")],
        [shell_call("sh_2", "touch denied.txt")],
        [assistant_message("ok")]])
    agent = Agent(name="ops", model=model, tools=[shell_tool(bash, runner=runner)])
    result = await Runner.run(agent, "go")
    # The blocked command is refused by the policy without asking anyone.
    assert not (bash.workspace / "evil.txt").exists()
    [item] = result.interruptions
    assert item.call_id == "sh_2"
    state = result.to_state()
    await RunStateBridge(runner).reject(state, item, "no new files")
    await Runner.run(agent, state)
    assert not (bash.workspace / "denied.txt").exists()
    blocked = next(i for i in model.calls[1].input  # type: ignore[union-attr]
                   if isinstance(i, dict) and i.get("type") == "shell_call_output")
    assert "blocked" in blocked["output"][0]["stderr"].lower()
    assert blocked["output"][0]["outcome"] == {"type": "exit", "exit_code": 1}
    # The SDK's own shape for a rejected shell call: the reason on stderr, exit code 1.
    assert outputs(model)["sh_2"] == [
        {"stdout": "", "stderr": "no new files", "outcome": {"type": "exit", "exit_code": 1}}]


async def test_an_expired_request_is_never_approved() -> None:
    import anyio

    fx, runner = make(approval_ttl=0.2)
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    await anyio.sleep(0.4)
    with pytest.raises(ConfirmationTimedOutError):
        await RunStateBridge(runner).approve(state, result.interruptions[0])
    # Even approved in the RunState alone, the timed-out call never runs.
    state.approve(result.interruptions[0])
    await Runner.run(agent, state)
    assert fx.ran == []
    assert "timed out" in outputs(model)["call_1"].lower()


async def test_a_gate_error_fails_closed_and_the_run_goes_on(tmp_path: Path) -> None:
    # needs_approval cannot reach the store: the run stops for a human, nothing runs.
    fx, runner = make(store=str(tmp_path / "a.db"))
    agent, _ = agent_for(runner, wipe_call("dry-run"))
    runner.store.close()
    result = await Runner.run(agent, "dry run")
    assert [i.call_id for i in result.interruptions] == ["call_1"] and fx.ran == []
    # on_invoke_tool cannot reach it: the model reads the SDK's own failure message.
    fx, runner = make(store=str(tmp_path / "b.db"), provider=AutoApprove())
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    runner.store.close()
    result = await Runner.run(agent, "wipe prod")
    assert result.final_output == "ok" and fx.ran == []
    assert outputs(model)["call_1"].startswith("An error occurred while running the tool")


async def test_a_provider_leaving_the_request_pending_tells_the_model(tmp_path: Path) -> None:
    from sandbox.approval.channels.queue import QueueConfirmationProvider

    store = str(tmp_path / "approvals.db")
    provider = QueueConfirmationProvider(store, timeout=0.2, on_timeout="pending")
    fx, runner = make(store=store, provider=provider)
    agent, model = agent_for(runner, wipe_call("prod"), [assistant_message("ok")])
    result = await Runner.run(agent, "wipe prod")
    assert result.interruptions == [] and fx.ran == []
    assert "stays pending" in outputs(model)["call_1"]
    [pending] = await runner.pending()
    # Answered later (here: in this process), applied by the runner: runs once.
    runner.store.submit_answer(pending.id, True)
    assert list((await runner.apply_answers()).values()) == [{"wiped": "prod"}]
    assert fx.ran == [{"scope": "prod"}]


async def test_two_copies_of_an_approved_state_resumed_at_once_run_once(
        tmp_path: Path) -> None:
    import anyio

    fx, runner = make(store=str(tmp_path / "approvals.db"))
    agent, _model = agent_for(runner, wipe_call("prod"), [assistant_message("a")],
                             [assistant_message("b")])
    result = await Runner.run(agent, "wipe prod")
    state = result.to_state()
    await RunStateBridge(runner).approve(state, result.interruptions[0])
    saved = state.to_string()
    copies = [await RunState.from_string(agent, saved) for _ in range(2)]
    finals: list[Any] = []

    async def resume(copy: Any) -> None:
        finals.append(await Runner.run(agent, copy))

    async with anyio.create_task_group() as tg:
        for copy in copies:
            tg.start_soon(resume, copy)
    assert fx.ran == [{"scope": "prod"}]
    assert len(finals) == 2


async def test_a_rejecting_guardrail_stops_the_call_with_a_provider_too() -> None:
    fx, runner = make(provider=AutoApprove())
    asked: list[str] = []

    @tool_input_guardrail
    def nothing_passes(data: Any) -> ToolGuardrailFunctionOutput:
        asked.append(data.context.tool_call_id)
        return ToolGuardrailFunctionOutput.reject_content("blocked by the guardrail")

    [tool] = runner.tools.values()
    sdk_tool = to_openai_tool(tool, runner=runner)
    sdk_tool.tool_input_guardrails = [nothing_passes]
    model = ScriptedModel([wipe_call("prod"), [assistant_message("ok")]])
    await Runner.run(Agent(name="ops", model=model, tools=[sdk_tool]), "wipe prod")
    assert asked == ["call_1"] and fx.ran == []
    assert outputs(model) == {"call_1": "blocked by the guardrail"}
    # The provider was never asked: the guardrail came first, nothing was recorded.
    assert (await runner.would_ask("wipe", {"scope": "prod"}, "call_1")).action == "ask"


async def test_answers_are_audited_with_their_channel_and_who(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    fx = Effects()
    runner = ToolRunner([FunctionTool(fx.wipe, require_confirmation=True)],
                        audit_path=str(audit))
    agent, _ = agent_for(runner, [function_call("wipe", {"scope": "a"}, call_id="ca"),
                                  function_call("wipe", {"scope": "b"}, call_id="cb")],
                         [assistant_message("ok")])
    result = await Runner.run(agent, "go")
    state = result.to_state()
    items = {i.call_id: i for i in result.interruptions}
    bridge = RunStateBridge(runner)
    await bridge.approve(state, items["ca"], decided_by="alice")
    await bridge.reject(state, items["cb"], "not b", decided_by="bob")
    await Runner.run(agent, state)
    decided = {e["call_id"]: e for e in map(json.loads, audit.read_text().splitlines())
               if e["event"] == "tool.decided"}
    assert {k: (e["channel"], e["decided_by"], e.get("reason")) for k, e in decided.items()} \
        == {"ca": ("openai-agents", "alice", None), "cb": ("openai-agents", "bob", "not b")}


async def test_a_shell_call_mixing_blocked_and_asked_commands(bash: ExecuteBashTool,
                                                             tmp_path: Path) -> None:
    store = str(tmp_path / "approvals.db")
    runner = ToolRunner([bash], store_path=store)
    model = ScriptedModel([
        [shell_call("sh_1", "echo hi", "echo x; touch evil", "touch made")],
        [assistant_message("ok")], [assistant_message("ok again")]])
    agent = Agent(name="ops", model=model, tools=[shell_tool(bash, runner=runner)])
    result = await Runner.run(agent, "go")
    [item] = result.interruptions
    # Only the command that needs a human is asked about; the blocked one never is.
    assert [r.call_id for r in await runner.pending()] == ["sh_1#2"]
    saved = result.to_state().to_string()
    state = result.to_state()
    await RunStateBridge(runner).approve(state, item)
    await Runner.run(agent, state)
    assert (bash.workspace / "made").exists() and not (bash.workspace / "evil").exists()
    [out] = [i for i in model.calls[1].input  # type: ignore[union-attr]
             if isinstance(i, dict) and i.get("type") == "shell_call_output"]
    codes = [o["outcome"]["exit_code"] for o in out["output"]]
    assert codes == [0, 1, 0] and "blocked" in out["output"][1]["stderr"].lower()
    # The same answered state taken from the store again: approved, nothing runs twice.
    (bash.workspace / "made").unlink()
    copy = await RunState.from_string(agent, saved)
    assert await RunStateBridge(runner).apply_store_answers(copy) == {"sh_1": "approved"}
    await Runner.run(agent, copy)
    assert not (bash.workspace / "made").exists()
