"""Micro-benchmark of the bash process layer (sandbox.bash.run.process.run_bash).

Prints one table, medians over rounds that run every variant in a shuffled order (so
that machine noise hits every variant alike):

    .venv/bin/python bench/bash_process.py [--rounds 200]

Variants: plain `subprocess.run(['bash', '-c', 'true'])`, the same with a preexec_fn
(what any rlimit costs in CPython), run_bash without and with all three limits under
each containment mechanism available here, and ADK's ExecuteBashTool (google-adk, if
installed) running `bash -c true`, which is what run_bash runs. Then the costs that
matter for escapes and output: time to return after the shell exits with a background
job holding stdout, overshoot of a timeout, and RSS growth while capturing `yes`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import subprocess
import tempfile
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path

from rss import peak_rss_growth  # bench/ is the script's directory

from sandbox.bash.run.containment import MECHANISMS, availability
from sandbox.bash.run.process import Limits, find_bash, run_bash

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
LIMITS = Limits(max_memory_bytes=1 << 30, max_file_size_bytes=1 << 30, max_child_processes=64)


def _adk_variant(workspace: Path) -> Callable[[], Awaitable[object]] | None:
    try:
        from google.adk.tools.bash_tool import BashToolPolicy, ExecuteBashTool
        from google.adk.tools.tool_confirmation import ToolConfirmation
    except ImportError:
        return None
    policy = BashToolPolicy(
        max_memory_bytes=1 << 30, max_file_size_bytes=1 << 30, max_child_processes=64
    )
    tool = ExecuteBashTool(workspace=workspace, policy=policy)
    # run_async reads only tool_confirmation from the context.
    context = types.SimpleNamespace(tool_confirmation=ToolConfirmation(confirmed=True))

    async def adk() -> object:
        return await tool.run_async(args={"command": "bash -c true"}, tool_context=context)  # type: ignore[arg-type]

    return adk


def _preexec() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


async def _table(rounds: int, workspace: Path) -> None:
    bash = find_bash()
    variants: dict[str, Callable[[], Awaitable[object]]] = {}

    # The blocking baselines: what a spawn costs with no event loop involved at all.
    async def plain() -> object:
        return subprocess.run([bash, "-c", "true"], check=False)

    async def plain_preexec() -> object:
        return subprocess.run(
            [bash, "-c", "true"], preexec_fn=_preexec, check=False
        )

    variants["subprocess.run bash -c true"] = plain
    variants["  + preexec_fn"] = plain_preexec
    for name in MECHANISMS:
        if not availability(name, bash).available:
            continue

        def make(limits: Limits, mech: str) -> Callable[[], Awaitable[object]]:
            async def run() -> object:
                return await run_bash(
                    "true", cwd=workspace, env=ENV, timeout=30, limits=limits, containment=mech
                )

            return run

        variants[f"run_bash {name}, no limits"] = make(Limits(), name)
        variants[f"run_bash {name}, 3 limits"] = make(LIMITS, name)
    adk = _adk_variant(workspace)
    if adk is not None:
        variants["ADK ExecuteBashTool bash -c true, 3 limits"] = adk

    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm up: detection, imports, page cache
        for _ in range(3):
            await fn()
    order = list(variants.items())
    for _ in range(rounds):
        random.shuffle(order)  # no variant always follows the same one
        for name, fn in order:
            started = time.perf_counter()
            await fn()
            samples[name].append((time.perf_counter() - started) * 1e6)

    adk_median = statistics.median(samples[next(reversed(samples))]) if adk else None
    print(f"{'variant':48} {'median µs':>10} {'p90 µs':>10} {'vs ADK':>7}")
    for name, xs in samples.items():
        median = statistics.median(xs)
        p90 = statistics.quantiles(xs, n=10)[-1]
        ratio = f"{median / adk_median:.2f}" if adk_median else "-"
        print(f"{name:48} {median:10.0f} {p90:10.0f} {ratio:>7}")


async def _escapes(workspace: Path) -> None:
    print()
    cases = [
        ("background job holding stdout", "sleep 300 & echo hi", 30.0),
        ("setsid -f escape, timeout 1 s", "setsid -f sleep 301; sleep 300", 1.0),
        ("double fork, timeout 1 s", "(setsid sleep 302 &); sleep 300", 1.0),
    ]
    print(f"{'escape':40} {'returned after ms':>18} {'over timeout ms':>16}")
    for label, command, timeout in cases:
        started = time.perf_counter()
        result = await run_bash(command, cwd=workspace, env=ENV, timeout=timeout)
        elapsed = (time.perf_counter() - started) * 1000
        over = elapsed - timeout * 1000 if result.timed_out else float("nan")
        print(f"{label:40} {elapsed:18.1f} {over:16.1f}")


async def _yes_rss(workspace: Path, seconds: float, cap: int) -> None:
    result, grown = await peak_rss_growth(
        run_bash("yes", cwd=workspace, env=ENV, timeout=seconds, max_output_bytes=cap))
    mib = 1 << 20
    print()
    print(
        f"`yes` for {seconds:.0f} s, cap {cap // 1024} KiB/stream: read "
        f"{result.stdout_bytes_dropped / mib / seconds:.0f} MiB/s, RSS growth "
        f"{grown / mib:.1f} MiB (bound: {(2 * cap) / mib + 16:.0f} MiB), "
        f"returned {result.duration_ms - seconds * 1000:.1f} ms after the timeout"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--yes-seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        await _table(args.rounds, workspace)
        await _escapes(workspace)
        await _yes_rss(workspace, args.yes_seconds, 1 << 20)


if __name__ == "__main__":
    asyncio.run(main())
