"""How fast `sandbox` starts: every row a whole fresh process, side by side in one run.

    .venv/bin/python bench/startup.py [--rounds 15] [--pause 0.2] [--no-peers]

Rows (each timed from this process around a fresh child, except where it says "in the
child"), with ``python -c pass`` as the floor:

- ``import sandbox`` (goal ≤ 100 ms as a whole process);
- ``sandbox run --approve auto -- true``: the console script, default policy, so the
  default confinement (goal ≤ 150 ms as a whole process);
- the first ``ExecuteBashTool.run_async`` of ``true`` in a fresh process, timed in the
  child from just before the call to its return, right after the tool was constructed
  (goal ≤ 30 ms), and again in a child that pauses ``--pause`` seconds between
  constructing and calling (an agent constructs its tools, then waits for its model);
  the child's import + construct time is a row of its own. Google ADK's own
  ``ExecuteBashTool`` (google.adk.tools.bash_tool) is measured the same way in the same
  run when it is installed (confirmation pre-supplied to both, so both run the command);
- ``sandbox mcp --policy readonly`` answering ``initialize``: raw JSON-RPC over stdio,
  timed from the spawn to the response line (goal ≤ 300 ms);
- peers, for context only, when on PATH: ``codex sandbox linux -- true`` (the Codex CLI)
  and ``srt true`` (Anthropic's sandbox-runtime).

Every workspace is a small temporary project (a README, a src/ directory, a .git
directory), so that a row measures start-up and not the size of the current directory.
Rounds run every row once each in a shuffled order, so machine noise falls on all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PYTHON = sys.executable
BIN = Path(sys.executable).parent
# As a user's Python runs: bytecode cached (an installed wheel ships it; with
# PYTHONDONTWRITEBYTECODE every start compiles the package's sources again).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench-startup", "version": "0"}}}

# The child of the first-call rows: prints {"import_ms", "call_ms"} as its last line.
OURS_FIRST_CALL = r"""
import sys, time
t0 = time.perf_counter()
from sandbox import ExecuteBashTool, ToolConfirmation, ToolContext
tool = ExecuteBashTool(workspace=sys.argv[1])
t1 = time.perf_counter()
pause = float(sys.argv[2])
import anyio
ctx = ToolContext(function_call_id="bench", tool_confirmation=ToolConfirmation(confirmed=True))
async def first():
    if pause:
        await anyio.sleep(pause)
    started = time.perf_counter()
    result = await tool.run_async(args={"command": "true"}, tool_context=ctx)
    took = time.perf_counter() - started
    assert result.get("returncode") == 0, result
    return took
took = anyio.run(first)
import json
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "call_ms": took * 1e3}))
"""

ADK_FIRST_CALL = r"""
import sys, time
t0 = time.perf_counter()
from google.adk.tools.bash_tool import ExecuteBashTool
from google.adk.tools.tool_confirmation import ToolConfirmation
import pathlib
tool = ExecuteBashTool(workspace=pathlib.Path(sys.argv[1]))
t1 = time.perf_counter()
pause = float(sys.argv[2])
import asyncio, types
ctx = types.SimpleNamespace(tool_confirmation=ToolConfirmation(confirmed=True))
async def first():
    if pause:
        await asyncio.sleep(pause)
    started = time.perf_counter()
    result = await tool.run_async(args={"command": "true"}, tool_context=ctx)
    took = time.perf_counter() - started
    assert result.get("returncode") == 0, result
    return took
took = asyncio.run(first())
import json
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "call_ms": took * 1e3}))
"""


def _project() -> Path:
    """A small project to work in."""
    root = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    (root / "README.md").write_text("# a project\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hello')\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


def _cpu() -> float:
    """CPU seconds of the children waited for so far (theirs and their waited-for
    children's): less sensitive than wall time to what else runs on the machine."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _whole(argv: list[str], cwd: Path, env: dict[str, str] = ENV
           ) -> Callable[[], dict[str, float]]:  # fmt: skip
    """Time one fresh process running argv to its exit."""

    def run() -> dict[str, float]:
        cpu = _cpu()
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, env=env,
                              capture_output=True, timeout=120, check=False)
        took = (time.perf_counter() - started) * 1e3
        if done.returncode != 0:
            raise RuntimeError(f"{argv} exited {done.returncode}: "
                               f"{done.stderr.decode(errors='replace')[-800:]}")
        return {"": took, "cpu": (_cpu() - cpu) * 1e3}

    return run


