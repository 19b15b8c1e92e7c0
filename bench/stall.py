"""Does a tool call ever freeze the agent's event loop? One table of red-team shapes.

    .venv/bin/python bench/stall.py [--shapes NAME,...] [--before PATH] [--files 200000]

Each shape (a crafted parse bomb, deep nesting, a huge here-document, a command that
leaves 200,000 files in its TMPDIR, huge or binary output, many descriptors, many
processes) goes through `ExecuteBashTool.run_async` and through `ToolRunner.call`
(memory store, with the audit log on: the result is JSON-encoded, redacted and hashed),
while a ticker coroutine sleeps 1 ms at a time on the same loop. Columns:

- ``max lag``: the worst lateness of the ticker's wake-up (ms): how long the loop could
  not run anything else. It includes the machine's own noise (other processes on these
  cores): the ``idle`` row is the ticker alone during a ``sleep 1``.
- ``max step``: the longest single step of the loop (one callback) in the loop thread's
  CPU time (ms), which no other process inflates; it misses time the loop spent waiting
  for the GIL held by a worker thread, which ``max lag`` sees.
- ``wall``: the call's duration (s), and what it returned.

Each shape runs ``--repeat`` times (default 3) on each path; the table shows the
smallest max lag and max step of those runs (a stall of ours shows in every run, a
burst of machine noise seldom twice) and the median wall time.

Goal (issue 16): max lag <= 50 ms for every shape. ``--before PATH`` runs the same shapes
against the sandbox package in another checkout (e.g. /work/main, the code before the
fix) in a child process and prints both side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext, ToolRunner

TICK = 0.001


def _fit(unit: str, size: int = 4096, head: str = "", tail: str = "") -> str:
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


def shapes(files: int) -> dict[str, str | tuple[str, str]]:
    """Shape name -> command, or (a setup command run first, unmeasured; the command)."""
    return {
        "idle (sleep 1)": "sleep 1",
        "parse bomb (x100 )~x1998, 4 KiB": "(" * 100 + ")~" * 1998,
        "parse bomb (x256 )~, 4 KiB": "(" * 256 + ")~" * 1920,
        "parse bomb (x25 )~, 1 KiB": "(" * 25 + ")~" * 499,
        "[`<do x819 (guarded), 4 KiB": _fit("[`<do"),
        "a | x16000 (guarded), 64 KiB": _fit("a | ", 65000),
        "a; x2048, 4 KiB": _fit("a;"),
        "a; x32000, 64 KiB": _fit("a;", 65000),
        "nested $( x90": "echo " + "$(" * 90 + "ls" + ")" * 90,
        "nested ${x:- x90": "echo " + "${x:-" * 90 + "}" * 90,
        "nested <( x90": "cat " + "<(" * 90 + "ls" + ")" * 90,
        "nested ( x1000 (refused)": "(" * 1000 + "a" + ")" * 1000,
        "here-doc 64 KiB": "cat <<'EOF'\n" + _fit("$x line\n", 64000) + "EOF\n",
        "echo a x32000, 64 KiB (allowed)": _fit(" a", 65000, head="echo"),
        "1 MiB command (over the cap)": _fit("a ", 1 << 20, head="echo "),
        f"{files:,} files left in TMPDIR": (
            f'cd "$TMPDIR" && seq 1 {files} | xargs touch && echo made'),
        "200 MB of output": "head -c 200000000 /dev/zero",
        "8 MB of binary output": "head -c 8000000 /dev/urandom",
        "1 MiB of control characters": "head -c 1048576 /dev/zero | tr '\\0' '\\033'",
        "2,000 descriptors on the output": (
            'for i in $(seq 10 2010); do eval "exec $i>&1"; done; (sleep 60 &); echo x'),
        "200 background processes": "for i in $(seq 200); do sleep 60 & done; echo started",
        f"{files // 4:,} dirs in the workspace (next call)": (
            f"mkdir -p many && cd many && seq 1 {files // 4} | xargs mkdir -p && "
            "mkdir -p .git/hooks && echo made", "true"),
    }


class LoopWatch:
    """A ticker on the loop (max wake-up lateness) and the longest loop step's CPU."""

    def __init__(self) -> None:
        self.max_lag = 0.0
        self.max_step = 0.0
        self.max_wall_step: tuple[float, str] = (0.0, "")
        self._running = False
        original = asyncio.events.Handle._run
        watch = self

        def timed_run(handle: asyncio.Handle) -> None:
            started, wall = time.thread_time(), time.perf_counter()
            try:
                original(handle)
            finally:
                watch.max_step = max(watch.max_step, time.thread_time() - started)
                wall = time.perf_counter() - wall
                if wall > watch.max_wall_step[0]:
                    watch.max_wall_step = (wall, repr(handle)[:160])

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

    async def ticker(self) -> None:
        while self._running:
            before = time.perf_counter()
            await anyio.sleep(TICK)
            self.max_lag = max(self.max_lag, time.perf_counter() - before - TICK)

    async def measure(self, call: Callable[[], Awaitable[dict[str, Any]]]
                      ) -> tuple[float, float, float, str]:
        self.max_lag = self.max_step = 0.0
        self._running = True
        result: dict[str, Any] = {}
        async with anyio.create_task_group() as group:
            group.start_soon(self.ticker)
            await anyio.sleep(0.02)
            self.max_lag = self.max_step = 0.0
            self.max_wall_step = (0.0, "")
            started = time.perf_counter()
            result = await call()
            wall = time.perf_counter() - started
            self._running = False
        if self.max_wall_step[0] > 0.05:  # which step held the loop (diagnosis)
            print(f"    longest step {self.max_wall_step[0] * 1000:.0f} ms (wall): "
                  f"{self.max_wall_step[1]}", file=sys.stderr)
        return self.max_lag * 1000, self.max_step * 1000, wall, _outcome(result)


