"""Pydantic AI behind the gate (sandbox.integrations.pydantic_ai), with Pydantic AI's own
offline model (`FunctionModel`, scripted turn by turn) and its own deferred flow
(``ApprovalRequired`` → ``DeferredToolRequests`` → ``DeferredToolResults``).

The ``native_*`` tests measure what Pydantic AI guarantees on its own
(`ApprovalRequiredToolset`, ``requires_approval=True``): they are the "natively" column of
the README's table, and each is paired with the test showing the adapter's answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import ApprovalRequiredToolset, FunctionToolset

from sandbox import (
    AutoApprove,
    BashToolPolicy,
    CallbackConfirmationProvider,
    Decision,
    ExecuteBashTool,
    FunctionTool,
    ToolRunner,
)
from sandbox.approval import ApprovalStore
from sandbox.audit import AuditLog
from sandbox.integrations.pydantic_ai import SandboxApprovalToolset, toolset
from tests.conftest import SideEffect
from tests.paths import TESTS

pytestmark = [pytest.mark.timeout(60)]

PROGRAM = TESTS / "programs" / "pydantic_ai_agent.py"


def scripted(*calls: ToolCallPart) -> FunctionModel:
    """A model that makes ``calls`` in its first turn and, once it has the tool returns,
    answers with them as JSON: ``[[content, outcome], ...]``."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(json.dumps(
                [[p.content, p.outcome] for p in returns], default=str))])
        return ModelResponse(parts=list(calls))

    return FunctionModel(respond)


def deletes(effect: SideEffect, *, requires_approval: bool = True) -> FunctionToolset[Any]:
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain(requires_approval=requires_approval)
    def delete(path: str) -> str:
        """Delete a directory."""
        effect.append(path)
        return f"deleted {path}"

    return tools


def call(path: str, call_id: str) -> ToolCallPart:
    return ToolCallPart("delete", {"path": path}, tool_call_id=call_id)


def agent_for(toolset_: Any, *calls: ToolCallPart) -> Agent[None, str | DeferredToolRequests]:
    return Agent(scripted(*calls), toolsets=[toolset_],
                 output_type=[str, DeferredToolRequests])  # type: ignore[arg-type]


def returns(output: Any) -> list[list[Any]]:
    assert isinstance(output, str), output
    parsed: list[list[Any]] = json.loads(output)
    return parsed


# -- pause, answer in process ------------------------------------------------------------


def test_a_call_nobody_answers_becomes_deferred_tool_requests(effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    result = agent_for(gated, call("build", "c1")).run_sync("clean")

    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    assert [p.tool_call_id for p in requests.approvals] == ["c1"]
    cid = requests.metadata["c1"]["confirmation_id"]
    [pending] = gated.gate.store.pending()
    assert pending.id == cid and pending.args == {"path": "build"}
    assert pending.session_id == f"pydantic-ai:{result.conversation_id}"
    assert not effect.happened


def test_approval_in_process_runs_once_and_returns_exactly_the_tools_value(
        effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated, call("build", "c1"))
    first = agent.run_sync("clean")

    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"c1": True}))

    assert returns(second.output) == [["deleted build", "success"]]  # not {"result": ...}
    assert effect.lines == ["build"]
    assert gated.gate.store.get_call("c1").state == "done"


def test_deny_with_a_reason_is_recorded_at_once_and_the_model_reads_it(
        effect: SideEffect, tmp_path: Path) -> None:
    audit = AuditLog(str(tmp_path / "audit.jsonl"))
    gated = SandboxApprovalToolset(deletes(effect), audit=audit)
    agent = agent_for(gated, call("build", "c1"))
    first = agent.run_sync("clean")

    second = agent.run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"c1": ToolDenied("use make")}))

    assert returns(second.output) == [["use make", "denied"]]
    req = gated.gate.store.get_request(first.output.metadata["c1"]["confirmation_id"])
    assert req.status == "denied"  # not left pending until it expires
    decided = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()
               if '"tool.decided"' in line]
    assert decided[-1]["reason"] == "use make" and decided[-1]["channel"] == "pydantic-ai"
    # The call id is spent: an approval for it later runs nothing.
    third = agent.run_sync(message_history=first.all_messages(),
                           deferred_tool_results=DeferredToolResults(approvals={"c1": True}))
    assert returns(third.output) == [["use make", "denied"]]
    assert not effect.happened


