"""Where the gate's store steps run: a memory store's inline; a SQLite file's inline only
when that cannot wait (its write lock is free and no audit sink may wait), else on the
store's worker thread, so that waiting for another process's lock never stalls the
event loop; and a call still runs exactly once through that thread."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import (
    ApprovalStore,
    AutoApprove,
    FunctionTool,
    MemoryApprovalStore,
    ToolConfirmation,
    ToolRunner,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

HOLD_SECONDS = 1.5

_LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("ROLLBACK")
"""


def write(path: str) -> dict[str, Any]:
    return {"written": path, "thread": threading.current_thread().name}


async def test_a_lock_held_by_another_process_does_not_stall_the_event_loop(
        tmp_path: Path) -> None:
    path = tmp_path / "approvals.db"
    runner = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                        store=ApprovalStore(path))
    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(path), str(HOLD_SECONDS)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await anyio.sleep(0.05)
                ticks += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            with anyio.fail_after(30):
                parked = await runner.call("write", {"path": "a"})
            tg.cancel_scope.cancel()
    finally:
        locker.wait(timeout=30)
    assert parked["status"] == "awaiting_confirmation"
    # The call waited for the other process's write lock; the loop went on meanwhile.
    assert ticks >= 10, ticks
    result = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))
    assert result["written"] == "a"
    assert [s for s, _, _ in runner.store.journal(parked["call_id"])] == [
        "new", "awaiting", "approved", "started", "done"]


async def test_a_memory_store_is_used_without_a_worker_thread(tmp_path: Path) -> None:
    seen: list[str] = []

    class Recording(MemoryApprovalStore):
        def open_call(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(threading.current_thread().name)
            return super().open_call(*args, **kwargs)

    runner = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                        provider=AutoApprove(), store=Recording())
    result = await runner.call("write", {"path": "a"})
    assert result["written"] == "a"
    assert seen == [threading.current_thread().name]


async def test_many_concurrent_resumes_through_the_worker_thread_run_the_call_once(
        tmp_path: Path) -> None:
    ran: list[str] = []

    async def once(path: str) -> dict[str, Any]:
        ran.append(path)
        return {"written": path}

    runner = ToolRunner([FunctionTool(once, require_confirmation=True)],
                        store=ApprovalStore(tmp_path / "approvals.db"))
    parked = await runner.call("once", {"path": "a"})
    results: list[dict[str, Any]] = []

    async def answer() -> None:
        results.append(await runner.resume(parked["confirmation_id"],
                                           ToolConfirmation(confirmed=True)))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(answer)
    assert ran == ["a"]
    assert sum(1 for r in results if r == {"written": "a"}) == 1
    assert all(r["status"] == "rejected" for r in results if r != {"written": "a"})


async def test_audit_events_written_on_the_worker_thread_keep_the_callers_context(
        tmp_path: Path) -> None:
    import structlog
    from structlog.contextvars import bind_contextvars, merge_contextvars, unbind_contextvars

    runner = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                        provider=AutoApprove(), store=ApprovalStore(tmp_path / "a.db"))
    bind_contextvars(request_id="req-42")
    try:
        with structlog.testing.capture_logs(processors=[merge_contextvars]) as logs:
            result = await runner.call("write", {"path": "a"})
    finally:
        unbind_contextvars("request_id")
    assert result["written"] == "a"
    assert [e["event"] for e in logs] == ["tool.requested", "tool.decided", "tool.started",
                                          "tool.finished"]
    assert {e.get("request_id") for e in logs} == {"req-42"}


async def test_a_sqlite_step_whose_lock_is_free_runs_inline_and_leaves_the_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import structlog

    # No audit sink (another test may have configured structlog): with one, every step
    # goes through the worker thread, since a sink may wait on a file lock.
    monkeypatch.setattr(structlog, "is_configured", lambda: False)
    seen: list[str] = []

    class Recording(type(ApprovalStore(tmp_path / "probe.db"))):  # type: ignore[misc]
        def open_call(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(threading.current_thread().name)
            return super().open_call(*args, **kwargs)

    store = Recording(tmp_path / "approvals.db", busy_timeout=7.0)
    runner = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                        store=store)
    parked = await runner.call("write", {"path": "a"})
    assert seen == [threading.current_thread().name]  # no thread hop: nobody else writes
    result = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))
    assert result["written"] == "a"
    assert [s for s, _, _ in store.journal(parked["call_id"])] == [
        "new", "awaiting", "approved", "started", "done"]
    # The step's own settings are put back: a later wait still waits busy_timeout, and
    # the worker thread's commits still checkpoint the log.
    assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] == 7000
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 10_000
    assert not store._db.in_transaction