def _first_call(code: str, workspace: Path, pause: float, env: dict[str, str] = ENV
                ) -> Callable[[], dict[str, float]]:  # fmt: skip
    def run() -> dict[str, float]:
        cpu = _cpu()
        started = time.perf_counter()
        done = subprocess.run([PYTHON, "-c", code, str(workspace), str(pause)], cwd=workspace,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                              env=env, check=False)
        took = (time.perf_counter() - started) * 1e3
        cpu = _cpu() - cpu
        if done.returncode != 0:
            raise RuntimeError(f"first-call child exited {done.returncode}: "
                               f"{done.stderr.decode(errors='replace')[-800:]}")
        line = done.stdout.decode().strip().splitlines()[-1]
        figures: dict[str, float] = json.loads(line)
        return {"import": figures["import_ms"], "call": figures["call_ms"], "whole": took,
                "whole-cpu": cpu * 1e3}

    return run


def _mcp_initialize(workspace: Path, env: dict[str, str] = ENV
                    ) -> Callable[[], dict[str, float]]:  # fmt: skip
    argv = [str(BIN / "sandbox"), "mcp", "--policy", "readonly", "--workspace", str(workspace)]
    message = (json.dumps(INIT) + "\n").encode()

    def run() -> dict[str, float]:
        cpu = _cpu()
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=workspace, stdin=subprocess.PIPE, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(message)
            proc.stdin.flush()
            line = proc.stdout.readline()
            took = (time.perf_counter() - started) * 1e3
            answer = json.loads(line) if line else {}
            if answer.get("id") != 1 or "result" not in answer:
                raise RuntimeError(f"sandbox mcp answered {line[:300]!r}; stderr: "
                                   f"{proc.stderr.read()[-800:] if proc.stderr else b''!r}")
            proc.stdin.close()  # end of the session: the server exits
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        # CPU to the end of the session (the server exits when stdin closes).
        return {"": took, "cpu": (_cpu() - cpu) * 1e3}

    return run


def _adk_installed() -> bool:
    done = subprocess.run([PYTHON, "-c", "import google.adk.tools.bash_tool as b; "
                           "assert hasattr(b, 'ExecuteBashTool')"],
                          capture_output=True, check=False)
    return done.returncode == 0


