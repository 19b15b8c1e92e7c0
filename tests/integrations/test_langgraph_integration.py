"""The LangGraph / langchain adapter inside real graphs: ``create_agent`` with
`SandboxApprovalMiddleware`, and a ``ToolNode`` with our tools, driven by langchain's own
offline chat model (`GenericFakeChatModel`, taught ``bind_tools``).

Every test that can compares with langchain's own `HumanInTheLoopMiddleware` on the same
script: the interrupt value, the decisions and the messages the model reads are the
same; what differs is what the gate adds (single use, binding, other channels).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from sandbox import AutoDeny, BashToolPolicy, ExecuteBashTool, ToolRunner
from sandbox.integrations.langgraph import (
    SandboxApprovalMiddleware,
    to_langchain_tool,
    tool_node_wrapper,
)

pytestmark = [pytest.mark.timeout(60)]


class ScriptedChatModel(GenericFakeChatModel):
    """langchain's fake chat model, answering turn by turn from a list, with tools."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def calls(*triples: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage(content="", tool_calls=[
        {"name": name, "args": args, "id": cid, "type": "tool_call"}
        for name, args, cid in triples])


def script(*turns: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter([*turns, AIMessage(content="done"),
                                            AIMessage(content="done again")]))


class Effects:
    def __init__(self) -> None:
        self.ran: list[str] = []
        fx = self

        @tool
        def wipe(scope: str) -> str:
            """Wipe one scope."""
            fx.ran.append(scope)
            return f"wiped {scope}"

        @tool
        def look(path: str) -> str:
            """Look at a path."""
            return f"looked at {path}"

        self.wipe, self.look = wipe, look


CONFIG = {"configurable": {"thread_id": "t1"}}
USER = {"messages": [{"role": "user", "content": "go"}]}


def build(middleware: Any, fx: Effects, model: ScriptedChatModel,
          saver: InMemorySaver | None = None, extra: tuple[Any, ...] = ()) -> Any:
    return create_agent(model, tools=[fx.wipe, fx.look], middleware=[middleware, *extra],
                        checkpointer=saver or InMemorySaver())


def tool_messages(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def both(turn: AIMessage, decide: list[Any] | None,
         store: str | None = None) -> Iterator[tuple[str, Effects, dict[str, Any], Any]]:
    """The same script under langchain's middleware and under ours: (which, effects,
    the interrupt value, the result after resuming with ``decide``)."""
    for which in ("native", "sandbox"):
        fx = Effects()
        mw = (HumanInTheLoopMiddleware({"wipe": True}) if which == "native"
              else SandboxApprovalMiddleware({"wipe": True}, store=store))
        agent = build(mw, fx, script(turn))
        paused = agent.invoke(USER, CONFIG)
        value = paused["__interrupt__"][0].value
        result = None
        if decide is not None:
            result = agent.invoke(Command(resume={"decisions": decide}), CONFIG)
        yield which, fx, value, result


def test_pause_is_langchains_interrupt_and_nothing_runs() -> None:
    seen = {}
    for which, fx, value, _ in both(calls(("wipe", {"scope": "prod"}, "c1")), None):
        assert fx.ran == []
        seen[which] = value
    assert seen["sandbox"] == seen["native"]
    assert seen["sandbox"]["action_requests"][0]["description"] == (
        "Tool execution requires approval\n\nTool: wipe\nArgs: {'scope': 'prod'}")


def test_the_question_is_in_the_store_for_the_page_and_the_cli() -> None:
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True})
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    agent.invoke(USER, CONFIG)
    [pending] = mw.runner.store.pending()
    assert (pending.call_id, pending.tool, pending.args) == ("c1", "wipe", {"scope": "prod"})
    assert pending.session_id == "langgraph:t1"  # the thread is the gate's session
    assert pending.hint.startswith("Tool execution requires approval")


@pytest.mark.parametrize("decision", [
    {"type": "approve"},
    {"type": "reject", "message": "not on a Friday"},
    {"type": "reject"},
    {"type": "respond", "message": "it is wiped already"},
    {"type": "edit", "edited_action": {"name": "wipe", "args": {"scope": "staging"}}},
])
def test_each_decision_reads_as_in_langchain(decision: dict[str, Any]) -> None:
    got = {}
    for which, fx, _value, result in both(calls(("wipe", {"scope": "prod"}, "c1")),
                                          [decision]):
        message = tool_messages(result)["c1"]
        got[which] = (fx.ran, message.content, message.status)
    assert got["sandbox"] == got["native"]


