"""`SandboxApprovalMiddleware` against langchain's own `HumanInTheLoopMiddleware`.

The cases are langchain's own HITL middleware tests (langchain_v1
``tests/unit_tests/agents/middleware/implementations/test_human_in_the_loop.py``), run
in a real ``create_agent`` graph with a checkpointer instead of a patched ``interrupt``,
each once under langchain's middleware and once under ours: the interrupt value, the
error raised for a bad answer, the messages the model reads and the tools that ran
must be the same. Where the gate deliberately differs, the test says so and checks the
difference.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from sandbox.integrations.langgraph import SandboxApprovalMiddleware

pytestmark = [pytest.mark.timeout(60)]


class ScriptedChatModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


def run(which: str, interrupt_on: dict[str, Any], tool_calls: list[dict[str, Any]],
        decisions: Any, **kwargs: Any) -> dict[str, Any]:
    """One scripted turn under langchain's middleware or ours: what happened."""
    ran: list[tuple[str, dict[str, Any]]] = []

    def make(name: str) -> Any:
        def body(**args: Any) -> str:
            ran.append((name, args))
            return f"{name} ran with {args}"
        return tool(name, description=f"The {name} tool.", args_schema={
            "type": "object", "properties": {}, "additionalProperties": True})(body)

    names = sorted({c["name"] for c in tool_calls} | set(interrupt_on))
    middleware = (HumanInTheLoopMiddleware(interrupt_on, **kwargs) if which == "native"
                  else SandboxApprovalMiddleware(interrupt_on, **kwargs))
    model = ScriptedChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{**c, "type": "tool_call"} for c in tool_calls]),
        AIMessage(content="done")]))
    agent = create_agent(model, tools=[make(n) for n in names], middleware=[middleware],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": f"{which}-1"}}
    first = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config)
    seen: dict[str, Any] = {"interrupt": [i.value for i in first.get("__interrupt__", [])]}
    result = first
    if seen["interrupt"]:
        try:
            result = agent.invoke(Command(resume=decisions), config)
        except ValueError as exc:
            seen["error"] = str(exc)
    seen["ran"] = sorted(ran, key=repr)  # parallel calls run in threads, in any order
    seen["messages"] = [
        (m.tool_call_id, m.name, m.content, m.status)
        for m in result["messages"] if isinstance(m, ToolMessage)]
    return seen


def same(interrupt_on: dict[str, Any], tool_calls: list[dict[str, Any]], decisions: Any,
         **kwargs: Any) -> dict[str, Any]:
    native = run("native", interrupt_on, tool_calls, decisions, **kwargs)
    ours = run("sandbox", interrupt_on, tool_calls, decisions, **kwargs)
    assert ours == native
    return ours


AER = {"allowed_decisions": ["approve", "edit", "reject"]}
CALL = [{"name": "test_tool", "args": {"input": "test"}, "id": "1"}]


def test_no_interrupt_for_a_tool_not_named() -> None:
    seen = same({"test_tool": AER}, [{"name": "other_tool", "args": {"input": "x"},
                                      "id": "1"}], None)
    assert seen["interrupt"] == [] and seen["ran"] == [("other_tool", {"input": "x"})]


def test_single_tool_accept() -> None:
    seen = same({"test_tool": AER}, CALL, {"decisions": [{"type": "approve"}]})
    assert seen["ran"] == [("test_tool", {"input": "test"})]


def test_single_tool_edit() -> None:
    seen = same({"test_tool": AER}, CALL, {"decisions": [{"type": "edit", "edited_action": {
        "name": "test_tool", "args": {"input": "edited"}}}]})
    assert seen["ran"] == [("test_tool", {"input": "edited"})]


def test_single_tool_reject_with_message() -> None:
    seen = same({"test_tool": AER}, CALL, {"decisions": [
        {"type": "reject", "message": "Custom response message"}]})
    assert seen["ran"] == []


def test_single_tool_respond() -> None:
    seen = same({"ask_user": {"allowed_decisions": ["respond"]}},
                [{"name": "ask_user", "args": {"question": "favorite color?"}, "id": "1"}],
                {"decisions": [{"type": "respond", "message": "blue"}]})
    assert seen["messages"] == [("1", "ask_user", "blue", "success")]


def test_respond_not_allowed_is_refused_with_langchains_error() -> None:
    seen = same({"test_tool": AER}, CALL,
                {"decisions": [{"type": "respond", "message": "synthetic"}]})
    assert "Decision type 'respond' is not allowed for tool 'test_tool'" in seen["error"]
    assert seen["ran"] == []


def test_mixed_with_respond() -> None:
    same({"get_forecast": {"allowed_decisions": ["approve"]},
          "ask_user": {"allowed_decisions": ["respond"]}},
         [{"name": "get_forecast", "args": {"location": "SF"}, "id": "1"},
          {"name": "ask_user", "args": {"question": "favorite color?"}, "id": "2"}],
         {"decisions": [{"type": "approve"}, {"type": "respond", "message": "blue"}]})