def _peers(workspace: Path) -> dict[str, Callable[[], dict[str, float]]]:
    peers: dict[str, Callable[[], dict[str, float]]] = {}
    codex = shutil.which("codex")
    if codex:
        peers["peer: codex sandbox linux -- true"] = _whole(
            [codex, "sandbox", "linux", "--", "true"], workspace)
    srt = shutil.which("srt")
    if srt:
        peers["peer: srt true"] = _whole([srt, "true"], workspace)
    return peers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pause", type=float, default=0.2,
                        help="seconds between construct and first call in the paused rows")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the sandbox rows with the package in DIR (a checkout "
                             "of another commit: DIR/sandbox), interleaved in the same "
                             "rounds, each printed under its row as '(baseline)'")
    args = parser.parse_args()

    workspace = _project()
    try:
        # A variant yields one or more figures; each figure is a row.
        variants: dict[str, Callable[[], dict[str, float]]] = {
            "floor": _whole([PYTHON, "-c", "pass"], workspace),
            "import": _whole([PYTHON, "-c", "import sandbox"], workspace),
            "run": _whole([str(BIN / "sandbox"), "run", "--approve", "auto", "--", "true"],
                          workspace),
            "ours": _first_call(OURS_FIRST_CALL, workspace, 0.0),
            "ours-paused": _first_call(OURS_FIRST_CALL, workspace, args.pause),
            "mcp": _mcp_initialize(workspace),
        }
        adk = _adk_installed()
        if adk:
            variants["adk"] = _first_call(ADK_FIRST_CALL, workspace, 0.0)
            variants["adk-paused"] = _first_call(ADK_FIRST_CALL, workspace, args.pause)
        if args.baseline:
            base = {**ENV, "PYTHONPATH": str(Path(args.baseline).resolve())}
            variants.update({
                "import@base": _whole([PYTHON, "-c", "import sandbox"], workspace, base),
                "run@base": _whole([str(BIN / "sandbox"), "run", "--approve", "auto", "--",
                                    "true"], workspace, base),
                "ours@base": _first_call(OURS_FIRST_CALL, workspace, 0.0, base),
                "ours-paused@base": _first_call(OURS_FIRST_CALL, workspace, args.pause, base),
                "mcp@base": _mcp_initialize(workspace, base),
            })
        if not args.no_peers:
            variants.update(_peers(workspace))
        for fn in variants.values():  # warm the page cache and the .pyc files
            fn()
        samples: dict[tuple[str, str], list[float]] = {}
        order = list(variants.items())
        for _ in range(args.rounds):
            random.shuffle(order)
            for name, fn in order:
                for part, ms in fn().items():
                    samples.setdefault((name, part), []).append(ms)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)

    pause_ms = f"{args.pause * 1000:g} ms"
    rows: list[tuple[str, tuple[str, str], float | None]] = [
        ("python -c pass (the floor)", ("floor", ""), None),
        ("import sandbox", ("import", ""), 100.0),
        ("sandbox run --approve auto -- true", ("run", ""), 150.0),
        ("ExecuteBashTool: import + construct (in the child)", ("ours", "import"), None),
        ("ExecuteBashTool: first run_async(true), at once", ("ours", "call"), 30.0),
        (f"ExecuteBashTool: first run_async(true), {pause_ms} later", ("ours-paused", "call"),
         30.0),
        ("ExecuteBashTool: whole process (at once)", ("ours", "whole"), None),
        ("ADK ExecuteBashTool: import + construct (in the child)", ("adk", "import"), None),
        ("ADK ExecuteBashTool: first run_async(true), at once", ("adk", "call"), None),
        (f"ADK ExecuteBashTool: first run_async(true), {pause_ms} later",
         ("adk-paused", "call"), None),
        ("ADK ExecuteBashTool: whole process (at once)", ("adk", "whole"), None),
        ("sandbox mcp --policy readonly: initialize answered", ("mcp", ""), 300.0),
    ]
    rows += [(name, (name, ""), None) for name in variants if name.startswith("peer:")]
    floor = statistics.median(samples[("floor", "")])
    print(f"Start-up, each row a fresh process ({args.rounds} rounds, shuffled; Python "
          f"{sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} CPUs)")
    print(f"  {'':58} {'median ms':>9} {'p90 ms':>8} {'- floor':>8} {'CPU ms':>7}  goal")
    shown: list[tuple[str, tuple[str, str], float | None]] = []
    for label, key, goal in rows:
        shown.append((label, key, goal))
        if (key[0] + "@base", key[1]) in samples:
            shown.append(("  (baseline)", (key[0] + "@base", key[1]), None))
    for label, key, goal in shown:
        xs = samples.get(key)
        if not xs:
            continue
        median = statistics.median(xs)
        p90 = statistics.quantiles(xs, n=10)[-1] if len(xs) > 1 else median
        whole = key[1] in ("", "whole")
        over = f"{median - floor:8.1f}" if whole else f"{'':8}"
        cpu_key = (key[0], "cpu" if key[1] == "" else "whole-cpu")
        cpu = (f"{statistics.median(samples[cpu_key]):7.1f}"
               if whole and cpu_key in samples else f"{'':7}")
        verdict = ""
        if goal is not None:
            verdict = f"≤ {goal:g} ms: {'PASS' if median <= goal else 'MISS'}"
        print(f"  {label:58} {median:9.1f} {p90:8.1f} {over} {cpu}  {verdict}")
    print("  (CPU ms: user + system time of the process and of the children it waited for; "
          "the spawner, which outlives its agent briefly, is not in it)")
    if not adk:
        print("  (google-adk's ExecuteBashTool is not installed: no ADK rows)")


if __name__ == "__main__":
    main()
