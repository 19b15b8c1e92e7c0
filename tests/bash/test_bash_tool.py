"""ExecuteBashTool: ADK's order (command → policy → confirmation → run), ADK's result keys,
and its place behind the gate: a blocked command never reaches a human."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    AutoApprove,
    BashToolPolicy,
    CallbackConfirmationProvider,
    ConfigurationError,
    ConfirmationRequest,
    ExecuteBashTool,
    ToolConfirmation,
    ToolContext,
    ToolRunner,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

APPROVED = ToolConfirmation(confirmed=True)


def ctx(confirmation: ToolConfirmation | None = APPROVED) -> ToolContext:
    return ToolContext(function_call_id="c1", tool_confirmation=confirmation)


def tool(tmp_path: Path, **policy: Any) -> ExecuteBashTool:
    return ExecuteBashTool(workspace=tmp_path, policy=BashToolPolicy(**policy))


async def test_result_has_adk_keys_and_ours(tmp_path: Path) -> None:
    result = await tool(tmp_path).run_async(args={"command": "echo out; echo err >&2; exit 3"},
                                            tool_context=ctx())
    assert result["stdout"] == "out\n" and result["stderr"] == "err\n"
    assert result["returncode"] == 3
    assert result["timed_out"] is False and result["truncated"] is False
    assert isinstance(result["duration_ms"], float) and result["containment"]
    assert "error" not in result


async def test_missing_command_is_refused_first(tmp_path: Path) -> None:
    t = tool(tmp_path, allowed_command_prefixes=("ls",))
    for args in ({}, {"command": ""}, {"command": "   "}, {"command": 3}):
        result = await t.run_async(args=args, tool_context=ctx(None))
        assert result == {"error": "Command is required."}


async def test_policy_is_checked_before_confirmation(tmp_path: Path) -> None:
    context = ctx(None)
    result = await tool(tmp_path, allowed_command_prefixes=("ls",)).run_async(
        args={"command": "ls; touch pwned"}, tool_context=context)
    assert "blocked" in result["error"] and result["rule"]
    assert context.actions.requested_tool_confirmations == {}
    assert not (tmp_path / "pwned").exists()


async def test_unconfirmed_command_requests_confirmation_and_does_not_run(tmp_path: Path) -> None:
    context = ctx(None)
    result = await tool(tmp_path).run_async(args={"command": "touch ran"}, tool_context=context)
    assert "requires confirmation" in result["error"]
    assert "touch ran" in context.actions.requested_tool_confirmations["c1"].hint
    assert context.actions.skip_summarization is True
    assert not (tmp_path / "ran").exists()


async def test_rejected_confirmation_does_not_run(tmp_path: Path) -> None:
    result = await tool(tmp_path).run_async(args={"command": "touch ran"},
                                            tool_context=ctx(ToolConfirmation(confirmed=False)))
    assert result == {"error": "This tool call is rejected."}
    assert not (tmp_path / "ran").exists()


async def test_blocked_command_never_reaches_a_human(tmp_path: Path) -> None:
    asked: list[ConfirmationRequest] = []
    runner = ToolRunner(
        tools=[tool(tmp_path, allowed_command_prefixes=("ls", "touch"))],
        provider=CallbackConfirmationProvider(lambda r: asked.append(r) or True),
    )
    result = await runner.call("execute_bash", {"command": "ls && id > pwned"})
    assert result["status"] == "blocked" and "id" in result["error"]
    assert asked == [] and not (tmp_path / "pwned").exists()
    assert await runner.pending() == []


async def test_human_sees_the_parsed_commands_and_policy_decision(tmp_path: Path) -> None:
    asked: list[ConfirmationRequest] = []
    runner = ToolRunner(
        tools=[tool(tmp_path, allowed_command_prefixes=("echo", "wc"))],
        provider=CallbackConfirmationProvider(lambda r: asked.append(r) or True),
    )
    result = await runner.call("execute_bash", {"command": "echo a | wc -c"})
    assert result["stdout"].strip() == "2"
    [request] = asked
    assert request.details["commands"] == [["echo", "a"], ["wc", "-c"]]
    assert request.details["policy"]["allowed"] is True


async def test_no_confirmation_prefixes_skip_the_human_only_when_every_part_matches(
    tmp_path: Path,
) -> None:
    asked: list[str] = []
    runner = ToolRunner(
        tools=[tool(tmp_path, allowed_command_prefixes=("ls", "touch"),
                    no_confirmation_prefixes=("ls",))],
        provider=CallbackConfirmationProvider(lambda r: asked.append(r.args["command"]) or True),
    )
    await runner.call("execute_bash", {"command": "ls -la"})
    await runner.call("execute_bash", {"command": "ls && touch made"})
    assert asked == ["ls && touch made"]
    assert (tmp_path / "made").exists()


async def test_denied_bash_command_never_runs(tmp_path: Path) -> None:
    from sandbox import AutoDeny

    runner = ToolRunner(tools=[tool(tmp_path)], provider=AutoDeny("not now"))
    result = await runner.call("execute_bash", {"command": "touch ran"})
    assert result["status"] == "denied" and "not now" in result["error"]
    assert not (tmp_path / "ran").exists()


async def test_edited_command_is_checked_against_the_policy_again(tmp_path: Path) -> None:
    from sandbox import Decision

    runner = ToolRunner(
        tools=[tool(tmp_path, allowed_command_prefixes=("touch",))],
        provider=CallbackConfirmationProvider(
            lambda r: Decision.edit({"command": "touch a; id > pwned"})),
    )
    result = await runner.call("execute_bash", {"command": "touch a"})
    assert result["status"] == "blocked"
    assert not (tmp_path / "a").exists() and not (tmp_path / "pwned").exists()


async def test_timeout_reports_error_and_keeps_output(tmp_path: Path) -> None:
    result = await tool(tmp_path, timeout_seconds=0.5).run_async(
        args={"command": "echo early; sleep 30"}, tool_context=ctx())
    assert result["timed_out"] is True and "timed out" in result["error"]
    assert result["stdout"] == "early\n"


async def test_truncated_output_reports_dropped_bytes(tmp_path: Path) -> None:
    result = await tool(tmp_path, max_output_bytes=1000).run_async(
        args={"command": "head -c 100000 /dev/zero | tr '\\0' x"}, tool_context=ctx())
    assert result["truncated"] is True
    assert result["stdout_bytes_dropped"] == 100000 - 1000


async def test_agent_environment_is_not_inherited(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("SANDBOX_TOOL_SECRET", "hunter2")
    result = await tool(tmp_path).run_async(args={"command": "env"}, tool_context=ctx())
    assert "hunter2" not in result["stdout"]
    inherited = await tool(tmp_path, inherit_env=("SANDBOX_TOOL_SECRET",)).run_async(
        args={"command": "env"}, tool_context=ctx())
    assert "SANDBOX_TOOL_SECRET=hunter2" in inherited["stdout"]


@pytest.mark.needs_root  # privilege drop applies to root
async def test_root_is_dropped_when_the_workspace_allows_it() -> None:
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as name:  # /tmp is searchable by all
        workspace = Path(name)
        workspace.chmod(0o777)
        result = await tool(workspace).run_async(args={"command": "id -u"}, tool_context=ctx())
        assert result["stdout"].strip() != "0" and result["privileges"].startswith("uid ")
        kept = await tool(workspace, drop_privileges=False).run_async(
            args={"command": "id -u"}, tool_context=ctx())
        assert kept["stdout"].strip() == "0" and kept["privileges"] == "root"


@pytest.mark.needs_root  # privilege drop applies to root
async def test_root_is_kept_and_reported_when_the_workspace_is_private(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    result = await tool(tmp_path).run_async(args={"command": "id -u"}, tool_context=ctx())
    assert result["privileges"] == "root"


@pytest.mark.needs_root  # privilege drop applies to root
def test_required_privilege_drop_fails_at_construction_with_the_fix(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    with pytest.raises(ConfigurationError, match="drop_privileges"):
        tool(tmp_path, drop_privileges=True)


def test_missing_workspace_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not an existing directory"):
        ExecuteBashTool(workspace=tmp_path / "nope")


async def test_through_the_runner_with_auto_approve(tmp_path: Path) -> None:
    runner = ToolRunner(tools=[tool(tmp_path)], provider=AutoApprove())
    result = await runner.call("execute_bash", {"command": "echo hi"}, call_id="x1")
    assert result["stdout"] == "hi\n"
    replay = await runner.call("execute_bash", {"command": "echo hi"}, call_id="x1")
    assert replay["replayed"] is True


@pytest.mark.parametrize("via", ["preexec_fn", "prologue"])
async def test_limits_apply_whichever_way_they_are_set(tmp_path: Path, via: str) -> None:
    t = tool(tmp_path, max_memory_bytes=256 << 20, max_file_size_bytes=1 << 20, rlimits_via=via)
    result = await t.run_async(args={"command": "ulimit -v; ulimit -f; head -c 2000000 /dev/zero > big; wc -c < big"},
                               tool_context=ctx())
    lines = result["stdout"].split()
    assert lines[:2] == [str(256 << 10), "1024"]
    assert int(lines[2]) <= 1 << 20