def test_an_edit_runs_the_edited_call_once_without_a_second_question(
        effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated, call("/", "c1"))
    first = agent.run_sync("clean")

    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"c1": ToolApproved(override_args={"path": "build"})})))

    assert returns(second.output) == [["deleted build", "success"]]
    assert effect.lines == ["build"]
    assert gated.gate.store.pending() == []
    assert gated.gate.store.get_request(
        first.output.metadata["c1"]["confirmation_id"]).status == "edited"


def test_an_edit_with_arguments_that_do_not_fit_runs_nothing(effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated, call("/", "c1"))
    first = agent.run_sync("clean")

    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"c1": ToolApproved(override_args={"path": ["x"]})})))

    # Pydantic AI validates override_args itself first: the model is asked to retry.
    [[content, outcome]] = returns(second.output)
    assert outcome == "retried" and "path" in str(content)
    assert not effect.happened
    # Pydantic AI ended the call: its request does not wait on the page any longer.
    assert gated.gate.store.pending() == []
    assert gated.gate.store.get_call("c1").state == "denied"


# -- replay, tamper, plant ---------------------------------------------------------------


def test_replaying_a_saved_history_with_its_approval_runs_nothing_twice(
        effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated, call("build", "c1"))
    first = agent.run_sync("clean")
    approve = DeferredToolResults(approvals={"c1": True})
    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=approve)

    again = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=approve)

    assert returns(again.output) == returns(second.output) == [["deleted build", "success"]]
    assert effect.lines == ["build"]


def native_agent(effect: SideEffect, *calls: ToolCallPart) -> Agent[None, Any]:
    """Pydantic AI's own approvals, no gate: ApprovalRequiredToolset."""
    return agent_for(ApprovalRequiredToolset(deletes(effect, requires_approval=False)), *calls)


def test_native_replaying_a_saved_history_runs_the_tool_again(effect: SideEffect) -> None:
    agent = native_agent(effect, call("build", "c1"))
    first = agent.run_sync("clean")
    approve = DeferredToolResults(approvals={"c1": True})
    agent.run_sync(message_history=first.all_messages(), deferred_tool_results=approve)
    agent.run_sync(message_history=first.all_messages(), deferred_tool_results=approve)
    assert effect.lines == ["build", "build"]  # natively: not single use


def tampered(messages: list[ModelMessage], path: str) -> list[ModelMessage]:
    """The saved history with the pending call's arguments edited (as in a stored file)."""
    *head, last = messages
    assert isinstance(last, ModelResponse)
    parts = [ToolCallPart(p.tool_name, {"path": path}, tool_call_id=p.tool_call_id)
             if isinstance(p, ToolCallPart) else p for p in last.parts]
    return [*head, ModelResponse(parts=parts)]


def test_arguments_edited_in_the_saved_history_are_refused(effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated, call("build", "c1"))
    first = agent.run_sync("clean")

    second = agent.run_sync(message_history=tampered(first.all_messages(), "/"),
                            deferred_tool_results=DeferredToolResults(approvals={"c1": True}))

    [[message, outcome]] = returns(second.output)
    assert outcome == "failed" and "differ from the ones it was asked about" in message
    assert not effect.happened
    # The call is over for Pydantic AI, so its question is closed: an approval of the
    # untampered history later runs nothing either (fail closed).
    assert gated.gate.store.pending() == []
    later = agent.run_sync(message_history=first.all_messages(),
                           deferred_tool_results=DeferredToolResults(approvals={"c1": True}))
    assert returns(later.output)[0][1] == "denied"
    assert not effect.happened


def test_native_arguments_edited_in_the_saved_history_run(effect: SideEffect) -> None:
    agent = native_agent(effect, call("build", "c1"))
    first = agent.run_sync("clean")
    agent.run_sync(message_history=tampered(first.all_messages(), "/"),
                   deferred_tool_results=DeferredToolResults(approvals={"c1": True}))
    assert effect.lines == ["/"]  # natively: the approval is not bound to the arguments


def planted_history(path: str, call_id: str) -> list[ModelMessage]:
    """A history whose last response holds a call that was never run nor asked about."""
    return [ModelRequest(parts=[UserPromptPart("clean")]),
            ModelResponse(parts=[call(path, call_id)])]


def test_an_approval_planted_for_a_call_never_asked_runs_nothing(effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated)

    result = agent.run_sync(message_history=planted_history("/", "c9"),
                            deferred_tool_results=DeferredToolResults(approvals={"c9": True}))

    # Asked about like a new call: a question for a human, nothing run.
    assert isinstance(result.output, DeferredToolRequests)
    assert [p.tool_call_id for p in result.output.approvals] == ["c9"]
    assert not effect.happened