def test_approval_runs_once_and_closes_the_request() -> None:
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True})
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    agent.invoke(USER, CONFIG)
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert fx.ran == ["prod"]
    assert tool_messages(result)["c1"].content == "wiped prod"
    assert mw.runner.store.pending() == []
    assert mw.runner.for_session("langgraph:t1").store.get_call("c1").state == "done"


def test_a_denial_is_recorded_at_once() -> None:
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True})
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    agent.invoke(USER, CONFIG)
    agent.invoke(Command(resume={"decisions": [{"type": "reject", "message": "no"}]}),
                 CONFIG)
    record = mw.runner.store.get_call("c1")
    assert record.state == "denied" and fx.ran == []


def test_resuming_the_paused_checkpoint_again_runs_nothing_twice() -> None:
    ran = {}
    for which in ("native", "sandbox"):
        fx = Effects()
        mw = (HumanInTheLoopMiddleware({"wipe": True}) if which == "native"
              else SandboxApprovalMiddleware({"wipe": True}))
        agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
        agent.invoke(USER, CONFIG)
        approve = Command(resume={"decisions": [{"type": "approve"}]})
        agent.invoke(approve, CONFIG)
        paused = next(s for s in agent.get_state_history(CONFIG) if s.interrupts)
        again = agent.invoke(approve, paused.config)
        ran[which] = fx.ran
        if which == "sandbox":
            assert tool_messages(again)["c1"].content == "wiped prod"  # the recorded one
    assert ran == {"native": ["prod", "prod"], "sandbox": ["prod"]}


def test_a_denied_call_replayed_from_its_checkpoint_stays_denied() -> None:
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True})
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    agent.invoke(USER, CONFIG)
    agent.invoke(Command(resume={"decisions": [{"type": "reject",
                                                 "message": "not during the freeze"}]}),
                 CONFIG)  # fmt: skip
    paused = next(s for s in agent.get_state_history(CONFIG) if s.interrupts)
    again = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}),
                         paused.config)
    assert fx.ran == []
    # The recorded denial, with the human's reason (a bare "no" is in any "not ...").
    assert tool_messages(again)["c1"].content == (
        "User rejected the tool call for `wipe` with reason: not during the freeze")


def test_arguments_edited_in_the_state_under_a_pending_interrupt_are_refused() -> None:
    ran = {}
    for which in ("native", "sandbox"):
        fx = Effects()
        mw = (HumanInTheLoopMiddleware({"wipe": True}) if which == "native"
              else SandboxApprovalMiddleware({"wipe": True}))
        agent = build(mw, fx, script(calls(("wipe", {"scope": "staging"}, "c1"))))
        agent.invoke(USER, CONFIG)
        # Someone with access to the checkpoint rewrites the call the human is looking at.
        snapshot = agent.get_state(CONFIG)
        last = snapshot.values["messages"][-1]
        forged = AIMessage(content="", id=last.id, tool_calls=[
            {"name": "wipe", "args": {"scope": "prod"}, "id": "c1", "type": "tool_call"}])
        agent.update_state(CONFIG, {"messages": [forged]})
        result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
        ran[which] = fx.ran
        if which == "sandbox":
            message = tool_messages(result)["c1"]
            assert message.status == "error" and "other arguments" in str(message.content)
    assert ran == {"native": ["prod"], "sandbox": []}


def test_parallel_calls_in_one_turn_one_interrupt_each_decided() -> None:
    turn = calls(("wipe", {"scope": "a"}, "ca"), ("look", {"path": "/"}, "cl"),
                 ("wipe", {"scope": "b"}, "cb"))
    got = {}
    for which, fx, value, result in both(turn, [{"type": "approve"},
                                                {"type": "reject", "message": "keep b"}]):
        messages = tool_messages(result)
        got[which] = (value, sorted(fx.ran), {k: (m.content, m.status)
                                              for k, m in messages.items()})
    assert got["sandbox"] == got["native"]
    assert got["sandbox"][1] == ["a"]


