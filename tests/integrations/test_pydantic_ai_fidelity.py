"""Pydantic AI's own approval tests, ported to run behind `SandboxApprovalToolset`.

Each test names the test of pydantic-ai's ``tests/test_tools.py`` (commit 4fda38988) whose
scenario it replays: the same scripted `FunctionModel`, the same tools (moved from the
agent into a `FunctionToolset` that the gate wraps), the same answers, and the same
results and texts the model reads. Where the gate deliberately differs (README, "Pydantic
AI"), the assertion says so: the one difference met here is that ``DeferredToolRequests
.metadata`` carries the stored request's ``confirmation_id`` beside the tool's own
metadata.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import (
    Agent,
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RunContext,
    ToolApproved,
    ToolReturn,
    UnexpectedModelBehavior,
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
from pydantic_ai.toolsets import FunctionToolset

from sandbox import AutoApprove
from sandbox.integrations.pydantic_ai import SandboxApprovalToolset

pytestmark = [pytest.mark.timeout(60)]


def first_then_done(*calls: ToolCallPart) -> FunctionModel:
    """pydantic-ai's usual test model: the calls on the first turn, then 'Done!'."""

    def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=list(calls))
        return ModelResponse(parts=[TextPart("Done!")])

    return FunctionModel(llm)


def agent_over(tools: FunctionToolset[Any], model: FunctionModel, **kw: Any) -> Agent[Any, Any]:
    return Agent(model, toolsets=[SandboxApprovalToolset(tools, **kw)],
                 output_type=[str, DeferredToolRequests])  # type: ignore[arg-type]


def returns_of(messages: list[ModelMessage]) -> list[tuple[str, Any, str]]:
    return [(p.tool_call_id, p.content, p.outcome) for m in messages
            if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


def approving_tool(tools: FunctionToolset[Any], seen: list[Any] | None = None,
                   metadata: dict[str, Any] | None = None) -> None:
    @tools.tool
    def my_tool(ctx: RunContext[Any], x: int) -> int:
        if not ctx.tool_call_approved:
            raise ApprovalRequired(metadata=metadata)
        if seen is not None:
            seen.append((ctx.tool_call_metadata, x))
        return x * 42


def test_tool_raises_approval_required() -> None:
    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools)
    agent = agent_over(tools, first_then_done(ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")))

    result = agent.run_sync("Hello")
    assert isinstance(result.output, DeferredToolRequests)
    assert result.output.approvals == [ToolCallPart("my_tool", {"x": 1}, tool_call_id="my_tool")]

    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"my_tool": ToolApproved(override_args={"x": 2})})))

    assert returns_of(result.all_messages()) == [("my_tool", 84, "success")]
    # The history keeps the model's proposal; the override is what ran.
    assert result.all_messages()[1].parts == [ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")]
    assert result.output == "Done!"


def test_approval_required_with_user_prompt() -> None:
    def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("my_tool", {"x": 1},
                                                     tool_call_id="my_tool")])
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        assert any(isinstance(p, ToolReturnPart) for p in last.parts)
        prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[TextPart(f"Tool executed and {prompt}")])

    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools)
    agent = agent_over(tools, FunctionModel(llm))
    result = agent.run_sync("Hello")
    assert isinstance(result.output, DeferredToolRequests)

    result = agent.run_sync(user_prompt="continue with extra instructions",
                            message_history=result.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={"my_tool": True}))

    assert result.output == "Tool executed and continue with extra instructions"


def test_approval_required_with_metadata() -> None:
    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools, metadata={"reason": "High compute cost", "estimated_time": "5 minutes",
                                    "cost_usd": 100.0})
    agent = agent_over(tools, first_then_done(ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")))

    result = agent.run_sync("Hello")

    assert isinstance(result.output, DeferredToolRequests)
    metadata = dict(result.output.metadata["my_tool"])
    # Deliberate difference: the stored request's id rides along with the tool's metadata.
    assert metadata.pop("confirmation_id").startswith("cf_")
    assert metadata == {"reason": "High compute cost", "estimated_time": "5 minutes",
                        "cost_usd": 100.0}
    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"my_tool": ToolApproved()})))
    assert result.output == "Done!"


def test_approval_required_without_metadata() -> None:
    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools)
    agent = agent_over(tools, first_then_done(ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")))

    result = agent.run_sync("Hello")

    assert isinstance(result.output, DeferredToolRequests)
    assert len(result.output.approvals) == 1
    # Deliberate difference: only the confirmation id (Pydantic AI alone: {}).
    assert set(result.output.metadata["my_tool"]) == {"confirmation_id"}
    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"my_tool": ToolApproved()})))
    assert result.output == "Done!"


def test_tool_approved_with_metadata() -> None:
    seen: list[Any] = []
    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools, seen, metadata={"reason": "High compute cost"})
    agent = agent_over(tools, first_then_done(ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")))
    result = agent.run_sync("Hello")

    approval_metadata = {"user_id": "user-123", "approved_at": "2025-01-01T00:00:00Z"}
    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"my_tool": ToolApproved()},
                            metadata={"my_tool": approval_metadata})))

    assert result.output == "Done!"
    assert seen == [(approval_metadata, 1)]


def test_tool_approved_with_metadata_and_override_args() -> None:
    seen: list[Any] = []
    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools, seen)
    agent = agent_over(tools, first_then_done(ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")))
    result = agent.run_sync("Hello")

    approval_metadata = {"approver": "admin", "notes": "LGTM"}
    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"my_tool": ToolApproved(override_args={"x": 100})},
                            metadata={"my_tool": approval_metadata})))

    assert result.output == "Done!"
    assert seen == [(approval_metadata, 100)]