def test_true_allows_respond() -> None:
    same({"ask_user": True}, [{"name": "ask_user", "args": {"q": "?"}, "id": "1"}],
         {"decisions": [{"type": "respond", "message": "answer"}]})


def test_multiple_tools_mixed_responses() -> None:
    seen = same({"get_forecast": AER, "get_temperature": AER},
                [{"name": "get_forecast", "args": {"location": "San Francisco"}, "id": "1"},
                 {"name": "get_temperature", "args": {"location": "San Francisco"},
                  "id": "2"}],
                {"decisions": [{"type": "approve"},
                               {"type": "reject", "message": "User rejected this tool call"}]})
    assert [name for name, _ in seen["ran"]] == ["get_forecast"]


def test_multiple_tools_edit_responses() -> None:
    seen = same({"get_forecast": AER, "get_temperature": AER},
                [{"name": "get_forecast", "args": {"location": "San Francisco"}, "id": "1"},
                 {"name": "get_temperature", "args": {"location": "San Francisco"},
                  "id": "2"}],
                {"decisions": [
                    {"type": "edit", "edited_action": {"name": "get_forecast",
                                                       "args": {"location": "New York"}}},
                    {"type": "edit", "edited_action": {"name": "get_temperature",
                                                       "args": {"location": "New York"}}}]})
    assert sorted(seen["ran"]) == [("get_forecast", {"location": "New York"}),
                                   ("get_temperature", {"location": "New York"})]


def test_decision_count_mismatch_is_langchains_error() -> None:
    seen = same({"test_tool": AER}, CALL,
                {"decisions": [{"type": "approve"}, {"type": "approve"}]})
    assert seen["error"] == ("Number of human decisions (2) does not match number of "
                             "hanging tool calls (1).")


def test_unknown_decision_type_is_refused() -> None:
    seen = same({"test_tool": AER}, CALL, {"decisions": [{"type": "maybe"}]})
    assert "Unexpected human decision" in seen["error"] and seen["ran"] == []


def test_custom_description_prefix_and_description() -> None:
    same({"test_tool": AER}, CALL, {"decisions": [{"type": "approve"}]},
         description_prefix="Custom prefix")
    seen = same({"test_tool": {**AER, "description": "Please look at this"}}, CALL,
                {"decisions": [{"type": "approve"}]})
    assert seen["interrupt"][0]["action_requests"][0]["description"] == "Please look at this"


def test_description_callable() -> None:
    def describe(tool_call: Any, state: Any, runtime: Any) -> str:
        return f"Review {tool_call['name']} with {tool_call['args']}"

    seen = same({"test_tool": {**AER, "description": describe}}, CALL,
                {"decisions": [{"type": "approve"}]})
    assert seen["interrupt"][0]["action_requests"][0]["description"] == (
        "Review test_tool with {'input': 'test'}")


def test_when_predicate_skips_review() -> None:
    config = {**AER, "when": lambda request: request.tool_call["args"].get("input") == "x"}
    seen = same({"test_tool": config}, CALL, None)
    assert seen["interrupt"] == [] and seen["ran"] == [("test_tool", {"input": "test"})]
    seen = same({"test_tool": config}, [{"name": "test_tool", "args": {"input": "x"},
                                         "id": "1"}], {"decisions": [{"type": "approve"}]})
    assert seen["ran"] == [("test_tool", {"input": "x"})]


def test_edit_notice_none() -> None:
    same({"test_tool": AER}, CALL, {"decisions": [{"type": "edit", "edited_action": {
        "name": "test_tool", "args": {"input": "edited"}}}]}, edit_notice=None)


def test_interrupt_on_without_decisions_is_langchains_error() -> None:
    for cls in (HumanInTheLoopMiddleware, SandboxApprovalMiddleware):
        with pytest.raises(ValueError, match="allowed_decisions"):
            cls({"test_tool": {"description": "x"}})  # type: ignore[typeddict-item]


# -- deliberate differences --------------------------------------------------------------


def test_an_edit_naming_another_tool_is_refused() -> None:
    """langchain runs the other tool; behind the gate an edit changes only arguments."""
    edit = {"decisions": [{"type": "edit", "edited_action": {
        "name": "other_tool", "args": {"input": "x"}}}]}
    native = run("native", {"test_tool": AER}, [*CALL, {"name": "other_tool", "args": {
        "input": "y"}, "id": "2"}], edit)
    ours = run("sandbox", {"test_tool": AER}, [*CALL, {"name": "other_tool", "args": {
        "input": "y"}, "id": "2"}], edit)
    assert ("other_tool", {"input": "x"}) in native["ran"]
    assert "never the tool" in ours["error"]
    assert ("other_tool", {"input": "x"}) not in ours["ran"]
