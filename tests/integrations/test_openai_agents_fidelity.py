"""Our OpenAI Agents tools against the SDK's own ``needs_approval=True`` tools.

The same scripted run (`agents.testing.ScriptedModel`) once with an SDK
``@function_tool(needs_approval=True)`` answered with ``RunState.approve/reject``, once
with `to_openai_tool` answered through `RunStateBridge`: the interruptions, what the
model reads and what ran must be the same, streamed or not, with the SDK's own
rejection texts and formatter. Where the gate deliberately differs, the test says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    RunConfig,
    Runner,
    RunState,
    function_tool,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel, assistant_message, function_call

from sandbox import FunctionTool, ToolRunner
from sandbox.integrations.openai_agents import RunStateBridge, to_openai_tools

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

set_tracing_disabled(True)

Answer = Callable[[Any, Any], Awaitable[None]]


class Side:
    """One side of a comparison: an agent, and how a human answers an item."""

    def __init__(self, which: str, steps: list[Any]) -> None:
        self.ran: list[str] = []
        self.model = ScriptedModel(steps)

        def send(to: str) -> str:
            """Send a message."""
            self.ran.append(to)
            return f"sent to {to}"

        if which == "native":
            self.tools: list[Any] = [function_tool(send, needs_approval=True)]
            self.bridge = None
        else:
            runner = ToolRunner([FunctionTool(send, require_confirmation=True)])
            self.tools = to_openai_tools(runner)
            self.bridge = RunStateBridge(runner)
        self.agent = Agent(name="a", model=self.model, tools=self.tools)

    async def approve(self, state: Any, item: Any, **kwargs: Any) -> None:
        if self.bridge is None:
            state.approve(item, **kwargs)
        else:
            await self.bridge.approve(state, item, **kwargs)

    async def reject(self, state: Any, item: Any, message: str | None = None) -> None:
        if self.bridge is None:
            state.reject(item, rejection_message=message)
        else:
            await self.bridge.reject(state, item, message)

    def outputs(self) -> list[tuple[str, Any]]:
        last = self.model.last_call
        assert last is not None
        return [(i["call_id"], i["output"]) for i in last.input
                if isinstance(i, dict) and i.get("type") == "function_call_output"]


def steps(*to: str) -> list[Any]:
    return [[function_call("send", {"to": t}, call_id=f"c_{t}") for t in to],
            [assistant_message("done")]]


async def both(scenario: Callable[[Side], Awaitable[Any]], *to: str) -> Any:
    got = {}
    for which in ("native", "sandbox"):
        side = Side(which, steps(*to))
        extra = await scenario(side)
        got[which] = (side.ran, side.outputs(), extra)
    assert got["sandbox"] == got["native"]
    return got["sandbox"]


def item_view(item: Any) -> tuple[Any, ...]:
    return (item.name, item.call_id, item.arguments, item.type)


async def test_approve_and_reject_read_the_same() -> None:
    async def scenario(side: Side) -> Any:
        result = await Runner.run(side.agent, "go")
        state = result.to_state()
        items = {i.call_id: i for i in result.interruptions}
        await side.approve(state, items["c_alice"])
        await side.reject(state, items["c_bob"], "not bob")
        await side.reject(state, items["c_carol"])
        final = await Runner.run(side.agent, state)
        return [item_view(i) for i in result.interruptions], final.final_output

    ran, outputs, _ = await both(scenario, "alice", "bob", "carol")
    assert ran == ["alice"]
    assert dict(outputs)["c_carol"] == "Tool execution was not approved."


async def test_streamed_runs_read_the_same() -> None:
    async def scenario(side: Side) -> Any:
        streamed = Runner.run_streamed(side.agent, "go")
        async for _ in streamed.stream_events():
            pass
        [item] = streamed.interruptions
        state = streamed.to_state()
        await side.approve(state, item)
        again = Runner.run_streamed(side.agent, state)
        async for _ in again.stream_events():
            pass
        return item_view(item), again.final_output

    ran, _, _ = await both(scenario, "alice")
    assert ran == ["alice"]


async def test_the_run_level_rejection_formatter_is_used() -> None:
    def formatter(args: Any) -> str | None:
        return f"{args.kind}: {args.tool_name} was turned down"

    async def scenario(side: Side) -> Any:
        config = RunConfig(tool_error_formatter=formatter)
        result = await Runner.run(side.agent, "go", run_config=config)
        state = result.to_state()
        await side.reject(state, result.interruptions[0])
        await Runner.run(side.agent, state, run_config=config)

    _, outputs, _ = await both(scenario, "alice")
    assert outputs == [("c_alice", "approval_rejected: send was turned down")]


async def test_a_state_saved_and_restored_reads_the_same() -> None:
    async def scenario(side: Side) -> Any:
        result = await Runner.run(side.agent, "go")
        restored = await RunState.from_string(side.agent, result.to_state().to_string())
        [item] = restored.get_interruptions()
        await side.approve(restored, item)
        await Runner.run(side.agent, restored)

    ran, _, _ = await both(scenario, "alice")
    assert ran == ["alice"]


async def test_always_approve_lets_later_calls_run() -> None:
    got = {}
    for which in ("native", "sandbox"):
        side = Side(which, [[function_call("send", {"to": "a"}, call_id="c_a")],
                            [function_call("send", {"to": "b"}, call_id="c_b")],
                            [assistant_message("done")]])
        result = await Runner.run(side.agent, "go")
        state = result.to_state()
        await side.approve(state, result.interruptions[0], always_approve=True)
        final = await Runner.run(side.agent, state)
        got[which] = (side.ran, side.outputs(), final.interruptions, final.final_output)
    assert got["sandbox"] == got["native"]
    assert got["sandbox"][0] == ["a", "b"]


# -- deliberate differences --------------------------------------------------------------


async def test_saved_state_resumed_twice() -> None:
    """Natively both copies run the tool; behind the gate the second reads the record."""
    ran = {}
    for which in ("native", "sandbox"):
        side = Side(which, [*steps("alice")[:1], [assistant_message("one")],
                            [assistant_message("two")]])
        result = await Runner.run(side.agent, "go")
        state = result.to_state()
        await side.approve(state, result.interruptions[0])
        saved = state.to_string()
        await Runner.run(side.agent, state)
        await Runner.run(side.agent, await RunState.from_string(side.agent, saved))
        ran[which] = side.ran
    assert ran == {"native": ["alice", "alice"], "sandbox": ["alice"]}