def test_tool_approved_without_metadata() -> None:
    seen: list[Any] = []
    tools: FunctionToolset[Any] = FunctionToolset()
    approving_tool(tools, seen)
    agent = agent_over(tools, first_then_done(ToolCallPart("my_tool", {"x": 1},
                                                           tool_call_id="my_tool")))
    result = agent.run_sync("Hello")

    result = agent.run_sync(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"my_tool": ToolApproved()})))

    assert result.output == "Done!"
    assert seen == [(None, 1)]


def test_unapproved_tool_invalid_args_retry() -> None:
    turns = 0

    def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal turns
        turns += 1
        if turns == 1:
            return ModelResponse(parts=[ToolCallPart("my_tool", {"x": "not_an_int"},
                                                     tool_call_id="t1")])
        return ModelResponse(parts=[TextPart("done")])

    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain(retries=1, requires_approval=True)
    def my_tool(x: int) -> int:
        return x  # pragma: no cover

    result = agent_over(tools, FunctionModel(llm)).run_sync("test")

    assert result.output == "done"
    # pydantic-ai-slim 2.68 (as without the gate) reports the retry as a ToolReturnPart
    # with outcome="retried"; the upstream test, on a later commit, reads RetryPromptPart.
    retries = [p for m in result.all_messages() if isinstance(m, ModelRequest)
               for p in m.parts if isinstance(p, ToolReturnPart) and p.outcome == "retried"]
    assert len(retries) == 1 and retries[0].tool_name == "my_tool"


def test_unapproved_tool_invalid_args_max_retries_exceeded() -> None:
    def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("my_tool", {"x": "not_an_int"},
                                                 tool_call_id="t1")])

    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain(retries=0, requires_approval=True)
    def my_tool(x: int) -> int:
        return x  # pragma: no cover

    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 0"):
        agent_over(tools, FunctionModel(llm)).run_sync("test")


@pytest.mark.anyio
async def test_approval_required_toolset() -> None:
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain
    def foo(x: int) -> int:
        return x * 2

    @tools.tool_plain
    def bar(x: int) -> int:
        return x * 3

    agent = agent_over(
        tools, first_then_done(ToolCallPart("foo", {"x": 1}, tool_call_id="foo1"),
                               ToolCallPart("foo", {"x": 2}, tool_call_id="foo2"),
                               ToolCallPart("bar", {"x": 3}, tool_call_id="bar")),
        require_confirmation=lambda ctx, tool_def, tool_args: tool_def.name == "foo")

    result = await agent.run("foo")
    assert returns_of(result.all_messages()) == [("bar", 9, "success")]
    assert isinstance(result.output, DeferredToolRequests)
    assert result.output.approvals == [ToolCallPart("foo", {"x": 1}, tool_call_id="foo1"),
                                       ToolCallPart("foo", {"x": 2}, tool_call_id="foo2")]

    result = await agent.run(message_history=result.all_messages(), deferred_tool_results=(
        DeferredToolResults(approvals={"foo1": True, "foo2": False})))

    assert returns_of(result.all_messages()) == [
        ("bar", 9, "success"), ("foo1", 2, "success"),
        ("foo2", "The tool call was denied.", "denied")]
    assert result.output == "Done!"


def _shape(messages: list[ModelMessage]) -> list[list[tuple[Any, ...]]]:
    """Messages without timestamps and ids: what the model reads."""
    shaped = []
    for message in messages:
        parts = []
        for p in message.parts:
            parts.append((type(p).__name__, getattr(p, "tool_call_id", None),
                          getattr(p, "content", None), getattr(p, "outcome", None),
                          getattr(p, "metadata", None)))
        shaped.append(parts)
    return shaped


def test_parallel_tool_return_with_deferred() -> None:
    def build(gated: bool) -> Agent[Any, Any]:
        def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                return ModelResponse(parts=[
                    ToolCallPart("get_price", {"fruit": f}, tool_call_id=f"get_price_{f}")
                    for f in ("apple", "banana", "pear", "grape")] + [
                    ToolCallPart("buy", {"fruit": f}, tool_call_id=f"buy_{f}")
                    for f in ("apple", "banana", "pear")])
            return ModelResponse(parts=[TextPart("Done!")])

        tools: FunctionToolset[Any] = FunctionToolset()

        @tools.tool_plain
        def get_price(fruit: str) -> ToolReturn:
            if fruit in ("apple", "pear"):
                return ToolReturn(return_value=10.0, content=f"The price of {fruit} is 10.0.",
                                  metadata={"fruit": fruit, "price": 10.0})
            raise ModelRetry(f"Unknown fruit: {fruit}")

        @tools.tool_plain
        def buy(fruit: str) -> None:
            raise CallDeferred

        if not gated:
            return Agent(FunctionModel(llm), toolsets=[tools],
                         output_type=[str, DeferredToolRequests])  # type: ignore[arg-type]
        # Every call through the gate (approved at once): ToolReturn, ModelRetry and
        # CallDeferred must reach Pydantic AI as the tool produced them.
        return agent_over(tools, FunctionModel(llm), require_confirmation=True,
                          provider=AutoApprove())

    native = build(False).run_sync("What do they cost? Also buy me a pear.")
    gated = build(True).run_sync("What do they cost? Also buy me a pear.")

    assert _shape(gated.all_messages()) == _shape(native.all_messages())
    assert isinstance(gated.output, DeferredToolRequests)
    assert [p.tool_call_id for p in gated.output.calls] == ["buy_apple", "buy_banana", "buy_pear"]
    returns = {p.tool_call_id: p for p in gated.all_messages()[2].parts
               if isinstance(p, ToolReturnPart)}
    assert returns["get_price_apple"].content == 10.0
    assert returns["get_price_apple"].metadata == {"fruit": "apple", "price": 10.0}
