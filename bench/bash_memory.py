"""Spawn cost against the agent's size: ours (through the spawner) vs ADK's
`ExecuteBashTool` (which forks the agent), from a small agent and from one holding
1 GiB of touched memory — side by side in one run.

Each variant runs in a fresh child process (so the 1 GiB is really this agent's), with
google-adk imported, `true` with the three limits, rounds interleaved.

    python bench/bash_memory.py [--rounds 60]

Goal (issue 9): ours from a 1 GiB agent <= 1.2x ours from a small agent.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import asyncio, json, sys, tempfile, time, types, pathlib
import google.adk  # noqa: F401  (the agent has ADK loaded)
from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
which, hold, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ballast = bytearray(hold)
for i in range(0, hold, 4096):
    ballast[i] = 1  # touched: every page is really this process's
limits = dict(max_memory_bytes=1 << 30, max_file_size_bytes=1 << 24, max_child_processes=64)
ws = pathlib.Path(tempfile.mkdtemp())
if which == "ours":
    tool = ExecuteBashTool(workspace=ws, policy=BashToolPolicy(**limits))
    ctx = ToolContext(function_call_id="b", tool_confirmation=ToolConfirmation(confirmed=True))
    args = {"command": "true"}
else:
    from google.adk.tools.bash_tool import BashToolPolicy as P, ExecuteBashTool as T
    from google.adk.tools.tool_confirmation import ToolConfirmation as C
    tool = T(workspace=ws, policy=P(**limits))
    ctx = types.SimpleNamespace(tool_confirmation=C(confirmed=True))
    args = {"command": "bash -c true"}
async def main():
    out = []
    await tool.run_async(args=args, tool_context=ctx)
    for _ in range(rounds):
        t = time.perf_counter()
        await tool.run_async(args=args, tool_context=ctx)
        out.append(time.perf_counter() - t)
    print(json.dumps(out))
asyncio.run(main())
"""


def _run(which: str, hold: int, rounds: int) -> list[float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, which, str(hold), str(rounds)],
                          capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    gib = 1 << 30
    # In alternating chunks, so that load drifting on a shared machine weighs on every
    # variant alike (each variant needs a process of its own).
    samples: dict[tuple[str, int], list[float]] = {}
    chunks = 3
    for _ in range(chunks):
        for which in ("ours", "adk"):
            for hold in (0, gib):
                samples.setdefault((which, hold), []).extend(
                    _run(which, hold, max(args.rounds // chunks, 5)))
    rows = {key: statistics.median(xs) * 1e6 for key, xs in samples.items()}
    print("spawn cost against the agent's size (median µs, `true`, three limits, ADK imported)")
    print(f"   {'tool':<28}{'small agent':>14}{'1 GiB agent':>14}{'ratio':>8}")
    for which, label in (("ours", "ours (spawner, confined)"), ("adk", "ADK 2.13 ExecuteBashTool")):
        small, big = rows[(which, 0)], rows[(which, gib)]
        goal = f"  <= 1.2x: {'PASS' if big <= 1.2 * small else 'MISS'}" if which == "ours" else ""
        print(f"   {label:<28}{small:>14.0f}{big:>14.0f}{big / small:>8.2f}{goal}")
    print(f"   ours / ADK, small agent: {rows[('ours', 0)] / rows[('adk', 0)]:.2f}   "
          f"1 GiB agent: {rows[('ours', gib)] / rows[('adk', gib)]:.2f}")


if __name__ == "__main__":
    main()