async def test_with_an_audit_sink_every_sqlite_step_goes_through_the_worker_thread(
        tmp_path: Path) -> None:
    seen: list[str] = []

    class Recording(type(ApprovalStore(tmp_path / "probe.db"))):  # type: ignore[misc]
        def open_call(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(threading.current_thread().name)
            return super().open_call(*args, **kwargs)

    runner = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                        provider=AutoApprove(), store=Recording(tmp_path / "approvals.db"),
                        audit_path=str(tmp_path / "audit.jsonl"))
    assert (await runner.call("write", {"path": "a"}))["written"] == "a"
    assert seen == ["sandbox-store"]


def test_run_now_sends_every_few_hundredth_step_to_the_worker_thread(tmp_path: Path) -> None:
    from sandbox.approval.store.sqlite import _NOW_PER_CHECKPOINT_CHANCE

    store = ApprovalStore(tmp_path / "approvals.db")
    declined = [i for i in range(1, 2 * _NOW_PER_CHECKPOINT_CHANCE + 1)
                if not store.run_now(lambda: None)[0]]
    assert declined == [_NOW_PER_CHECKPOINT_CHANCE, 2 * _NOW_PER_CHECKPOINT_CHANCE]


def test_run_now_declines_while_another_process_writes_and_changes_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "approvals.db"
    store = ApprovalStore(path)
    locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(path), "1.0"],
                              stdout=subprocess.PIPE, text=True)
    ran: list[int] = []
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        done, _ = store.run_now(lambda: ran.append(1))
    finally:
        locker.wait(timeout=30)
    assert (done, ran) == (False, [])
    assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
    assert not store._db.in_transaction


_WORKER = """
import sys
import anyio
from sandbox import ApprovalStore, AutoApprove, FunctionTool, ToolConfirmation, ToolRunner

path, out, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def write(i: int) -> dict:
    with open(out, "a") as fh:
        fh.write(f"{tag}-{i}\\n")
    return {"i": i}


async def main() -> None:
    store = ApprovalStore(path)
    auto = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                      provider=AutoApprove(), store=store)
    asked = ToolRunner([FunctionTool(write, require_confirmation=True, run_in_thread=False)],
                       store=store)
    print("ready", flush=True)
    sys.stdin.readline()  # every worker starts at once
    for i in range(n):
        if i % 2:
            assert await auto.call("write", {"i": i}, call_id=f"{tag}-{i}") == {"i": i}
        else:
            parked = await asked.call("write", {"i": i}, call_id=f"{tag}-{i}")
            result = await asked.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))
            assert result == {"i": i}, result
    print("ok", flush=True)

anyio.run(main)
"""


def test_processes_writing_one_sqlite_file_at_once_run_every_call_once(tmp_path: Path) -> None:
    # Steps run inline while the write lock is free and on the worker thread while
    # another process holds it: under contention nothing fails, waits forever or runs twice.
    path, out, n = tmp_path / "approvals.db", tmp_path / "ran.txt", 150
    ApprovalStore(path).close()
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(path), str(out), f"p{k}",
                                 str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for k in range(3)]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        outputs = [w.communicate(timeout=50) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert [(w.returncode, o.strip()) for w, (o, _) in zip(workers, outputs, strict=True)] == [
        (0, "ok")] * 3, [e[-2000:] for _, e in outputs]
    ran = out.read_text().split()
    assert sorted(ran) == sorted(f"p{k}-{i}" for k in range(3) for i in range(n))
    store = ApprovalStore(path)
    for k in range(3):
        for i in range(n):
            assert [s for s, _, _ in store.journal(f"p{k}-{i}")] == [
                "new", "awaiting", "approved", "started", "done"]