def _outcome(result: dict[str, Any]) -> str:
    if result.get("rule"):
        return f"refused {result['rule']}"
    if result.get("error"):
        return str(result["error"])[:40]
    out = result.get("stdout", "")
    return f"rc={result.get('returncode')} out={len(out):,}"


async def run(names: list[str] | None, files: int, repeat: int) -> list[dict[str, Any]]:
    workspace = Path(tempfile.mkdtemp(prefix="stall-bench-"))
    audit = workspace.parent / f"{workspace.name}.audit.jsonl"
    watch = LoopWatch()
    ctx = ToolContext(function_call_id="stall",
                      tool_confirmation=ToolConfirmation(confirmed=True))

    def fresh() -> ExecuteBashTool:
        # A new policy and tool for every call: both keep the decisions they made, and
        # a repeated command would be answered from that memory.
        policy = BashToolPolicy(no_confirmation_prefixes=("*",), timeout_seconds=300)
        return ExecuteBashTool(workspace=workspace, policy=policy)

    async def via_tool(command: str) -> dict[str, Any]:
        return await fresh().run_async(args={"command": command}, tool_context=ctx)

    async def via_runner(command: str) -> dict[str, Any]:
        tool = fresh()
        runner = ToolRunner([tool], audit_path=str(audit))
        return await runner.call(tool.name, {"command": command})

    await via_tool("true")  # warm up
    rows = []
    for name, shape in shapes(files).items():
        if names and not any(n.lower() in name.lower() for n in names):
            continue
        setup, command = shape if isinstance(shape, tuple) else (None, shape)
        if setup is not None:
            await via_tool(setup)
        paths: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
            ("run_async", lambda c=command: via_tool(c)),
            ("ToolRunner.call", lambda c=command: via_runner(c)),
        ]
        for path, call in paths:
            runs = [await watch.measure(call) for _ in range(repeat)]
            lag = min(r[0] for r in runs)
            step = min(r[1] for r in runs)
            wall = statistics.median(r[2] for r in runs)
            outcome = runs[-1][3]
            rows.append({"shape": name, "path": path, "lag": lag, "step": step,
                         "wall": wall, "outcome": outcome})
            print(f"  {name:34} {path:16} lag {lag:8.1f} ms  step {step:8.1f} ms  "
                  f"wall {wall:6.2f} s  {outcome}", file=sys.stderr, flush=True)
    audit.unlink(missing_ok=True)
    subprocess.run(["rm", "-rf", "--", str(workspace)], check=False)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", help="comma-separated substrings of shape names")
    parser.add_argument("--before", help="another checkout whose sandbox package to compare")
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.shapes.split(",") if args.shapes else None
    before: list[dict[str, Any]] | None = None
    if args.before:
        argv = [sys.executable, __file__, "--json", "--files", str(args.files),
                "--repeat", str(args.repeat)]
        if args.shapes:
            argv += ["--shapes", args.shapes]
        env = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
        print(f"before: the sandbox package of {args.before}", file=sys.stderr)
        out = subprocess.run(argv, env=env, check=True, stdout=subprocess.PIPE, text=True)
        before = json.loads(out.stdout)
        print("after: this checkout", file=sys.stderr)
    rows = anyio.run(run, names, args.files, args.repeat)
    if args.json:
        print(json.dumps(rows))
        return
    import sandbox

    print(f"\nevent-loop stall probe ({Path(sandbox.__file__).parent}); goal: max lag <= 50 ms")
    head = f"{'shape':34} {'path':16}"
    if before is not None:
        head += f" {'lag before':>11} {'step before':>11} {'wall before':>11}"
    head += f" {'max lag':>9} {'max step':>9} {'wall':>8}  outcome"
    print(head)
    print("-" * len(head))
    old = {(r["shape"], r["path"]): r for r in before or []}
    worst = 0.0
    for r in rows:
        line = f"{r['shape']:34} {r['path']:16}"
        if before is not None:
            b = old.get((r["shape"], r["path"]))
            line += (f" {b['lag']:8.1f} ms {b['step']:8.1f} ms {b['wall']:9.2f} s"
                     if b else f" {'-':>11} {'-':>11} {'-':>11}")
        line += f" {r['lag']:6.1f} ms {r['step']:6.1f} ms {r['wall']:6.2f} s  {r['outcome']}"
        print(line)
        worst = max(worst, r["lag"])
    print(f"\nworst max lag: {worst:.1f} ms ({'meets' if worst <= 50 else 'MISSES'} the 50 ms goal)")


if __name__ == "__main__":
    main()
