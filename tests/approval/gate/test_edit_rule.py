"""One rule for edits on every channel: a human who edits the arguments while approving
approves the edited call. It is validated against the tool's schema, checked against the
policy's hard refusals (a blocked command stays blocked), and runs once, without a
second question.

The gate applies the rule (`sandbox.approval.gate.grants`); these tests drive it through each
channel that can edit: the web page's API (a real `sandbox approvals serve` process),
the approvals CLI (a real process), and the MCP server answered from the CLI. The
console is driven through a pseudo-terminal in tests/approval/channels/test_console.py, ADK in
tests/integrations/test_adk_integration.py, the runner in tests/approval/gate/test_gate.py, and Pydantic AI's
``ToolApproved(override_args)`` in tests/integrations/test_pydantic_ai.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import ApprovalStore, BashToolPolicy, ExecuteBashTool, FunctionTool, ToolRunner
from tests.approval.channels.test_web_api import Served, served, store_path  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def runners(store_path: Path, tmp_path: Path, ran: list[str]  # noqa: F811
            ) -> Iterator[ToolRunner]:
    def write(path: str, content: str) -> dict[str, Any]:
        """Write a file in the project."""
        ran.append(f"{path}={content}")
        return {"written": path}

    (tmp_path / "work").mkdir()
    bash = ExecuteBashTool(workspace=tmp_path / "work", policy=BashToolPolicy(
        allowed_command_prefixes=("echo", "ls"), blocked_operators=(";", "|", "&&")))
    runner = ToolRunner([FunctionTool(write, require_confirmation=True), bash],
                        store_path=str(store_path))
    yield runner
    runner.store.close()


def park(runner: ToolRunner, name: str, args: dict[str, Any]) -> str:
    result = anyio.run(runner.call, name, args)
    assert result["status"] == "awaiting_confirmation", result
    return str(result["confirmation_id"])


def post_answer(served: Served, cid: str, body: dict[str, Any]) -> int:  # noqa: F811
    async def go() -> int:
        async with served.client() as client:
            r = await client.post(f"/api/requests/{cid}/answer", json=body)
            return r.status_code
    return anyio.run(go)


def test_web_edit_runs_the_edited_call_once_without_asking_again(
        served: Served, runners: ToolRunner, ran: list[str]) -> None:  # noqa: F811
    cid = park(runners, "write", {"path": "a.txt", "content": "old"})

    status = post_answer(served, cid, {"outcome": "edit",
                                       "args": {"path": "a.txt", "content": "new"}})
    results = anyio.run(runners.apply_answers)

    assert status == 200
    assert results[cid] == {"written": "a.txt"}
    assert ran == ["a.txt=new"]
    assert runners.store.pending() == []
    assert runners.store.get_request(cid).status == "edited"


def test_web_edit_to_a_blocked_command_stays_blocked(
        served: Served, runners: ToolRunner, tmp_path: Path) -> None:  # noqa: F811
    cid = park(runners, "execute_bash", {"command": "echo hi"})

    status = post_answer(served, cid, {"outcome": "edit", "command": "echo hi | sh"})
    results = anyio.run(runners.apply_answers)

    assert status == 200
    assert results[cid]["status"] == "blocked"
    assert runners.store.pending() == []


def test_web_edit_with_invalid_arguments_is_refused_and_nothing_runs(
        served: Served, runners: ToolRunner, ran: list[str]) -> None:  # noqa: F811
    cid = park(runners, "write", {"path": "a.txt", "content": "old"})

    post_answer(served, cid, {"outcome": "edit", "args": {"path": "a.txt"}})
    results = anyio.run(runners.apply_answers)

    assert results[cid]["status"] == "rejected" and "content" in results[cid]["error"]
    assert ran == []


def cli(store: Path, *args: str) -> int:
    import subprocess

    return subprocess.run([sys.executable, "-m", "sandbox", "approvals", *args,
                           "--store", str(store)], capture_output=True, text=True,
                          timeout=30).returncode


def test_cli_edit_of_a_bash_command_runs_it_once(
        runners: ToolRunner, store_path: Path, tmp_path: Path) -> None:  # noqa: F811
    cid = park(runners, "execute_bash", {"command": "echo one"})

    assert cli(store_path, "edit", cid, "--command", "echo two") == 0
    results = anyio.run(runners.apply_answers)

    assert results[cid]["stdout"] == "two\n" and results[cid]["returncode"] == 0
    assert runners.store.pending() == []


def test_cli_edit_to_a_blocked_command_stays_blocked(
        runners: ToolRunner, store_path: Path) -> None:  # noqa: F811
    cid = park(runners, "execute_bash", {"command": "echo one"})

    assert cli(store_path, "edit", cid, "--command", "echo one; id") == 0
    results = anyio.run(runners.apply_answers)

    assert results[cid]["status"] == "blocked"


# -- MCP: a call waiting in the queue, edited from the approvals CLI ---------------------


@pytest.mark.anyio
async def test_mcp_queue_edit_runs_the_edited_call_once(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from tests.integrations.test_mcp_server import Server, outcome, wait_for_pending

    db = tmp_path / "approvals.db"
    server = Server(tmp_path, "--approvals", "queue", "--store", str(db), "--no-elicitation")
    results: list[Any] = []
    async with server.client(None) as client:

        async def call() -> None:
            results.append(await client.call_tool("wipe", {"target": "prod"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            [request] = await wait_for_pending(ApprovalStore(db))
            edited = await anyio.run_process(
                [sys.executable, "-m", "sandbox", "approvals", "edit", request.id,
                 "--args", '{"target": "staging"}', "--store", str(db)], check=False)
            assert edited.returncode == 0, edited.stderr
    assert outcome(results[0]) == {"wiped": "staging"}
    assert server.lines() == ["wiped staging"]
    assert ApprovalStore(db).pending() == []


@pytest.mark.anyio
async def test_mcp_queue_edit_to_a_blocked_command_stays_blocked(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from tests.integrations.test_mcp_server import bash_server, outcome, wait_for_pending

    db = tmp_path / "approvals.db"
    server = bash_server(tmp_path, "--approvals", "queue", "--store", str(db),
                         "--no-elicitation")
    results: list[Any] = []
    async with server.client(None) as client:

        async def call() -> None:
            results.append(await client.call_tool(
                "execute_bash", {"command": "echo hi >> side.log"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            [request] = await wait_for_pending(ApprovalStore(db))
            edited = await anyio.run_process(
                [sys.executable, "-m", "sandbox", "approvals", "edit", request.id,
                 "--command", "echo hi >> side.log; echo again >> side.log",
                 "--store", str(db)], check=False)
            assert edited.returncode == 0, edited.stderr
    assert outcome(results[0])["status"] == "blocked"
    assert server.bash_lines() == []
