"""What a human grants covers that call and no other: an exact rule is not a command with a redirection added, a session's rule or request is not another session's, and the human sees the payload the tool asks about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    AutoDeny,
    BashToolPolicy,
    CallbackConfirmationProvider,
    Decision,
    ExecuteBashTool,
    ToolRunner,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class Human:
    """Scripted answers; records what it was asked. Unscripted questions are denied."""

    def __init__(self, *answers: Decision) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self, request: Any) -> Decision:
        self.asked.append(request.args["command"])
        return self.answers.pop(0) if self.answers else Decision.deny("not scripted")


def _bash_runner(workspace: Path, human: Human) -> ToolRunner:
    policy = BashToolPolicy(allowed_command_prefixes=("echo", "cat"))
    tool = ExecuteBashTool(workspace=workspace, policy=policy)
    return ToolRunner([tool], provider=CallbackConfirmationProvider(human), session_id="s1")


async def test_exact_rule_does_not_approve_the_command_with_a_file_redirection(
        tmp_path: Path) -> None:
    """A session rule for exactly `echo hi` must not approve `echo hi > victim`: the
    redirection truncates a file the human never saw."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    human = Human(Decision.approve(scope="session"))
    runner = _bash_runner(tmp_path, human)
    first = await runner.call("execute_bash", {"command": "echo hi"})
    assert first["stdout"] == "hi\n"
    second = await runner.call("execute_bash", {"command": "echo hi > victim"})
    assert second["status"] == "denied"
    assert human.asked == ["echo hi", "echo hi > victim"]
    assert victim.read_text() == "precious\n"


async def test_exact_rule_does_not_approve_the_command_reading_a_redirected_file(
        tmp_path: Path) -> None:
    """A rule for exactly `cat` (stdin closed: prints nothing) must not approve
    `cat < secret`."""
    (tmp_path / "secret").write_text("s3cret\n")
    human = Human(Decision.approve(scope="session"))
    runner = _bash_runner(tmp_path, human)
    await runner.call("execute_bash", {"command": "cat"})
    second = await runner.call("execute_bash", {"command": "cat < secret"})
    assert second["status"] == "denied"
    assert "s3cret" not in str(second)


def _two_sessions(tmp_path: Path) -> tuple[ToolRunner, ToolRunner, Path, Path]:
    alice_ws, bob_ws = tmp_path / "alice", tmp_path / "bob"
    alice_ws.mkdir()
    bob_ws.mkdir()
    db = str(tmp_path / "approvals.db")
    policy = BashToolPolicy(allowed_command_prefixes=("touch",))
    alice = ToolRunner([ExecuteBashTool(workspace=alice_ws, policy=policy)], store_path=db,
                       session_id="alice")
    bob = ToolRunner([ExecuteBashTool(workspace=bob_ws, policy=policy)], store_path=db,
                     session_id="bob", provider=AutoDeny("bob's human says no"))
    return alice, bob, alice_ws, bob_ws


async def test_another_session_cannot_apply_a_request_in_its_own_workspace(
        tmp_path: Path) -> None:
    """Alice's request (shown with Alice's workspace) must not run in Bob's runner."""
    alice, bob, alice_ws, bob_ws = _two_sessions(tmp_path)
    parked = await alice.call("execute_bash", {"command": "touch x"})
    result = await bob.resume(parked["confirmation_id"], Decision.approve())
    assert result["status"] == "rejected"
    assert list(bob_ws.iterdir()) == []
    # The request is still Alice's to answer, and runs where it was shown.
    done = await alice.resume(parked["confirmation_id"], Decision.approve())
    assert done["returncode"] == 0
    assert (alice_ws / "x").exists() and not (bob_ws / "x").exists()


async def test_session_rule_belongs_to_the_session_that_asked(tmp_path: Path) -> None:
    """Approving Alice's request 'for this session' from another runner of Alice's
    session (a process draining answers) makes a rule for Alice's session; a runner
    without a session id applies nothing of Alice's (no session id is not a wildcard)."""
    alice, bob, alice_ws, bob_ws = _two_sessions(tmp_path)
    parked = await alice.call("execute_bash", {"command": "touch x"})
    tools = [ExecuteBashTool(workspace=alice_ws, policy=BashToolPolicy(
        allowed_command_prefixes=("touch",)))]
    db = str(tmp_path / "approvals.db")
    anyone = ToolRunner(tools, store_path=db)
    refused = await anyone.resume(parked["confirmation_id"], Decision.approve(scope="session"))
    assert refused["status"] == "rejected" and anyone.rules.rules() == []
    assert not (alice_ws / "x").exists()
    drainer = ToolRunner(tools, store_path=db, session_id="alice")
    await drainer.resume(parked["confirmation_id"], Decision.approve(scope="session"))
    assert [r.session_id for r in drainer.rules.rules()] == ["alice"]
    again = await alice.call("execute_bash", {"command": "touch x"})
    assert again["returncode"] == 0
    denied = await bob.call("execute_bash", {"command": "touch x"})
    assert denied["status"] == "denied"
    assert not (bob_ws / "x").exists()


def test_the_payload_a_tool_asks_about_is_shown_to_the_human() -> None:
    import datetime

    from sandbox.approval.display import shown
    from sandbox.approval.models import ConfirmationRequest

    request = ConfirmationRequest(
        id="cf_1", call_id="c1", tool="transfer", args={"amount": 500}, digest="d",
        hint="Transfer?", payload={"to": "acct\r<script>"}, kind="tool",
        created_at=datetime.datetime.now(datetime.UTC))
    details = shown(request)["details"]
    assert "payload" in details and "\r" not in str(details) and "acct" in str(details)
