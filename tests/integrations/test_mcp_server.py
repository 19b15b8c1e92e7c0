"""`sandbox mcp` as a real subprocess, driven by the real `mcp` Python client over stdio.

Each test spawns ``python -m sandbox mcp ...`` serving the tools of
``tests/fixtures/mcp_tools.py`` (and ``execute_bash`` where it is available); their
side effects are lines in a log file, counted after each call. The client's
elicitation callback plays the human.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

import mcp_types as mtypes
from mcp import Client, StdioServerParameters

from sandbox import ApprovalStore
from tests.paths import REPO, TESTS

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

FIXTURES = TESTS / "fixtures"
POLICY = FIXTURES / "mcp_policy.toml"
REPO = REPO


class Human:
    """An elicitation callback that answers from a script and records every question."""

    def __init__(self, *answers: mtypes.ElicitResult | None) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []
        self.release = anyio.Event()

    async def __call__(self, context: Any, params: mtypes.ElicitRequestParams
                       ) -> mtypes.ElicitResult:
        self.asked.append(params.message)
        answer = self.answers.pop(0)
        if answer is None:  # a human who never answers
            await self.release.wait()
            return mtypes.ElicitResult(action="cancel")
        return answer


def approve() -> mtypes.ElicitResult:
    return mtypes.ElicitResult(action="accept", content={"approve": True})


def deny(reason: str) -> mtypes.ElicitResult:
    return mtypes.ElicitResult(action="accept", content={"approve": False, "reason": reason})


class Server:
    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "side-effects.log"
        self.workspace = tmp_path / "work"
        self.workspace.mkdir(exist_ok=True)
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(FIXTURES), str(REPO)]),
               "SANDBOX_TEST_LOG": str(self.log)}
        self.params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "sandbox", "mcp", "--tools", "mcp_tools:TOOLS", *args],
            env=env, cwd=str(tmp_path))

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def bash_lines(self) -> list[str]:
        side = self.workspace / "side.log"
        return side.read_text().splitlines() if side.exists() else []

    @asynccontextmanager
    async def client(self, human: Human | None = None, *, mode: str = "legacy"
                     ) -> AsyncIterator[Client]:
        async with Client(self.params, elicitation_callback=human, mode=mode,
                          read_timeout_seconds=20) as client:
            yield client


def bash_server(tmp_path: Path, *args: str) -> Server:
    server = Server(tmp_path, "--policy", str(POLICY), "--workspace", str(tmp_path / "work"),
                    *args)
    (server.workspace / "note.txt").write_text("hello from the workspace\n")
    return server


async def wait_for_pending(store: ApprovalStore) -> list[Any]:
    """Poll the store the way a web page or `sandbox approvals list` would."""
    with anyio.fail_after(10):
        pending = store.pending()
        while not pending:
            await anyio.sleep(0.05)
            pending = store.pending()
    return pending


def outcome(result: mtypes.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


# -- handshake-era client (elicitation/create while the call waits) -----------------------


async def test_tool_that_needs_no_approval_runs_without_asking(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human()
    async with server.client(human) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("read_note", {"name": "todo"})
    assert {"wipe", "read_note", "deploy"} <= names
    assert outcome(result) == {"note": "contents of todo"}
    assert not result.is_error
    assert human.asked == []
    assert server.lines() == ["read todo"]


async def test_call_blocked_by_the_tool_policy_is_never_asked_about(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human(approve())
    async with server.client(human) as client:
        result = await client.call_tool("deploy", {"env": "prod"})
    assert result.is_error
    assert outcome(result)["status"] == "blocked"
    assert human.asked == []
    assert server.lines() == []


async def test_elicitation_approval_runs_the_call_once(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human(approve())
    async with server.client(human) as client:
        result = await client.call_tool("wipe", {"target": "prod"})
    assert outcome(result) == {"wiped": "prod"}
    [question] = human.asked
    assert "wipe" in question and '"target": "prod"' in question
    assert server.lines() == ["wiped prod"]


async def test_elicitation_denial_reason_reaches_the_client(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human(deny("prod is frozen until Monday"))
    async with server.client(human) as client:
        result = await client.call_tool("wipe", {"target": "prod"})
    assert result.is_error
    assert outcome(result)["status"] == "denied"
    assert "prod is frozen until Monday" in outcome(result)["error"]
    assert server.lines() == []


async def test_elicitation_decline_with_reason_is_a_denial(tmp_path: Path) -> None:
    declined = mtypes.ElicitResult(action="decline", content={"reason": "not now"})
    server, human = Server(tmp_path), Human(declined)
    async with server.client(human) as client:
        result = await client.call_tool("wipe", {"target": "prod"})
    assert outcome(result)["status"] == "denied"
    assert "not now" in outcome(result)["error"]
    assert server.lines() == []


async def test_elicitation_cancel_runs_nothing(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human(mtypes.ElicitResult(action="cancel"))
    async with server.client(human) as client:
        result = await client.call_tool("wipe", {"target": "prod"})
    assert outcome(result)["status"] == "denied"
    assert "cancelled" in outcome(result)["error"]
    assert server.lines() == []


async def test_unanswered_elicitation_times_out_and_runs_nothing(tmp_path: Path) -> None:
    server, human = Server(tmp_path, "--approval-timeout", "1"), Human(None)
    async with server.client(human) as client:
        started = time.monotonic()
        result = await client.call_tool("wipe", {"target": "prod"})
        elapsed = time.monotonic() - started
        human.release.set()
    assert outcome(result)["status"] == "timed_out"
    assert "timed out" in outcome(result)["error"]
    assert elapsed < 10
    assert server.lines() == []


async def test_extra_form_fields_cannot_change_the_arguments(tmp_path: Path) -> None:
    # The elicitation form has no edit; a client cannot smuggle other arguments in.
    sneaky = mtypes.ElicitResult(action="accept", content={"approve": True, "env": "prod"})
    server, human = Server(tmp_path), Human(sneaky)
    async with server.client(human) as client:
        result = await client.call_tool("deploy", {"env": "staging"})
    assert outcome(result) == {"deployed": "staging"}
    assert server.lines() == ["deployed staging"]


# -- 2026-07-28 client (InputRequiredResult, answered on the retry) -----------------------


async def test_modern_client_approves_through_input_required(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human(approve())
    async with server.client(human, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("wipe", {"target": "prod"})
    assert outcome(result) == {"wiped": "prod"}
    assert len(human.asked) == 1
    assert server.lines() == ["wiped prod"]


async def test_modern_client_denial_runs_nothing(tmp_path: Path) -> None:
    server, human = Server(tmp_path), Human(deny("ask the DBA"))
    async with server.client(human, mode="auto") as client:
        result = await client.call_tool("wipe", {"target": "prod"})
    assert "ask the DBA" in outcome(result)["error"]
    assert server.lines() == []


async def test_modern_retry_replayed_or_forged_runs_nothing_twice(tmp_path: Path) -> None:
    server = Server(tmp_path)
    async with server.client(Human(), mode="auto") as client:
        first = await client.session.call_tool("wipe", {"target": "prod"},
                                               allow_input_required=True)
        assert isinstance(first, mtypes.InputRequiredResult)
        assert first.input_requests and first.request_state
        [key] = first.input_requests
        answer: mtypes.InputResponses = {key: approve()}
        done = await client.session.call_tool("wipe", {"target": "prod"},
                                              input_responses=answer,
                                              request_state=first.request_state)
        replay = await client.session.call_tool("wipe", {"target": "prod"},
                                                input_responses=answer,
                                                request_state=first.request_state)
        other_args = await client.session.call_tool("wipe", {"target": "everything"},
                                                    input_responses=answer,
                                                    request_state=first.request_state)
        forged = await client.session.call_tool("wipe", {"target": "prod"},
                                                input_responses=answer,
                                                request_state="eyJjaWQiOiJ4In0.00")
    assert outcome(done) == {"wiped": "prod"}
    assert outcome(replay)["status"] == "rejected"
    assert outcome(other_args)["status"] == "rejected"
    assert outcome(forged)["status"] == "rejected"
    assert server.lines() == ["wiped prod"]


async def test_modern_answer_after_the_timeout_is_recorded_as_timed_out(
        tmp_path: Path) -> None:
    server = Server(tmp_path, "--approval-timeout", "0.5")
    async with server.client(Human(), mode="auto") as client:
        first = await client.session.call_tool("wipe", {"target": "prod"},
                                               allow_input_required=True)
        assert isinstance(first, mtypes.InputRequiredResult) and first.input_requests
        await anyio.sleep(1)
        answers: mtypes.InputResponses = {key: approve() for key in first.input_requests}
        late = await client.session.call_tool(
            "wipe", {"target": "prod"}, request_state=first.request_state,
            input_responses=answers)
    assert outcome(late)["status"] == "timed_out"
    assert server.lines() == []


# -- clients that cannot elicit ---------------------------------------------------------


async def test_client_without_elicitation_or_provider_is_refused_at_once(
        tmp_path: Path) -> None:
    server = Server(tmp_path)
    async with server.client(None) as client:
        started = time.monotonic()
        result = await client.call_tool("wipe", {"target": "prod"})
        allowed = await client.call_tool("read_note", {"name": "todo"})
    assert time.monotonic() - started < 5
    assert outcome(result)["status"] == "refused"
    assert "does not support elicitation" in outcome(result)["error"]
    assert "--approvals queue" in outcome(result)["error"]
    assert outcome(allowed) == {"note": "contents of todo"}
    assert server.lines() == ["read todo"]


async def test_client_without_elicitation_gets_the_deny_provider(tmp_path: Path) -> None:
    server = Server(tmp_path, "--approvals", "deny")
    async with server.client(None) as client:
        result = await client.call_tool("wipe", {"target": "prod"})
    assert outcome(result)["status"] == "denied"
    assert "--approvals deny" in outcome(result)["error"]
    assert server.lines() == []


async def test_queue_waits_for_an_answer_from_the_approvals_cli(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    server = Server(tmp_path, "--approvals", "queue", "--store", str(db),
                    "--no-elicitation")
    human = Human(approve())  # supports elicitation, but --no-elicitation: never asked
    results: list[mtypes.CallToolResult] = []
    async with server.client(human) as client:

        async def call() -> None:
            results.append(await client.call_tool("wipe", {"target": "prod"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            store = ApprovalStore(db)
            [request] = await wait_for_pending(store)
            assert request.tool == "wipe" and request.args == {"target": "prod"}
            # The human answers from another process: the approvals CLI.
            answered = await anyio.run_process(
                [sys.executable, "-m", "sandbox", "approvals", "approve", request.id,
                 "--store", str(db)], check=False)
            assert answered.returncode == 0, answered.stderr
    assert outcome(results[0]) == {"wiped": "prod"}
    assert human.asked == []
    assert server.lines() == ["wiped prod"]


async def test_queue_without_store_is_a_clear_startup_error(tmp_path: Path) -> None:
    proc = await anyio.run_process(
        [sys.executable, "-m", "sandbox", "mcp", "--tools", "mcp_tools:TOOLS",
         "--approvals", "queue"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), str(REPO)])},
        check=False)
    assert proc.returncode == 2
    assert b"--approvals queue needs --store FILE" in proc.stderr


# -- execute_bash under a policy file --------------------------------------------------


async def test_bash_command_needing_no_approval_runs(tmp_path: Path) -> None:
    server, human = bash_server(tmp_path), Human()
    async with server.client(human) as client:
        assert "execute_bash" in {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("execute_bash", {"command": "cat note.txt"})
    assert outcome(result)["stdout"] == "hello from the workspace\n"
    assert outcome(result)["returncode"] == 0
    assert human.asked == []


async def test_bash_command_blocked_by_policy_is_never_asked_about(tmp_path: Path) -> None:
    server, human = bash_server(tmp_path), Human(approve())
    async with server.client(human) as client:
        result = await client.call_tool("execute_bash",
                                        {"command": "echo ran >> side.log | cat"})
    assert result.is_error
    assert outcome(result)["status"] == "blocked"
    assert "'|'" in outcome(result)["error"]
    assert human.asked == []
    assert server.bash_lines() == []


async def test_bash_command_approved_by_elicitation_runs_once(tmp_path: Path) -> None:
    server, human = bash_server(tmp_path), Human(approve())
    async with server.client(human) as client:
        result = await client.call_tool("execute_bash", {"command": "echo ran >> side.log"})
    assert outcome(result)["returncode"] == 0
    [question] = human.asked
    assert "command: echo ran >> side.log" in question
    assert server.bash_lines() == ["ran"]


async def test_bash_command_declined_with_reason_does_not_run(tmp_path: Path) -> None:
    declined = mtypes.ElicitResult(action="decline", content={"reason": "no writes today"})
    server, human = bash_server(tmp_path), Human(declined)
    async with server.client(human) as client:
        result = await client.call_tool("execute_bash", {"command": "echo ran >> side.log"})
    assert outcome(result)["status"] == "denied"
    assert "no writes today" in outcome(result)["error"]
    assert server.bash_lines() == []


async def test_bash_approval_that_never_comes_times_out(tmp_path: Path) -> None:
    server, human = bash_server(tmp_path, "--approval-timeout", "1"), Human(None)
    async with server.client(human) as client:
        result = await client.call_tool("execute_bash", {"command": "echo ran >> side.log"})
        human.release.set()
    assert outcome(result)["status"] == "timed_out"
    assert "timed out" in outcome(result)["error"]
    assert server.bash_lines() == []


async def test_bash_over_a_modern_connection(tmp_path: Path) -> None:
    server, human = bash_server(tmp_path), Human(approve(), deny("enough"))
    async with server.client(human, mode="auto") as client:
        ran = await client.call_tool("execute_bash", {"command": "echo ran >> side.log"})
        refused = await client.call_tool("execute_bash", {"command": "echo again >> side.log"})
    assert outcome(ran)["returncode"] == 0
    assert "enough" in outcome(refused)["error"]
    assert server.bash_lines() == ["ran"]