def test_native_an_approval_planted_for_a_call_never_asked_runs(effect: SideEffect) -> None:
    native_agent(effect).run_sync(message_history=planted_history("/", "c9"),
                                  deferred_tool_results=DeferredToolResults(approvals={"c9": True}))
    assert effect.lines == ["/"]


# -- answered from another channel, another process, after a restart --------------------


def run_program(tmp_path: Path, mode: str) -> str:
    out = subprocess.run(
        [sys.executable, str(PROGRAM), str(tmp_path / "approvals.db"), str(tmp_path / "effect"),
         str(tmp_path / "history.json"), mode],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def cli(tmp_path: Path, *args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "sandbox", "approvals", *args, "--store",
                          str(tmp_path / "approvals.db")], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


def effect_lines(tmp_path: Path) -> list[str]:
    path = tmp_path / "effect"
    return path.read_text().splitlines() if path.exists() else []


def test_answered_on_the_cli_and_resumed_by_a_new_process(tmp_path: Path) -> None:
    cid = run_program(tmp_path, "ask")  # process 1 pauses and exits
    assert ApprovalStore(tmp_path / "approvals.db").get_request(cid).status == "pending"

    cli(tmp_path, "approve", cid)  # process 2: the human, from the CLI
    output = run_program(tmp_path, "resume-from-store")  # process 3: the restarted agent

    assert json.loads(output) == [["deleted build", "success"]]
    assert effect_lines(tmp_path) == ["build"]
    assert run_program(tmp_path, "resume-from-store") == output  # replayed, not run again
    assert effect_lines(tmp_path) == ["build"]


def test_denied_on_the_cli_with_a_reason_reaches_the_model(tmp_path: Path) -> None:
    cid = run_program(tmp_path, "ask")
    cli(tmp_path, "deny", cid, "--reason", "not on a Friday")

    output = run_program(tmp_path, "resume-from-store")

    assert json.loads(output) == [["not on a Friday", "denied"]]
    assert effect_lines(tmp_path) == []
    assert ApprovalStore(tmp_path / "approvals.db").get_request(cid).status == "denied"


def test_edited_on_the_cli_runs_the_edited_call(tmp_path: Path) -> None:
    cid = run_program(tmp_path, "ask")
    cli(tmp_path, "edit", cid, "--args", '{"path": "build/tmp"}')

    output = run_program(tmp_path, "resume-from-store")

    assert json.loads(output) == [["deleted build/tmp", "success"]]
    assert effect_lines(tmp_path) == ["build/tmp"]


def test_the_first_answer_wins_over_a_later_framework_approval(
        effect: SideEffect, tmp_path: Path) -> None:
    gated = SandboxApprovalToolset(deletes(effect), store=str(tmp_path / "approvals.db"))
    agent = agent_for(gated, call("build", "c1"))
    first = agent.run_sync("clean")
    cid = first.output.metadata["c1"]["confirmation_id"]
    cli(tmp_path, "deny", cid, "--reason", "the page said no")

    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"c1": True}))

    assert returns(second.output) == [["the page said no", "denied"]]
    assert not effect.happened


# -- providers, parallel calls, tools that ask themselves -------------------------------


def test_a_provider_answers_inside_the_run(effect: SideEffect) -> None:
    asked: list[Any] = []

    def decide(request: Any) -> Decision:
        asked.append(request.args["path"])
        return Decision.approve() if request.args["path"] == "build" else \
            Decision.deny("not the root")

    gated = SandboxApprovalToolset(deletes(effect),
                                   provider=CallbackConfirmationProvider(decide))
    result = agent_for(gated, call("build", "c1"), call("/", "c2")).run_sync("clean")

    assert returns(result.output) == [["deleted build", "success"], ["not the root", "denied"]]
    assert effect.lines == ["build"] and sorted(asked) == ["/", "build"]


def test_parallel_calls_in_one_turn_are_each_asked_and_answered_once(
        effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect))
    agent = agent_for(gated, call("a", "c1"), call("b", "c2"), call("c", "c3"))
    first = agent.run_sync("clean")
    assert {p.tool_call_id for p in first.output.approvals} == {"c1", "c2", "c3"}
    assert len(gated.gate.store.pending()) == 3

    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"c1": True, "c2": ToolDenied("keep b"),
                                       "c3": ToolApproved(override_args={"path": "c2"})})))

    assert returns(second.output) == [["deleted a", "success"], ["keep b", "denied"],
                                      ["deleted c2", "success"]]
    assert sorted(effect.lines) == ["a", "c2"]
    assert gated.gate.store.pending() == []


