"""What the approval gate costs: one table, every variant and store backend in the same run.

    .venv/bin/python bench/gate.py [--iterations 20000] [--file-iterations 2000]
                                   [--deferred 2000] [--rounds 10] [--store URL ...]
                                   [--pg-cluster]

Baselines, timed call by call: a direct call of the function (async, and sync), and
``anyio.to_thread.run_sync`` of the sync function (the worker-thread hop that keeps a sync
tool off the event loop, by itself).

Then, for each store backend side by side — ``memory`` (`MemoryApprovalStore`: what
`ToolRunner` uses without a store), ``SQLite :memory:`` (``ApprovalStore(":memory:")``)
and ``SQLite file`` (``ApprovalStore(path)``: WAL, in a temporary directory) — with the
audit trail off:

- ``ToolRunner.call`` on a tool without confirmation;
- ``ToolRunner.call`` with ``require_confirmation=True`` answered by ``AutoApprove``, for
  an async function, and for a sync one (which includes the worker-thread hop);
- a deferred call plus ``resume``: the round trip a human answer costs.

``--store URL`` (repeatable) adds a column for any store `open_store` opens: another
SQLite file, or ``postgresql://…`` (the ``postgres`` extra). Its runners share that one
store (their call ids differ); it should be empty or disposable. ``--pg-cluster`` starts
a throwaway PostgreSQL cluster (tests/pgcluster.py: a unix socket, ``fsync`` off) and
adds its column.

Every runner cell also shows its median as a multiple of google-adk's own
``FunctionTool.run_async`` on the same function, measured in the same run (issue 10):
the goals are ≤ 0.5x for the gated AutoApprove call through the memory store, ≤ 15x for
the deferred round trip on a SQLite file, ≤ 40x on PostgreSQL.

Samples are taken in interleaved rounds so that machine noise hits every variant alike.
"added" is a variant's median minus its direct-call baseline's median. Goals (issue 2):
≤ 30 µs added per gated call in process (the AutoApprove async row; it is the memory
backend that a runner without a store uses), ≤ 2 ms per deferred round trip.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from sandbox import (
    ApprovalStore,
    AutoApprove,
    CallbackConfirmationProvider,
    FunctionTool,
    MemoryApprovalStore,
    ToolConfirmation,
    ToolRunner,
)

GOAL_GATED_US = 30.0
GOAL_DEFERRED_US = 2000.0

BACKENDS = ("memory", "SQLite :memory:", "SQLite file")
GATED = "ToolRunner.call, AutoApprove, async fn"
DEFERRED = "deferred call + resume"
CALLBACK = "ToolRunner.call, async callback provider"
RUNNER_ROWS = (
    "ToolRunner.call, no confirmation, async fn",
    GATED,
    CALLBACK,
    "ToolRunner.call, AutoApprove, sync fn (+hop)",
    DEFERRED,
)
BASELINE_OF = {
    "ToolRunner.call, no confirmation, async fn": "direct call, async fn",
    GATED: "direct call, async fn",
    CALLBACK: "direct call, async fn",
    "ToolRunner.call, AutoApprove, sync fn (+hop)": "direct call, sync fn",
    "anyio.to_thread hop, sync fn": "direct call, sync fn",
}


async def tool_async(n: int) -> dict[str, Any]:
    return {"n": n}


def tool_sync(n: int) -> dict[str, Any]:
    return {"n": n}


Step = Callable[[int], Awaitable[object]]


#: Extra columns: label -> store URL (``--store``).
EXTRA: dict[str, str] = {}


def open_store(backend: str, directory: Path, name: str) -> ApprovalStore:
    if backend == "memory":
        return MemoryApprovalStore()
    if backend == "SQLite :memory:":
        return ApprovalStore(":memory:")
    if backend in EXTRA:
        return open_url(EXTRA[backend])
    return ApprovalStore(directory / f"{name}.db")


_OPENED: dict[str, ApprovalStore] = {}


def open_url(url: str) -> ApprovalStore:
    """One store per URL, shared by the runners of its column."""
    from sandbox.approval.store import open_store as open_any

    if url not in _OPENED:
        _OPENED[url] = open_any(url)
    return _OPENED[url]


def label_of(url: str) -> str:
    """A short column title for a store URL (no credentials)."""
    if "://" in url:
        scheme, rest = url.split("://", 1)
        host = rest.rsplit("@", 1)[-1].split("/", 1)[0] or "socket"
        return f"{scheme.split('+')[0]} {host}"[:26]
    return f"--store {Path(url).name}"[:26]


def is_postgres(backend: str) -> bool:
    return EXTRA.get(backend, "").startswith(("postgresql:", "postgres:"))


ADK = "google-adk FunctionTool.run_async, async fn"
#: Goals against ADK's own ungated call, measured in the same run (issue 10).
GOAL_GATED_RATIO = 0.5
GOAL_DEFERRED_RATIO = 15.0
GOAL_POSTGRES_RATIO = 40.0


async def adk_anchor() -> Step | None:
    """google-adk's own `FunctionTool.run_async` on the same async function, with no
    confirmation, and a real ADK `ToolContext` (one per call, as ADK's flow makes)."""
    try:
        from google.adk.agents import LlmAgent
        from google.adk.agents.invocation_context import InvocationContext
        from google.adk.sessions import InMemorySessionService
        from google.adk.tools import FunctionTool as AdkFunctionTool
        from google.adk.tools.tool_context import ToolContext as AdkToolContext
    except ImportError:
        return None
    service = InMemorySessionService()
    session = await service.create_session(app_name="bench", user_id="u")
    invocation = InvocationContext(session_service=service, invocation_id="inv",
                                   agent=LlmAgent(name="bench"), session=session)
    tool = AdkFunctionTool(tool_async)

    async def adk_call(i: int) -> object:
        context = AdkToolContext(invocation, function_call_id=f"c{i}")
        result = await tool.run_async(args={"n": i}, tool_context=context)
        assert result == {"n": i}, result
        return result

    return adk_call


def baselines() -> dict[str, Step]:
    async def direct_async(i: int) -> object:
        return await tool_async(n=i)

    async def direct_sync(i: int) -> object:
        return tool_sync(n=i)

    async def thread_hop(i: int) -> object:
        return await anyio.to_thread.run_sync(lambda: tool_sync(n=i))

    return {
        "direct call, async fn": direct_async,
        "direct call, sync fn": direct_sync,
        "anyio.to_thread hop, sync fn": thread_hop,
    }


def runner_steps(backend: str, directory: Path) -> dict[str, Step]:
    tag = backend.replace(" ", "-").replace(":", "")
    gated = ToolRunner(
        [
            FunctionTool(tool_async, name="gated_async", require_confirmation=True),
            FunctionTool(tool_sync, name="gated_sync", require_confirmation=True),
            FunctionTool(tool_async, name="plain_async"),
        ],
        provider=AutoApprove(),
        store=open_store(backend, directory, f"gated-{tag}"),
    )
    deferred = ToolRunner(
        [FunctionTool(tool_async, name="gated_async", require_confirmation=True)],
        store=open_store(backend, directory, f"deferred-{tag}"),
    )
    approve = ToolConfirmation(confirmed=True)

    async def answer(request: object) -> bool:
        return True

    # The general path: a provider whose answer depends on the request, so the request
    # model is built, handed over and its answer normalised (AutoApprove skips that).
    asking = ToolRunner(
        [FunctionTool(tool_async, name="gated_async", require_confirmation=True)],
        provider=CallbackConfirmationProvider(answer, timeout=None),
        store=open_store(backend, directory, f"callback-{tag}"),
    )

    async def via_callback(i: int) -> object:
        return await asking.call("gated_async", {"n": i})

    async def plain(i: int) -> object:
        return await gated.call("plain_async", {"n": i})

    async def gated_async(i: int) -> object:
        return await gated.call("gated_async", {"n": i})

    async def gated_sync(i: int) -> object:
        return await gated.call("gated_sync", {"n": i})

    async def round_trip(i: int) -> object:
        parked = await deferred.call("gated_async", {"n": i})
        result = await deferred.resume(parked["confirmation_id"], approve)
        assert result == {"n": i}, result
        return result

    steps = (plain, gated_async, via_callback, gated_sync, round_trip)
    return {f"{row} | {backend}": step for row, step in zip(RUNNER_ROWS, steps, strict=True)}


async def measure(steps: dict[str, Step], counts: dict[str, int],
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
            out = samples[name]
            for _ in range(max(1, counts[name] // rounds)):
                counter += 1
                t0 = clock()
                await step(counter)
                out.append((clock() - t0) / 1000)
    return samples


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def verdict(value: float, limit: float) -> str:
    return "PASS" if value <= limit else "MISS"


def report(samples: dict[str, list[float]], load: tuple[float, float, float],
           backends: tuple[str, ...]) -> None:
    medians = {name: statistics.median(v) for name, v in samples.items()}
    adk = medians.get(ADK)

    def added(name: str, row: str) -> float | None:
        base = BASELINE_OF.get(row)
        return medians[name] - medians[base] if base else None

    def times_adk(value: float) -> str:
        return f"{value / adk:6.2f}x" if adk else "      -"

    print(f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          "(before the run)")
    print("µs per call: median, p90, added = median minus the direct-call median, and "
          "the median as a multiple of google-adk's FunctionTool.run_async (x ADK)\n")
    header = f"{'baseline':<46} {'n':>6} {'median':>8} {'p90':>8} {'added':>8} {'x ADK':>7}"
    print(header)
    print("-" * len(header))
    for name in [*baselines(), *([ADK] if ADK in samples else [])]:
        extra = added(name, name)
        print(f"{name:<46} {len(samples[name]):>6} {medians[name]:8.1f} "
              f"{p90(samples[name]):8.1f} {'' if extra is None else f'{extra:8.1f}':>8} "
              f"{times_adk(medians[name])}")
    print()
    cell = 34
    header = f"{'variant':<46}" + "".join(f" {b:>{cell}}" for b in backends)
    sub = f"{'':<46}" + f" {'median    p90   added   x ADK':>{cell}}" * len(backends)
    print(header)
    print(sub)
    print("-" * len(header))
    for row in RUNNER_ROWS:
        cells = []
        for backend in backends:
            name = f"{row} | {backend}"
            extra = added(name, row)
            cells.append(f"{medians[name]:8.1f} {p90(samples[name]):7.1f} "
                         f"{'' if extra is None else f'{extra:7.1f}':>7} "
                         f"{times_adk(medians[name])}")
        print(f"{row:<46}" + "".join(f" {c:>{cell}}" for c in cells))
    print()
    if adk is not None:
        print(f"against {ADK}: median {adk:.1f} µs, p90 {p90(samples[ADK]):.1f} µs")
        goals = [("gated AutoApprove call, memory store", f"{GATED} | memory",
                  GOAL_GATED_RATIO),
                 ("deferred round trip, SQLite file", f"{DEFERRED} | SQLite file",
                  GOAL_DEFERRED_RATIO)]
        goals += [(f"deferred round trip, {b}", f"{DEFERRED} | {b}", GOAL_POSTGRES_RATIO)
                  for b in backends if is_postgres(b)]
        for label, name, goal in goals:
            value = medians[name]
            ratio = value / adk
            print(f"  {label:<40} {value:8.1f} µs = {ratio:5.2f}x ADK  <= {goal:g}x: "
                  f"{verdict(ratio, goal)}")
        print()
    else:
        print("google-adk is not installed (pip install 'sandbox[adk]'): no ADK anchor\n")
    print("goals of issue 2 (absolute)")
    for backend in backends:
        gated = added(f"{GATED} | {backend}", GATED)
        assert gated is not None
        trip = medians[f"{DEFERRED} | {backend}"]
        note = "  ← a ToolRunner without a store" if backend == "memory" else ""
        print(f"  {backend:<26} gated call added {gated:7.1f} µs ≤ {GOAL_GATED_US:g}: "
              f"{verdict(gated, GOAL_GATED_US)}   deferred round trip {trip:7.1f} µs ≤ "
              f"{GOAL_DEFERRED_US:g}: {verdict(trip, GOAL_DEFERRED_US)}{note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=20_000,
                        help="calls per in-process variant (default 20000)")
    parser.add_argument("--file-iterations", type=int, default=2_000,
                        help="calls per SQLite-file variant (default 2000)")
    parser.add_argument("--deferred", type=int, default=2_000,
                        help="deferred round trips per backend (default 2000)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds")
    parser.add_argument("--store", action="append", default=[], metavar="URL",
                        help="add a column for this store (a SQLite path, or postgresql://…);"
                             " repeatable. Use an empty or disposable store")
    parser.add_argument("--pg-cluster", action="store_true",
                        help="start a throwaway PostgreSQL cluster (tests/pgcluster.py: unix "
                             "socket, fsync off) and add a column for it")
    args = parser.parse_args()
    cluster = None
    if args.pg_cluster:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.pgcluster import Cluster

        cluster = Cluster().start()
        args.store.append(cluster.fresh_url())
    try:
        run(args)
    finally:
        if cluster is not None:
            cluster.destroy()


def run(args: argparse.Namespace) -> None:
    for url in args.store:
        EXTRA[label_of(url)] = url
    backends = (*BACKENDS, *EXTRA)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        steps = baselines()
        anchor = anyio.run(adk_anchor)
        if anchor is not None:
            steps[ADK] = anchor
        counts = {name: args.iterations for name in steps}
        for backend in backends:
            for name, step in runner_steps(backend, Path(tmp)).items():
                steps[name] = step
                counts[name] = (args.deferred if name.startswith(DEFERRED)
                                else args.iterations if backend in ("memory", "SQLite :memory:")
                                else args.file_iterations)
        samples = anyio.run(measure, steps, counts, args.rounds)
    report(samples, load, backends)


if __name__ == "__main__":
    main()
