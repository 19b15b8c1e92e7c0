"""What the approval gate costs: one table, every variant measured in the same run.

    .venv/bin/python bench/gate.py [--iterations 20000] [--deferred 2000] [--rounds 10]

Variants, each timed call by call (median and p90, in µs):

- a direct call of the function (async, and sync) — the baseline;
- ``anyio.to_thread.run_sync`` of the sync function: the worker-thread hop that keeps a
  sync tool off the event loop, by itself;
- ``ToolRunner.call`` on a tool without confirmation, and with
  ``require_confirmation=True`` answered by ``AutoApprove`` (async function; sync
  function, which includes the worker-thread hop and is reported separately) — an
  in-memory store, audit off: the gate's own work per call;
- a deferred call plus ``resume`` on a file-backed store (WAL, in a temporary directory):
  the round trip a human answer costs, SQLite commits included.

Samples are taken in interleaved rounds so that machine noise hits every variant alike.
"added" is the variant's median minus its direct-call baseline's median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from sandbox import AutoApprove, FunctionTool, ToolConfirmation, ToolRunner

GOAL_GATED_US = 30.0
GOAL_DEFERRED_US = 2000.0


async def tool_async(n: int) -> dict[str, Any]:
    return {"n": n}


def tool_sync(n: int) -> dict[str, Any]:
    return {"n": n}


Step = Callable[[int], Awaitable[object]]


def variants(store_dir: Path) -> dict[str, Step]:
    gated = ToolRunner(
        [
            FunctionTool(tool_async, name="gated_async", require_confirmation=True),
            FunctionTool(tool_sync, name="gated_sync", require_confirmation=True),
            FunctionTool(tool_async, name="plain_async"),
        ],
        provider=AutoApprove(),
    )
    deferred = ToolRunner(
        [FunctionTool(tool_async, name="gated_async", require_confirmation=True)],
        store_path=str(store_dir / "approvals.db"),
    )
    approve = ToolConfirmation(confirmed=True)

    async def direct_async(i: int) -> object:
        return await tool_async(n=i)

    async def direct_sync(i: int) -> object:
        return tool_sync(n=i)

    async def thread_hop(i: int) -> object:
        return await anyio.to_thread.run_sync(lambda: tool_sync(n=i))

    async def runner_plain(i: int) -> object:
        return await gated.call("plain_async", {"n": i})

    async def runner_gated_async(i: int) -> object:
        return await gated.call("gated_async", {"n": i})

    async def runner_gated_sync(i: int) -> object:
        return await gated.call("gated_sync", {"n": i})

    async def deferred_round_trip(i: int) -> object:
        parked = await deferred.call("gated_async", {"n": i})
        result = await deferred.resume(parked["confirmation_id"], approve)
        assert result == {"n": i}, result
        return result

    return {
        "direct call, async fn": direct_async,
        "direct call, sync fn": direct_sync,
        "anyio.to_thread hop, sync fn": thread_hop,
        "ToolRunner.call, no confirmation, async fn": runner_plain,
        "ToolRunner.call, AutoApprove, async fn": runner_gated_async,
        "ToolRunner.call, AutoApprove, sync fn (+hop)": runner_gated_sync,
        "deferred call + resume, SQLite file": deferred_round_trip,
    }


BASELINE = {
    "ToolRunner.call, no confirmation, async fn": "direct call, async fn",
    "ToolRunner.call, AutoApprove, async fn": "direct call, async fn",
    "ToolRunner.call, AutoApprove, sync fn (+hop)": "direct call, sync fn",
    "anyio.to_thread hop, sync fn": "direct call, sync fn",
}
GOALS = {
    "ToolRunner.call, AutoApprove, async fn": ("added", GOAL_GATED_US),
    "deferred call + resume, SQLite file": ("median", GOAL_DEFERRED_US),
}


async def measure(steps: dict[str, Step], iterations: int, deferred: int,
                  rounds: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in steps}
    counter = 0
    for step in steps.values():  # warm up caches, pydantic, the thread pool
        for _ in range(200):
            counter += 1
            await step(counter)
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for name, step in steps.items():
            n = (deferred if name.startswith("deferred") else iterations) // rounds
            out = samples[name]
            for _ in range(n):
                counter += 1
                t0 = clock()
                await step(counter)
                out.append((clock() - t0) / 1000)
    return samples


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def report(samples: dict[str, list[float]]) -> None:
    medians = {name: statistics.median(v) for name, v in samples.items()}
    header = f"{'variant':<46} {'n':>6} {'median µs':>10} {'p90 µs':>9} {'added µs':>9}  goal"
    print(header)
    print("-" * len(header))
    for name, values in samples.items():
        base = BASELINE.get(name)
        added = medians[name] - medians[base] if base else None
        goal = ""
        if name in GOALS:
            what, limit = GOALS[name]
            value = added if what == "added" else medians[name]
            assert value is not None
            verdict = "PASS" if value <= limit else "MISS"
            goal = f"{what} ≤ {limit:g} µs: {verdict}"
        added_text = f"{added:9.1f}" if added is not None else f"{'':9}"
        print(f"{name:<46} {len(values):>6} {medians[name]:10.1f} {p90(values):9.1f} "
              f"{added_text}  {goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=20_000,
                        help="calls per in-process variant (default 20000)")
    parser.add_argument("--deferred", type=int, default=2_000,
                        help="deferred round trips (default 2000)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        steps = variants(Path(tmp))
        samples = anyio.run(measure, steps, args.iterations, args.deferred, args.rounds)
    report(samples)


if __name__ == "__main__":
    main()