def test_require_confirmation_decides_per_call(effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(
        deletes(effect, requires_approval=False),
        require_confirmation=lambda ctx, tool_def, args: args["path"].startswith("/"))
    result = agent_for(gated, call("build", "c1"), call("/etc", "c2")).run_sync("clean")

    assert isinstance(result.output, DeferredToolRequests)
    assert [p.tool_call_id for p in result.output.approvals] == ["c2"]
    assert effect.lines == ["build"]


def test_a_tool_that_raises_approval_required_itself_is_gated(effect: SideEffect) -> None:
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool
    def transfer(ctx: RunContext[Any], amount: int) -> str:
        """Send money."""
        if amount > 100 and not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"limit": 100})
        effect.append(str(amount))
        return f"sent {amount}"

    gated = SandboxApprovalToolset(tools)
    agent = agent_for(gated, ToolCallPart("transfer", {"amount": 5}, tool_call_id="t1"),
                      ToolCallPart("transfer", {"amount": 500}, tool_call_id="t2"))
    first = agent.run_sync("pay")

    assert [p.tool_call_id for p in first.output.approvals] == ["t2"]
    assert first.output.metadata["t2"]["limit"] == 100
    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"t2": True}))
    assert returns(second.output) == [["sent 5", "success"], ["sent 500", "success"]]
    assert effect.lines == ["5", "500"]


def test_model_retry_from_the_tool_reaches_pydantic_ai(effect: SideEffect) -> None:
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain
    def lookup(name: str) -> str:
        """Look a name up."""
        effect.append(name)
        raise ModelRetry("try a shorter name")

    gated = SandboxApprovalToolset(tools, require_confirmation=True,
                                   provider=AutoApprove())
    result = agent_for(gated, ToolCallPart("lookup", {"name": "x"}, tool_call_id="l1")
                       ).run_sync("find")
    [[content, outcome]] = returns(result.output)
    assert outcome == "retried" and "try a shorter name" in str(content)


# -- this library's tools as a toolset: ExecuteBashTool as the shell ---------------------


def bash_runner(tmp_path: Path, **kw: Any) -> ToolRunner:
    (tmp_path / "work").mkdir(exist_ok=True)
    bash = ExecuteBashTool(workspace=tmp_path / "work", policy=BashToolPolicy(
        allowed_command_prefixes=("echo", "ls"), blocked_operators=(";", "|", "&&")))
    return ToolRunner([bash], **kw)


def sh(command: str, call_id: str) -> ToolCallPart:
    return ToolCallPart("execute_bash", {"command": command}, tool_call_id=call_id)


def test_execute_bash_tool_as_the_shell_pauses_then_runs_once(tmp_path: Path) -> None:
    runner = bash_runner(tmp_path)
    agent = agent_for(toolset(runner), sh("echo hello", "b1"))
    first = agent.run_sync("greet")
    assert isinstance(first.output, DeferredToolRequests)

    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"b1": True}))

    [[content, outcome]] = returns(second.output)
    assert outcome == "success"
    assert content["stdout"] == "hello\n" and content["returncode"] == 0


def test_a_blocked_command_is_refused_without_asking_and_an_edit_cannot_unblock(
        tmp_path: Path) -> None:
    runner = bash_runner(tmp_path)
    agent = agent_for(toolset(runner), sh("echo a | sh", "b1"), sh("echo ok", "b2"))
    first = agent.run_sync("go")
    # The blocked one never becomes a question; the other waits.
    assert [p.tool_call_id for p in first.output.approvals] == ["b2"]

    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"b2": ToolApproved(
            override_args={"command": "echo ok; id"})})))

    results = returns(second.output)
    assert results[0][1] == "failed" and "blocked" in results[0][0].lower()
    assert results[1][1] == "failed" and "blocked" in results[1][0].lower()
    assert runner.store.get_call("b2").state == "blocked"


def test_a_runner_provider_answers_bash_in_the_run(tmp_path: Path) -> None:
    runner = bash_runner(tmp_path, provider=CallbackConfirmationProvider(
        lambda req: Decision.edit({"command": "echo edited"})))
    result = agent_for(toolset(runner), sh("echo original", "b1")).run_sync("go")
    [[content, outcome]] = returns(result.output)
    assert outcome == "success" and content["stdout"] == "edited\n"


