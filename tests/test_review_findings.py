"""Security review findings: each test is one attack that used to work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox import (
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