def test_answer_from_another_process_over_sqlite_then_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "approvals.db")
    saver = InMemorySaver()  # the graph's checkpoints survive; the gate restarts
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True}, store=store)
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))), saver)
    agent.invoke(USER, CONFIG)
    [pending] = mw.runner.store.pending()
    cli = subprocess.run(
        [sys.executable, "-m", "sandbox", "approvals", "deny", pending.id, "--reason",
         "use staging", "--store", store], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    # A new process: new middleware, new gate, the same store and checkpoints.
    fx2 = Effects()
    mw2 = SandboxApprovalMiddleware({"wipe": True}, store=store)
    agent2 = build(mw2, fx2, script(AIMessage(content="ok")), saver)
    decisions = mw2.store_decisions(agent2.get_state(CONFIG))
    assert decisions == {"decisions": [{"type": "reject", "message": "use staging"}]}
    result = agent2.invoke(Command(resume=decisions), CONFIG)
    assert fx.ran == fx2.ran == []
    assert tool_messages(result)["c1"].content == (
        "User rejected the tool call for `wipe` with reason: use staging")


def test_approval_on_the_cli_runs_once(tmp_path: Path) -> None:
    store = str(tmp_path / "approvals.db")
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True}, store=store)
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    agent.invoke(USER, CONFIG)
    assert mw.store_decisions(agent.get_state(CONFIG)) is None  # nobody answered yet
    [pending] = mw.runner.store.pending()
    cli = subprocess.run(
        [sys.executable, "-m", "sandbox", "approvals", "edit", pending.id, "--args",
         '{"scope": "staging"}', "--store", store],
        capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    decisions = mw.store_decisions(agent.get_state(CONFIG))
    assert decisions == {"decisions": [{"type": "edit", "edited_action": {
        "name": "wipe", "args": {"scope": "staging"}}}]}
    agent.invoke(Command(resume=decisions), CONFIG)
    assert fx.ran == ["staging"]


def test_a_rejecting_guard_inside_the_gate_still_stops_the_call() -> None:
    class Guard(AgentMiddleware):  # type: ignore[type-arg]
        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            if request.tool_call["args"].get("scope") == "prod":
                return ToolMessage(content="prod is off limits", status="error",
                                   tool_call_id=request.tool_call["id"],
                                   name=request.tool_call["name"])
            return handler(request)

    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True})
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))), extra=(Guard(),))
    agent.invoke(USER, CONFIG)
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert fx.ran == []
    assert tool_messages(result)["c1"].content == "prod is off limits"


def test_a_provider_answers_without_interrupting() -> None:
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True}, provider=AutoDeny("ask the DBA"))
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    result = agent.invoke(USER, CONFIG)
    assert "__interrupt__" not in result
    assert fx.ran == []
    assert tool_messages(result)["c1"].content == (
        "User rejected the tool call for `wipe` with reason: ask the DBA")


def test_the_async_graph_behaves_the_same() -> None:
    import asyncio

    async def go() -> tuple[list[str], str]:
        fx = Effects()
        mw = SandboxApprovalMiddleware({"wipe": True})
        agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
        await agent.ainvoke(USER, CONFIG)
        approve = Command(resume={"decisions": [{"type": "approve"}]})
        result = await agent.ainvoke(approve, CONFIG)
        paused = next(s for s in agent.get_state_history(CONFIG) if s.interrupts)
        await agent.ainvoke(approve, paused.config)
        return fx.ran, str(tool_messages(result)["c1"].content)

    assert asyncio.run(go()) == (["prod"], "wiped prod")


# -- our tools in LangGraph: ExecuteBashTool as the shell --------------------------------


def _made(workspace: Path) -> list[str]:
    """What commands made in the workspace: not the empty placeholders that hold absent
    protected names (.envrc, .vscode, ...) while a run or a reserved run needs them
    (docs/protected-paths.md)."""
    return sorted(p.name for p in workspace.iterdir()
                  if not (p.is_dir() and p.stat().st_mode & 0o1000 and not any(p.iterdir())))


@pytest.fixture
def bash(tmp_path: Path) -> ExecuteBashTool:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    policy = BashToolPolicy(allowed_command_prefixes=("echo", "touch"),
                            blocked_operators=(";", "&&", "|"),
                            no_confirmation_prefixes=("echo",), timeout_seconds=20)
    return ExecuteBashTool(workspace=workspace, policy=policy)


def test_execute_bash_tool_in_create_agent(bash: ExecuteBashTool) -> None:
    runner = ToolRunner([bash])
    model = script(calls(("execute_bash", {"command": "echo hi"}, "b1"),
                         ("execute_bash", {"command": "echo x; touch evil"}, "b2"),
                         ("execute_bash", {"command": "touch made"}, "b3")))
    agent = create_agent(model, tools=[to_langchain_tool(bash, runner=runner)],
                         checkpointer=InMemorySaver())
    paused = agent.invoke(USER, CONFIG)
    [interrupt] = paused["__interrupt__"]
    assert interrupt.value["action_requests"][0]["args"] == {"command": "touch made"}
    assert not (bash.workspace / "made").exists()
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    messages = tool_messages(result)
    assert "'stdout': 'hi\\n'" in str(messages["b1"].content) or '"stdout": "hi\\n"' in str(
        messages["b1"].content)
    assert "blocked" in str(messages["b2"].content).lower()
    assert not (bash.workspace / "evil").exists()
    assert (bash.workspace / "made").exists()
    # The tool node ran again on resume: "echo hi" ran once (journal), not twice.
    assert runner.store.get_call("b1").state == "done"


