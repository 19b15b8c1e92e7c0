"""Several calls from one model turn wait at once; each is answered on its own, in any
order, from any channel (web API, CLI, another process's store, a resume)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from sandbox import ApprovalStore, FunctionTool, ToolRunner
from sandbox.approval.channels.queue import QueueConfirmationProvider
from sandbox.approval.channels.web.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]
TOKEN = "p" * 32


async def wait_for_pending(store: ApprovalStore, n: int) -> dict[str, str]:
    """database name → confirmation id, once `n` requests are pending."""
    with anyio.fail_after(10):
        while True:
            pending = await anyio.to_thread.run_sync(store.pending)
            if len(pending) >= n:
                return {r.args["database"]: r.id for r in pending}
            await anyio.sleep(0.05)


async def test_parallel_requests_are_answered_independently_from_every_channel(
    shared_store: str,
        tmp_path: Path) -> None:
    db = shared_store
    ran: list[str] = []

    def wipe(database: str) -> dict[str, Any]:
        ran.append(database)
        return {"wiped": database}

    provider = QueueConfirmationProvider(str(db), timeout=20, poll_interval=0.05)
    # Edited arguments are checked again: "scratch" needs no confirmation, so it runs.
    runner = ToolRunner([FunctionTool(wipe, require_confirmation=lambda database:
                                      database != "scratch")],
                        provider=provider, store_path=str(db))
    names = ["web-approve", "web-deny", "cli-approve", "cli-deny", "store-edit"]
    results: dict[str, dict[str, Any]] = {}

    async def call(name: str) -> None:
        results[name] = await runner.call("wipe", {"database": name}, call_id=f"call-{name}")

    observer = ApprovalStore(db)
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(call, name)
        ids = await wait_for_pending(observer, len(names))

        # Answered in reverse order of asking, one channel after another.
        observer.submit_answer(ids["store-edit"], {"outcome": "edit",
                                                   "args": {"database": "scratch"}},
                               decided_by="carol", channel="script")
        for name, verb in (("cli-deny", ["deny", "--reason", "not today"]),
                           ("cli-approve", ["approve"])):
            proc = await anyio.run_process(
                [sys.executable, "-m", "sandbox", "approvals", verb[0], ids[name], *verb[1:],
                 "--store", str(db), "--json"])
            assert json.loads(proc.stdout)["ok"]

        def web() -> None:
            with TestClient(create_app(observer, token=TOKEN),
                            base_url="http://127.0.0.1") as client:
                auth = {"Authorization": f"Bearer {TOKEN}", "X-Sandbox-User": "dave"}
                for name, body in (("web-deny", {"outcome": "deny", "reason": "prod"}),
                                   ("web-approve", {"outcome": "approve"})):
                    response = client.post(f"/api/requests/{ids[name]}/answer", json=body,
                                           headers=auth)
                    assert response.status_code == 200, response.text
        await anyio.to_thread.run_sync(web)

    assert results["web-approve"] == {"wiped": "web-approve"}
    assert results["web-deny"]["status"] == "denied" and results["web-deny"]["reason"] == "prod"
    assert results["cli-approve"] == {"wiped": "cli-approve"}
    assert results["cli-deny"]["reason"] == "not today"
    assert results["store-edit"] == {"wiped": "scratch"}
    assert sorted(ran) == ["cli-approve", "scratch", "web-approve"]
    channels = {name: observer.request_decision(ids[name]) for name in names}
    assert {n: d["channel"] for n, d in channels.items() if d} == {
        "web-approve": "web", "web-deny": "web", "cli-approve": "cli", "cli-deny": "cli",
        "store-edit": "script"}
    assert channels["web-approve"]["decided_by"] == "dave (web api)"  # type: ignore[index]


async def test_deferred_parallel_calls_are_applied_in_any_order(shared_store: str, tmp_path: Path) -> None:
    db = shared_store
    ran: list[str] = []
    runner = ToolRunner([FunctionTool(lambda database: ran.append(database) or {"ok": database},
                                      name="wipe", require_confirmation=True)],
                        store_path=str(db))
    pending: dict[str, dict[str, Any]] = {}

    async def call(name: str) -> None:
        pending[name] = await runner.call("wipe", {"database": name})

    async with anyio.create_task_group() as tg:
        for name in ("a", "b", "c", "d"):
            tg.start_soon(call, name)
    # Answer c, then a; apply; then d (deny), b; each resume applies exactly its own.
    assert await runner.resume(pending["c"]["confirmation_id"], True) == {"ok": "c"}
    assert await runner.resume(pending["a"]["confirmation_id"], True) == {"ok": "a"}
    denied = await runner.resume(pending["d"]["confirmation_id"], False)
    assert denied["status"] == "denied"
    assert await runner.resume(pending["b"]["confirmation_id"], True) == {"ok": "b"}
    assert ran == ["c", "a", "b"]