def test_function_tool_results_are_the_functions_own(effect: SideEffect) -> None:
    def shout(text: str) -> str:
        """Shout."""
        effect.append(text)
        return text.upper()

    runner = ToolRunner([FunctionTool(shout)])
    result = agent_for(toolset(runner), ToolCallPart("shout", {"text": "hi"}, tool_call_id="s1")
                       ).run_sync("go")
    assert returns(result.output) == [["HI", "success"]]


def test_toolset_checks_its_argument() -> None:
    with pytest.raises(ValueError, match="ToolRunner"):
        toolset([])  # type: ignore[arg-type]



def test_a_declared_tool_is_asked_about_whatever_the_predicate_says(effect: SideEffect) -> None:
    gated = SandboxApprovalToolset(deletes(effect),
                                   require_confirmation=lambda ctx, tool_def, args: False)
    result = agent_for(gated, call("build", "c1")).run_sync("clean")

    assert isinstance(result.output, DeferredToolRequests)
    assert not effect.happened


def test_arguments_the_model_sent_loosely_typed_are_approved_as_validated(
        effect: SideEffect) -> None:
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain(requires_approval=True)
    def repeat(times: int) -> str:
        """Repeat."""
        effect.append(str(times))
        return "ok" * times

    gated = SandboxApprovalToolset(tools)
    agent = agent_for(gated, ToolCallPart("repeat", {"times": "2"}, tool_call_id="r1"))
    first = agent.run_sync("go")
    assert gated.gate.store.pending()[0].args == {"times": 2}

    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"r1": True}))

    assert returns(second.output) == [["okok", "success"]]
    assert effect.lines == ["2"]
    assert gated.gate.store.get_request(
        first.output.metadata["r1"]["confirmation_id"]).status == "approved"


def test_test_model_calls_pause_behind_the_gate(effect: SideEffect) -> None:
    from pydantic_ai.models.test import TestModel

    gated = SandboxApprovalToolset(deletes(effect))
    agent: Agent[None, Any] = Agent(TestModel(), toolsets=[gated],
                                    output_type=[str, DeferredToolRequests])  # type: ignore[arg-type]

    result = agent.run_sync("clean")

    assert isinstance(result.output, DeferredToolRequests)
    [part] = result.output.approvals
    assert part.tool_name == "delete" and not effect.happened
    answered = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={part.tool_call_id: True})))
    assert isinstance(answered.output, str) and len(effect.lines) == 1


def test_an_approval_that_comes_after_the_request_expired_runs_nothing(
        effect: SideEffect) -> None:
    import time

    gated = SandboxApprovalToolset(deletes(effect), approval_ttl=0.05)
    agent = agent_for(gated, call("build", "c1"))
    first = agent.run_sync("clean")
    time.sleep(0.1)

    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"c1": True}))

    [[message, outcome]] = returns(second.output)
    assert outcome == "failed" and "timed out" in message.lower()
    assert not effect.happened


def test_approve_for_this_session_covers_this_conversation_only(effect: SideEffect) -> None:
    def two_turns(path: str, first_id: str, second_id: str) -> FunctionModel:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            turns = sum(isinstance(m, ModelResponse) for m in messages)
            if turns == 0:
                return ModelResponse(parts=[call(path, first_id)])
            if turns == 1 or not isinstance(messages[-1].parts[0], UserPromptPart):
                return ModelResponse(parts=[TextPart("ok")])
            return ModelResponse(parts=[call(path, second_id)])
        return FunctionModel(respond)

    gated = SandboxApprovalToolset(deletes(effect))
    agent = Agent(two_turns("build", "c1", "c2"), toolsets=[gated],
                  output_type=[str, DeferredToolRequests])  # type: ignore[arg-type]
    first = agent.run_sync("clean")
    cid = first.output.metadata["c1"]["confirmation_id"]
    # A human approves on the page "for this session" (recorded in the store).
    gated.gate.store.submit_answer(cid, Decision.approve(scope="session"), channel="web")
    results = anyio_run(gated.results_from_store, first.output)
    done = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
    assert done.output == "ok" and effect.lines == ["build"]

    # Same conversation, same call again: the session rule answers, nobody is asked.
    again = agent.run_sync("once more", message_history=done.all_messages())
    assert again.output == "ok" and effect.lines == ["build", "build"]
    # Another conversation: asked again.
    other = Agent(two_turns("build", "d1", "d2"), toolsets=[gated],
                  output_type=[str, DeferredToolRequests]).run_sync("clean")  # type: ignore[arg-type]
    assert isinstance(other.output, DeferredToolRequests)
    assert effect.lines == ["build", "build"]


def anyio_run(fn: Any, *args: Any) -> Any:
    import anyio

    return anyio.run(fn, *args)