def test_tool_node_wrapper_routes_calls_through_the_gate(bash: ExecuteBashTool) -> None:
    runner = ToolRunner([bash])
    wrapper = tool_node_wrapper(runner)
    node = ToolNode([to_langchain_tool(bash, runner=runner)], wrap_tool_call=wrapper,
                    awrap_tool_call=wrapper.awrap)
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=InMemorySaver())
    start = {"messages": [calls(("execute_bash", {"command": "touch once"}, "w1"))]}
    paused = app.invoke(start, CONFIG)
    assert paused["__interrupt__"][0].value["review_configs"] == [
        {"action_name": "execute_bash", "allowed_decisions": ["approve", "edit", "reject"]}]
    result = app.invoke(Command(resume={"decisions": [
        {"type": "reject", "message": "no files"}]}), CONFIG)
    assert not (bash.workspace / "once").exists()
    assert tool_messages(result)["w1"].content == (
        "User rejected the tool call for `execute_bash` with reason: no files")


def test_an_expired_request_is_never_approved() -> None:
    import time

    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True}, approval_ttl=0.2)
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    agent.invoke(USER, CONFIG)
    time.sleep(0.4)
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert fx.ran == []
    message = tool_messages(result)["c1"]
    assert message.status == "error" and "timed out" in str(message.content).lower()


def test_execute_bash_tool_in_an_async_graph_over_sqlite(bash: ExecuteBashTool,
                                                         tmp_path: Path) -> None:
    import asyncio

    store = str(tmp_path / "approvals.db")

    async def go() -> tuple[bool, str]:
        runner = ToolRunner([bash], store_path=store)
        model = script(calls(("execute_bash", {"command": "touch made"}, "b1")))
        agent = create_agent(model, tools=[to_langchain_tool(bash, runner=runner)],
                             checkpointer=InMemorySaver())
        paused = await agent.ainvoke(USER, CONFIG)
        assert paused["__interrupt__"]
        [pending] = ToolRunner([bash], store_path=store).store.pending()
        assert pending.session_id == "langgraph:t1"
        edit = {"type": "edit", "edited_action": {"name": "execute_bash",
                                                  "args": {"command": "touch edited"}}}
        result = await agent.ainvoke(Command(resume={"decisions": [edit]}), CONFIG)
        return (bash.workspace / "made").exists(), str(tool_messages(result)["b1"].content)

    made, content = asyncio.run(go())
    assert not made and (bash.workspace / "edited").exists()
    assert "'returncode': 0" in content or '"returncode": 0' in content


def test_an_edit_to_a_blocked_command_stays_blocked(bash: ExecuteBashTool) -> None:
    runner = ToolRunner([bash])
    model = script(calls(("execute_bash", {"command": "touch a"}, "b1")))
    agent = create_agent(model, tools=[to_langchain_tool(bash, runner=runner)],
                         checkpointer=InMemorySaver())
    agent.invoke(USER, CONFIG)
    edit = {"type": "edit", "edited_action": {"name": "execute_bash",
                                              "args": {"command": "touch b; touch c"}}}
    result = agent.invoke(Command(resume={"decisions": [edit]}), CONFIG)
    assert not any((bash.workspace / n).exists() for n in "abc")
    assert "blocked" in str(tool_messages(result)["b1"].content).lower()


def test_a_tool_that_interrupts_itself_is_ended_with_a_clear_message() -> None:
    from langgraph.types import interrupt

    asked: list[Any] = []

    @tool
    def ask(q: str) -> str:
        """Ask the user."""
        answer = interrupt({"q": q})
        asked.append(answer)
        return f"answer {answer}"

    model = script(calls(("ask", {"q": "colour?"}, "c1")))
    agent = create_agent(model, tools=[ask], middleware=[SandboxApprovalMiddleware(
        {"ask": True})], checkpointer=InMemorySaver())
    agent.invoke(USER, CONFIG)
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert "__interrupt__" not in result and asked == []
    message = tool_messages(result)["c1"]
    assert message.status == "error" and "cannot pause itself" in str(message.content)


