"""What the gate costs inside a Pydantic AI agent: one table, native and gated side by side.

    .venv/bin/python bench/gate_pydantic_ai.py [--runs 200] [--rounds 5]

Each sample is one whole ``Agent.run`` with Pydantic AI's offline ``FunctionModel`` making
one tool call and then answering (two model turns), so the numbers include Pydantic AI's
own work; the "gate adds" column is a variant's median minus its native counterpart's.

- ``no approval needed``: a plain ``FunctionToolset`` vs the same wrapped in
  `SandboxApprovalToolset` (the call passes the gate: recorded, started, finished).
- ``approved in the run``: ``requires_approval=True``; natively there is no in-run
  answer (the row's native cell is the plain call), gated an ``AutoApprove`` provider.
- ``pause + resume``: the deferred round trip (``DeferredToolRequests``, then a second run
  with ``DeferredToolResults``) natively (``requires_approval=True``) and gated, with the
  gate's store in memory and in a SQLite file.

Samples are interleaved in rounds so that machine noise hits every variant alike. Each
sample is timed twice: wall clock, and this process's CPU time (all its threads), which
other processes on a shared machine do not inflate; "gate adds" is given for both.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from sandbox import AutoApprove
from sandbox.integrations.pydantic_ai import SandboxApprovalToolset

_counter = 0


def model() -> FunctionModel:
    def llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        global _counter
        if len(messages) == 1:
            _counter += 1
            return ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": 2},
                                                     tool_call_id=f"c{_counter}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(llm)


def tools(requires_approval: bool) -> FunctionToolset[Any]:
    ts: FunctionToolset[Any] = FunctionToolset()

    @ts.tool_plain(requires_approval=requires_approval)
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    return ts


def agent(toolset: Any) -> Agent[Any, Any]:
    return Agent(model(), toolsets=[toolset], output_type=[str, DeferredToolRequests])


def one_run(a: Agent[Any, Any]) -> Callable[[], None]:
    def go() -> None:
        assert a.run_sync("go").output == "done"
    return go


def round_trip(a: Agent[Any, Any]) -> Callable[[], None]:
    def go() -> None:
        first = a.run_sync("go")
        assert isinstance(first.output, DeferredToolRequests)
        [call] = first.output.approvals
        second = a.run_sync(message_history=first.all_messages(), deferred_tool_results=(
            DeferredToolResults(approvals={call.tool_call_id: True})))
        assert second.output == "done"
    return go


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="samples per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    db = str(Path(tempfile.mkdtemp()) / "approvals.db")
    variants: dict[str, Callable[[], None]] = {
        "native: no approval": one_run(agent(tools(False))),
        "gated: no approval": one_run(agent(SandboxApprovalToolset(tools(False)))),
        "gated: AutoApprove in the run": one_run(agent(
            SandboxApprovalToolset(tools(True), provider=AutoApprove()))),
        "native: pause + resume": round_trip(agent(tools(True))),
        "gated: pause + resume (memory)": round_trip(agent(SandboxApprovalToolset(tools(True)))),
        "gated: pause + resume (SQLite file)": round_trip(agent(
            SandboxApprovalToolset(tools(True), store=db))),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm up
        for _ in range(5):
            fn()
    for _ in range(args.rounds):
        for name, fn in variants.items():
            for _ in range(max(1, args.runs // args.rounds)):
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                samples[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
    med = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
    med_cpu = {name: statistics.median(s) * 1e6 for name, s in cpu.items()}
    base = {"gated: no approval": "native: no approval",
            "gated: AutoApprove in the run": "native: no approval",
            "gated: pause + resume (memory)": "native: pause + resume",
            "gated: pause + resume (SQLite file)": "native: pause + resume"}
    print(f"{'variant':38} {'wall median µs':>15} {'wall p90 µs':>12} {'adds µs':>8}"
          f" {'CPU median µs':>14} {'adds µs':>8}")
    for name, s in samples.items():
        p90 = sorted(s)[int(len(s) * 0.9)] * 1e6
        added = f"{med[name] - med[base[name]]:8.0f}" if name in base else f"{'':>8}"
        added_cpu = (f"{med_cpu[name] - med_cpu[base[name]]:8.0f}" if name in base
                     else f"{'':>8}")
        print(f"{name:38} {med[name]:15.0f} {p90:12.0f} {added} {med_cpu[name]:14.0f}"
              f" {added_cpu}")


if __name__ == "__main__":
    main()
