"""What the OpenAI Agents and LangGraph adapters cost per tool call, beside each framework
alone, with each framework's own offline model (no network).

    .venv/bin/python bench/framework_adapters.py [--calls 200] [--store memory|sqlite]

Rows: one tool call that needs no approval, and one paused for approval then approved
and run (the framework's own approval flow natively; the gate's behind the adapter).
Each row runs ``--calls`` whole agent runs and prints the median and the 90th percentile
per run in milliseconds of this process's CPU time (``--wall``: wall-clock time),
natively and with the adapter, side by side. The scripted
model's own work is in both columns; the difference is the adapter (the gate's
validation, verdict, store steps and journal).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from sandbox import FunctionTool, ToolRunner
from sandbox.integrations.langgraph import SandboxApprovalMiddleware
from sandbox.integrations.openai_agents import RunStateBridge, to_openai_tools

set_tracing_disabled(True)


def send(to: str) -> str:
    """Send a message."""
    return f"sent to {to}"


class Scripted(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
        return self


Stat = tuple[float, float]

#: CPU time of this process by default (the machine is shared: wall-clock medians are
#: mostly other people's load); ``--wall`` for wall-clock time.
CLOCK = time.process_time


def timed(n: int, native: Callable[[int], Awaitable[None]],
          ours: Callable[[int], Awaitable[None]]) -> tuple[Stat, Stat]:
    """Both timed in turn, run by run (the machine is shared: drift hits both alike)."""
    async def go() -> tuple[list[float], list[float]]:
        times: tuple[list[float], list[float]] = ([], [])
        for i in range(n):
            for side, once in enumerate((native, ours)):
                start = CLOCK()
                await once(i)
                times[side].append((CLOCK() - start) * 1000)
        return times

    both = asyncio.run(go())
    stats = []
    for times in both:
        times.sort()
        stats.append((statistics.median(times), times[max(0, int(len(times) * 0.9) - 1)]))
    return stats[0], stats[1]


def openai_rows(n: int, store: str | None) -> list[tuple[str, Stat, Stat]]:
    def steps(i: int) -> list[Any]:
        return [[function_call("send", {"to": f"u{i}"}, call_id=f"c{i}")],
                [assistant_message("done")]]

    async def native(i: int, ask: bool) -> None:
        agent = Agent(name="a", model=ScriptedModel(steps(i)),
                      tools=[function_tool(send, needs_approval=ask)])
        result = await Runner.run(agent, "go")
        if ask:
            state = result.to_state()
            state.approve(result.interruptions[0])
            await Runner.run(agent, state)

    runner_free = ToolRunner([FunctionTool(send)], store_path=store and f"{store}-free")
    runner_gated = ToolRunner([FunctionTool(send, require_confirmation=True)],
                              store_path=store and f"{store}-gated")
    free_tools, gated_tools = to_openai_tools(runner_free), to_openai_tools(runner_gated)
    bridge = RunStateBridge(runner_gated)

    async def ours(i: int, ask: bool) -> None:
        agent = Agent(name="a", model=ScriptedModel(steps(i)),
                      tools=gated_tools if ask else free_tools)
        result = await Runner.run(agent, "go")
        if ask:
            state = result.to_state()
            await bridge.approve(state, result.interruptions[0])
            await Runner.run(agent, state)

    return [
        ("OpenAI Agents: a call, no approval",
         *timed(n, lambda i: native(i, False), lambda i: ours(i, False))),
        ("OpenAI Agents: paused, approved, run",
         *timed(n, lambda i: native(i, True), lambda i: ours(i, True))),
    ]


def langgraph_rows(n: int, store: str | None) -> list[tuple[str, Stat, Stat]]:
    wrapped = tool(send)

    def model(i: int) -> Scripted:
        return Scripted(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "send", "args": {"to": f"u{i}"},
                                               "id": f"c{i}"}]),
            AIMessage(content="done")]))

    def build(i: int, middleware: Any) -> Any:
        return create_agent(model(i), tools=[wrapped], middleware=[middleware],
                            checkpointer=InMemorySaver())

    gate = SandboxApprovalMiddleware({"send": True}, store=store)
    native_mw = HumanInTheLoopMiddleware({"send": True})

    async def run(i: int, middleware: Any, ask: bool) -> None:
        agent = build(i, middleware) if ask else create_agent(
            model(i), tools=[wrapped], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": f"t{i}"}}
        await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, config)
        if ask:
            await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config)

    return [
        ("LangGraph: paused, approved, run",
         *timed(n, lambda i: run(i, native_mw, True), lambda i: run(i, gate, True))),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    options = parser.parse_args()
    global CLOCK
    if options.wall:
        CLOCK = time.perf_counter
    with tempfile.TemporaryDirectory() as tmp:
        store = None if options.store == "memory" else str(Path(tmp) / "approvals.db")
        rows = openai_rows(options.calls, store) + langgraph_rows(options.calls, store)
    clock = "wall-clock" if options.wall else "CPU"
    print(f"{options.calls} runs each, store: {options.store}; {clock} ms per run "
          "(median / p90)")
    print(f"{'':40} {'natively':>18} {'with the adapter':>18} {'added':>8}")
    for label, (n_med, n_p90), (o_med, o_p90) in rows:
        print(f"{label:40} {n_med:8.2f} / {n_p90:6.2f} {o_med:8.2f} / {o_p90:6.2f} "
              f"{o_med - n_med:+8.2f}")


if __name__ == "__main__":
    main()