def test_a_provider_that_leaves_the_request_pending_pauses_the_graph(tmp_path: Path) -> None:
    from sandbox.approval.channels.queue import QueueConfirmationProvider

    store = str(tmp_path / "approvals.db")
    fx = Effects()
    provider = QueueConfirmationProvider(store, timeout=0.2, on_timeout="pending")
    mw = SandboxApprovalMiddleware({"wipe": True}, provider=provider, store=store)
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c1"))))
    paused = agent.invoke(USER, CONFIG)
    # The provider waited, nobody answered: langchain's interrupt for that one call.
    [interrupt] = paused["__interrupt__"]
    assert interrupt.value["action_requests"][0]["args"] == {"scope": "prod"}
    assert fx.ran == []
    result = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), CONFIG)
    assert fx.ran == ["prod"]
    assert tool_messages(result)["c1"].content == "wiped prod"
    # And a rejection the same way reads as langchain's.
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True}, provider=provider, store=store)
    agent = build(mw, fx, script(calls(("wipe", {"scope": "prod"}, "c2"))))
    agent.invoke(USER, {"configurable": {"thread_id": "t2"}})
    result = agent.invoke(Command(resume={"decisions": [
        {"type": "reject", "message": "later"}]}), {"configurable": {"thread_id": "t2"}})
    assert fx.ran == []
    assert tool_messages(result)["c2"].content == (
        "User rejected the tool call for `wipe` with reason: later")


def test_answers_are_audited_with_their_channel(tmp_path: Path) -> None:
    import json

    from sandbox.audit import AuditLog

    audit = tmp_path / "audit.jsonl"
    fx = Effects()
    mw = SandboxApprovalMiddleware({"wipe": True}, audit=AuditLog(str(audit)))
    agent = build(mw, fx, script(calls(("wipe", {"scope": "a"}, "ca"),
                                       ("wipe", {"scope": "b"}, "cb"))))
    agent.invoke(USER, CONFIG)
    agent.invoke(Command(resume={"decisions": [
        {"type": "approve"}, {"type": "reject", "message": "not b"}]}), CONFIG)
    decided = {e["call_id"]: e for e in map(json.loads, audit.read_text().splitlines())
               if e["event"] == "tool.decided"}
    assert {k: (e["channel"], e.get("reason")) for k, e in decided.items()} == {
        "ca": ("langgraph", None), "cb": ("langgraph", "not b")}
    assert fx.ran == ["a"]


def test_parallel_calls_of_our_tool_each_interrupt_and_are_answered_by_id(
        bash: ExecuteBashTool) -> None:
    runner = ToolRunner([bash])
    model = script(calls(("execute_bash", {"command": "touch a"}, "b1"),
                         ("execute_bash", {"command": "touch b"}, "b2")))
    agent = create_agent(model, tools=[to_langchain_tool(bash, runner=runner)],
                         checkpointer=InMemorySaver())
    paused = agent.invoke(USER, CONFIG)
    interrupts = paused["__interrupt__"]
    assert len(interrupts) == 2 and len(runner.store.pending()) == 2

    def answer(value: dict[str, Any]) -> dict[str, Any]:
        command = value["action_requests"][0]["args"]["command"]
        return {"decisions": [{"type": "approve"} if command == "touch a"
                              else {"type": "reject", "message": "no b"}]}

    result = agent.invoke(Command(resume={i.id: answer(i.value) for i in interrupts}), CONFIG)
    assert _made(bash.workspace) == ["a"]
    assert tool_messages(result)["b2"].content == (
        "User rejected the tool call for `execute_bash` with reason: no b")


def test_our_tools_answered_on_the_cli_resume_with_store_resume(bash: ExecuteBashTool,
                                                                tmp_path: Path) -> None:
    from sandbox.integrations.langgraph import store_resume

    store = str(tmp_path / "approvals.db")
    runner = ToolRunner([bash], store_path=store)
    model = script(calls(("execute_bash", {"command": "touch a"}, "b1"),
                         ("execute_bash", {"command": "touch b"}, "b2")))
    agent = create_agent(model, tools=[to_langchain_tool(bash, runner=runner)],
                         checkpointer=InMemorySaver())
    agent.invoke(USER, CONFIG)
    assert store_resume(runner, agent.get_state(CONFIG)) is None  # nobody answered yet
    by_call = {r.call_id: r.id for r in ToolRunner([bash], store_path=store).store.pending()}
    for call_id, verb, extra in (("b1", "approve", []), ("b2", "deny", ["--reason", "no b"])):
        cli = subprocess.run(
            [sys.executable, "-m", "sandbox", "approvals", verb, by_call[call_id], *extra,
             "--store", store], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
    value = store_resume(runner, agent.get_state(CONFIG))
    assert value is not None and len(value) == 2
    result = agent.invoke(Command(resume=value), CONFIG)
    assert _made(bash.workspace) == ["a"]
    assert tool_messages(result)["b2"].content == (
        "User rejected the tool call for `execute_bash` with reason: no b")
