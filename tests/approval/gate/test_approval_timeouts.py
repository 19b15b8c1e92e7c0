"""An expired request cannot be approved by any channel, and is reported as timed out —
never as denied or approved — in the result, the store and the audit log."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from sandbox import ApprovalStore, Decision, FunctionTool, ToolConfirmation, ToolRunner
from sandbox.approval.channels.queue import QueueConfirmationProvider
from sandbox.approval.channels.web.app import create_app
from sandbox.errors import ConfirmationTimedOutError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]
TOKEN = "t" * 32
TTL = 0.3


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    return {"store": tmp_path / "approvals.db", "audit": tmp_path / "audit.jsonl"}


def make_runner(paths: dict[str, Path], ran: list[str], **kw: Any) -> ToolRunner:
    """A runner on the file store, or on ``store=`` (a test running on every backend)."""
    def wipe(database: str) -> dict[str, Any]:
        ran.append(database)
        return {"wiped": database}
    if "store" not in kw:
        kw["store_path"] = str(paths["store"])
    return ToolRunner([FunctionTool(wipe, require_confirmation=True)],
                      audit_path=str(paths["audit"]), approval_ttl=TTL, **kw)


def on_its_own(store: ApprovalStore) -> ApprovalStore | str:
    """What a queue provider waits on: a store file is opened again (its own connection,
    as another process would); an in-memory store is shared."""
    return str(store.path) if store.path is not None else store


def events(paths: dict[str, Path], call_id: str) -> list[dict[str, Any]]:
    lines = paths["audit"].read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("call_id") == call_id]


def assert_timed_out_everywhere(paths: dict[str, Path], runner: ToolRunner,
                                result: dict[str, Any], call_id: str, ran: list[str]) -> None:
    assert result["status"] == "timed_out", result
    assert "timed out" in result["error"]
    assert "denied" not in result["error"] and "approved" not in result["error"]
    assert ran == []
    assert runner.store.get_call(call_id).state == "timed_out"
    evs = events(paths, call_id)
    assert any(e["event"] == "tool.timed_out" or e.get("decision") == "timed_out" for e in evs)
    assert not any(e.get("decision") in ("approved", "denied") for e in evs)
    assert not any(e["event"] in ("tool.started", "tool.finished") for e in evs)


async def deferred(paths: dict[str, Path], ran: list[str],
                   **kw: Any) -> tuple[ToolRunner, dict[str, Any]]:
    runner = make_runner(paths, ran, **kw)
    pending = await runner.call("wipe", {"database": "orders"}, call_id="c1")
    assert pending["status"] == "awaiting_confirmation"
    await anyio.sleep(TTL + 0.2)
    return runner, pending


async def test_resume_after_expiry_is_timed_out(
        paths: dict[str, Path], make_store: Callable[..., ApprovalStore]) -> None:
    ran: list[str] = []
    runner, pending = await deferred(paths, ran, store=make_store())
    result = await runner.resume(pending["confirmation_id"], ToolConfirmation(confirmed=True))
    assert_timed_out_everywhere(paths, runner, result, "c1", ran)
    assert runner.store.get_request(pending["confirmation_id"]).status == "timed_out"
    # Asking again, with any answer, keeps saying timed out; replaying the call id too.
    again = await runner.resume(pending["confirmation_id"], Decision.deny("late"))
    assert again["status"] == "timed_out"
    replay = await runner.call("wipe", {"database": "orders"}, call_id="c1")
    assert replay["status"] == "timed_out" and replay["replayed"]


async def test_the_web_api_refuses_an_expired_request_as_timed_out(
        paths: dict[str, Path]) -> None:
    ran: list[str] = []
    runner, pending = await deferred(paths, ran)
    store = ApprovalStore(paths["store"])

    def answer() -> Any:
        with TestClient(create_app(store, token=TOKEN), base_url="http://127.0.0.1") as client:
            return client.post(f"/api/requests/{pending['confirmation_id']}/answer",
                               json={"outcome": "approve"},
                               headers={"Authorization": f"Bearer {TOKEN}"})
    response = await anyio.to_thread.run_sync(answer)
    assert response.status_code == 410
    assert response.json()["status"] == "timed_out"
    assert store.get_request(pending["confirmation_id"]).status == "timed_out"
    assert await runner.apply_answers() == {}
    result = await runner.resume(pending["confirmation_id"], True)
    assert_timed_out_everywhere(paths, runner, result, "c1", ran)


async def test_the_cli_refuses_an_expired_request_as_timed_out(paths: dict[str, Path]) -> None:
    ran: list[str] = []
    runner, pending = await deferred(paths, ran)
    proc = await anyio.run_process(
        [sys.executable, "-m", "sandbox", "approvals", "approve", pending["confirmation_id"],
         "--store", str(paths["store"]), "--json"], check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["ok"] is False and report["status"] == "timed_out"
    assert "timed out" in report["error"]
    result = await runner.resume(pending["confirmation_id"])
    assert_timed_out_everywhere(paths, runner, result, "c1", ran)


async def test_an_answer_recorded_in_time_but_applied_after_expiry_is_timed_out(
        paths: dict[str, Path], make_store: Callable[..., ApprovalStore]) -> None:
    ran: list[str] = []
    runner = make_runner(paths, ran, store=make_store())
    pending = await runner.call("wipe", {"database": "orders"}, call_id="c1")
    runner.store.submit_answer(pending["confirmation_id"], {"outcome": "approve"},
                               decided_by="alice", channel="web")
    await anyio.sleep(TTL + 0.2)
    results = await runner.apply_answers()
    assert_timed_out_everywhere(paths, runner, results[pending["confirmation_id"]], "c1", ran)


async def test_a_waiting_provider_gives_up_when_the_request_expires(
        paths: dict[str, Path], make_store: Callable[..., ApprovalStore]) -> None:
    ran: list[str] = []
    store = make_store()
    provider = QueueConfirmationProvider(on_its_own(store), timeout=20, poll_interval=0.05,
                                         on_timeout="pending")
    runner = make_runner(paths, ran, provider=provider, store=store)
    started = time.monotonic()
    result = await runner.call("wipe", {"database": "orders"}, call_id="c1")
    assert time.monotonic() - started < 5  # ended by the request's deadline, not the wait's
    # on_timeout="pending" cannot keep an expired request alive: it is timed out.
    assert_timed_out_everywhere(paths, runner, result, "c1", ran)


async def test_a_provider_timeout_with_pending_default_keeps_the_request_answerable(
        make_store: Callable[..., ApprovalStore]) -> None:
    ran: list[str] = []
    store = make_store()
    provider = QueueConfirmationProvider(on_its_own(store), timeout=0.2, poll_interval=0.05,
                                         on_timeout="pending")
    runner = ToolRunner([FunctionTool(lambda database: ran.append(database) or {"ok": 1},
                                      name="wipe", require_confirmation=True)],
                        provider=provider, store=store)
    result = await runner.call("wipe", {"database": "orders"})
    assert result["status"] == "awaiting_confirmation"
    later = await runner.resume(result["confirmation_id"], True)
    assert later == {"ok": 1} and ran == ["orders"]


async def test_a_provider_timeout_with_deny_default_is_recorded_as_timed_out(
        paths: dict[str, Path], make_store: Callable[..., ApprovalStore]) -> None:
    ran: list[str] = []
    store = make_store()
    provider = QueueConfirmationProvider(on_its_own(store), timeout=0.2, poll_interval=0.05)
    runner = make_runner(paths, ran, provider=provider, store=store)
    result = await runner.call("wipe", {"database": "orders"}, call_id="c1")
    assert_timed_out_everywhere(paths, runner, result, "c1", ran)


def test_submitting_to_an_expired_request_records_the_timeout(paths: dict[str, Path]) -> None:
    ran: list[str] = []
    runner = make_runner(paths, ran)
    pending = anyio.run(runner.call, "wipe", {"database": "orders"})
    time.sleep(TTL + 0.2)
    with ApprovalStore(paths["store"]) as other:
        with pytest.raises(ConfirmationTimedOutError, match="timed out"):
            other.submit_answer(pending["confirmation_id"], {"outcome": "approve"})
        # Committed, not rolled back with the refusal.
        assert other.get_request(pending["confirmation_id"]).status == "timed_out"
    proc = subprocess.run([sys.executable, "-m", "sandbox", "approvals", "list", "--store",
                           str(paths["store"]), "--json"], capture_output=True, text=True,
                          timeout=30)
    assert json.loads(proc.stdout)["requests"] == []
