"""A process killed between "started" and "done" leaves its call in doubt: reported,
never silently re-run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox import ApprovalStore, AutoApprove, DuplicateCallError, FunctionTool, ToolRunner
from tests.conftest import Processes, SideEffect

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def slow_append_tool(effect: SideEffect) -> FunctionTool:
    """The same tool the child process runs: re-running it here would add a line."""

    def slow_append(text: str) -> dict[str, Any]:
        effect.append(text)
        return {"written": text}

    return FunctionTool(slow_append)


def start_hanging_call(processes: Processes, db: str, effect: SideEffect,
                       tmp_path: Path) -> subprocess.Popen[str]:
    """Run call c1 in a child; return once its side effect is done and it hangs."""
    marker = tmp_path / "started"
    proc = processes.start("gate_process.py", db, str(effect.path), "hang", "c1", "once",
                           str(marker))
    deadline = time.monotonic() + 20
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the child never reached its side effect"
        time.sleep(0.01)
    return proc


def wait_until_zombie(pid: int) -> None:
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)


def start_and_kill(processes: Processes, db: str, effect: SideEffect, tmp_path: Path,
                   *, reap: bool = True) -> subprocess.Popen[str]:
    """Run a call in a child that hangs after its side effect; SIGKILL it mid-call."""
    proc = start_hanging_call(processes, db, effect, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    if reap:
        proc.wait(10)
    return proc


async def test_a_call_killed_between_started_and_done_is_reported_in_doubt(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    start_and_kill(processes, db, effect, tmp_path)

    with ApprovalStore(db) as store:
        [rec] = store.in_doubt()
        journal = [state for state, _, _ in store.journal("c1")]

    assert (rec.call_id, rec.tool, rec.state) == ("c1", "slow_append", "in_doubt")
    assert journal == ["new", "started", "in_doubt"]
    assert len(effect.lines) == 1


async def test_a_restarted_runner_reports_the_call_in_doubt_and_never_reruns_it(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    start_and_kill(processes, db, effect, tmp_path)

    runner = ToolRunner([slow_append_tool(effect)], store_path=db)
    [rec] = await runner.in_doubt()
    again = await runner.call("slow_append", {"text": "once"}, call_id="c1")

    assert rec.call_id == "c1"
    assert again["status"] == "in_doubt" and "will not be run again" in again["error"]
    assert len(effect.lines) == 1
    assert [s for s, _, _ in runner.store.journal("c1")].count("started") == 1


async def test_a_killed_process_not_yet_reaped_by_its_parent_counts_as_dead(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    proc = start_and_kill(processes, db, effect, tmp_path, reap=False)
    wait_until_zombie(proc.pid)

    runner = ToolRunner([slow_append_tool(effect)], store_path=db)
    again = await runner.call("slow_append", {"text": "once"}, call_id="c1")

    assert again["status"] == "in_doubt"
    assert len(effect.lines) == 1


async def test_a_call_still_running_in_a_live_process_is_not_in_doubt(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    start_hanging_call(processes, db, effect, tmp_path)

    runner = ToolRunner([slow_append_tool(effect)], store_path=db)
    again = await runner.call("slow_append", {"text": "once"}, call_id="c1")

    assert await runner.in_doubt() == []
    assert again["status"] == "running"
    assert len(effect.lines) == 1


def append_tool(effect: SideEffect) -> FunctionTool:
    def append(text: str) -> dict[str, Any]:
        effect.append(text)
        return {"written": text}

    return FunctionTool(append, require_confirmation=True)


async def test_a_call_whose_process_died_before_it_started_runs_when_made_again(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    processes.run("gate_process.py", db, str(effect.path), "open", "c1", "a")

    runner = ToolRunner([append_tool(effect)], store_path=db, provider=AutoApprove())
    result = await runner.call("append", {"text": "a"}, call_id="c1")

    assert result == {"written": "a"}
    assert effect.lines == ["a"]
    assert await runner.in_doubt() == []


async def test_a_call_whose_process_died_before_it_started_keeps_its_arguments(
    shared_store: str,
    effect: SideEffect, tmp_path: Path, processes: Processes
) -> None:
    db = shared_store
    processes.run("gate_process.py", db, str(effect.path), "open", "c1", "a")

    runner = ToolRunner([append_tool(effect)], store_path=db, provider=AutoApprove())
    with pytest.raises(DuplicateCallError):
        await runner.call("append", {"text": "other"}, call_id="c1")
    assert not effect.happened
