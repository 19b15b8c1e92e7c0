"""Concurrent double approvals, from threads and from processes, run a tool at most once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox import ApprovalStore, FunctionTool, ToolRunner
from tests.conftest import Processes, SideEffect

pytestmark = pytest.mark.timeout(60)

N = 8


def append_tool(effect: SideEffect, *, require_confirmation: bool = True) -> FunctionTool:
    def append(text: str) -> dict[str, Any]:
        effect.append(text)
        time.sleep(0.01)  # widen the window in which a second run could start
        return {"written": text}

    return FunctionTool(append, require_confirmation=require_confirmation)


def race(n: int, fn: Callable[[int], dict[str, Any]]) -> list[dict[str, Any]]:
    """Run fn(i) in n threads released together; return every result."""
    barrier = threading.Barrier(n)
    results: list[dict[str, Any]] = [{} for _ in range(n)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # reported below, not swallowed
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


def outcomes(results: list[dict[str, Any]]) -> list[str]:
    return sorted("ran" if "written" in r else r.get("status", "?") for r in results)


def test_threads_approving_the_same_request_on_one_runner_run_the_tool_once(
    effect: SideEffect, tmp_path: Path
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=str(tmp_path / "a.db"))
    parked = runner.call_sync("append", {"text": "a"})

    results = race(N, lambda i: runner.resume_sync(parked["confirmation_id"], True))

    assert outcomes(results) == ["ran"] + ["rejected"] * (N - 1)
    assert effect.lines == ["a"]


def test_threads_approving_the_same_request_on_an_in_memory_store_run_the_tool_once(
    effect: SideEffect, store_backend: str,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = runner.call_sync("append", {"text": "a"})

    results = race(N, lambda i: runner.resume_sync(parked["confirmation_id"], True))

    assert outcomes(results) == ["ran"] + ["rejected"] * (N - 1)
    assert effect.lines == ["a"]


def test_separate_runners_on_one_store_file_approving_at_once_run_the_tool_once(
    shared_store: str,
    effect: SideEffect, tmp_path: Path
) -> None:
    db = shared_store
    parked = ToolRunner([append_tool(effect)], store_path=db).call_sync("append", {"text": "a"})
    runners = [ToolRunner([append_tool(effect)], store=ApprovalStore(db)) for _ in range(N)]

    results = race(N, lambda i: runners[i].resume_sync(parked["confirmation_id"], True))

    assert outcomes(results) == ["ran"] + ["rejected"] * (N - 1)
    assert effect.lines == ["a"]


def test_threads_reusing_one_call_id_run_the_tool_once(
        effect: SideEffect, make_store: Callable[..., ApprovalStore]) -> None:
    runner = ToolRunner([append_tool(effect, require_confirmation=False)], store=make_store())

    results = race(N, lambda i: runner.call_sync("append", {"text": "a"}, call_id="same"))

    assert outcomes(results).count("ran") >= 1  # a late replay returns the recorded result
    assert all(r.get("status") in (None, "running") for r in results)
    assert effect.lines == ["a"]


def test_threads_claiming_one_grant_in_the_store_get_it_once(
        make_store: Callable[..., ApprovalStore]) -> None:
    store = make_store()
    store.open_call("c1", "t", "d", {})
    rid = store.add_request(call_id="c1", tool="t", args={}, digest="d", hint="",
                            payload=None, kind="static", expires_at=None).id
    store.decide(rid, status="approved")

    claims = race(N, lambda i: {"status": "ran" if store.start("c1", "d") else "rejected"})

    assert outcomes(claims) == ["ran"] + ["rejected"] * (N - 1)
    assert [s for s, _, _ in store.journal("c1")].count("started") == 1


def test_threads_deciding_one_request_in_the_store_decide_it_once(
        make_store: Callable[..., ApprovalStore]) -> None:
    from sandbox.errors import ConfirmationStateError

    store = make_store()
    store.open_call("c1", "t", "d", {})
    rid = store.add_request(call_id="c1", tool="t", args={}, digest="d", hint="",
                            payload=None, kind="static", expires_at=None).id

    def decide(i: int) -> dict[str, Any]:
        try:
            store.decide(rid, status="approved" if i % 2 else "denied", decided_by=f"h{i}",
                         start=bool(i % 2))
        except ConfirmationStateError:
            return {"status": "rejected"}
        return {"written": i}

    results = race(N, decide)

    assert outcomes(results) == ["ran"] + ["rejected"] * (N - 1)
    journal = [s for s, _, _ in store.journal("c1")]
    assert journal in (["new", "awaiting", "approved", "started"], ["new", "awaiting", "denied"])


def test_processes_approving_the_same_request_run_the_tool_once(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    parked = ToolRunner([append_tool(effect)], store_path=db).call_sync("append", {"text": "a"})
    go = tmp_path / "go"
    procs = [processes.start("gate_process.py", db, str(effect.path), "resume",
                             parked["confirmation_id"], str(go)) for _ in range(4)]
    for proc in procs:  # every process has its runner open and waits for the signal
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == "ready"

    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        results.append(json.loads(out))

    assert outcomes(results) == ["ran", "rejected", "rejected", "rejected"]
    assert len(effect.lines) == 1
