"""The contract of DESIGN.md, executed as written there: public names and shapes that
code outside the project relies on."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_the_contract_runs_as_documented(tmp_path: pathlib.Path) -> None:
    from sandbox import (
        AutoApprove,
        AutoDeny,
        BashToolPolicy,
        CallbackConfirmationProvider,
        ExecuteBashTool,
        FunctionTool,
        ToolConfirmation,
        ToolContext,
        ToolRunner,
    )

    policy = BashToolPolicy(
        allowed_command_prefixes=("git status", "ls"),
        blocked_operators=(";", "|"),
        timeout_seconds=30,
        max_memory_bytes=None, max_file_size_bytes=None, max_child_processes=None,
    )
    decision = policy.check("git status")
    assert decision.allowed is True and isinstance(decision.reason, str)
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.timeout_seconds = 1  # type: ignore[misc]
    assert BashToolPolicy().allowed_command_prefixes == ("*",)
    assert BashToolPolicy().blocked_operators == () and BashToolPolicy().timeout_seconds == 30

    workspace = tmp_path / "w"
    workspace.mkdir()
    tool = ExecuteBashTool(workspace=workspace, policy=policy)
    ctx = ToolContext(function_call_id="c1", tool_confirmation=ToolConfirmation(confirmed=True))
    result = await tool.run_async(args={"command": "ls"}, tool_context=ctx)
    assert {"stdout", "stderr", "returncode", "timed_out", "truncated"} <= set(result)
    blocked = await tool.run_async(args={"command": "ls; id"}, tool_context=ctx)
    assert "error" in blocked

    wiped: list[str] = []

    def wipe(scope: str) -> dict[str, Any]:
        wiped.append(scope)
        return {"wiped": scope}

    runner = ToolRunner(
        tools=[tool, FunctionTool(wipe, require_confirmation=lambda scope: scope != "dry-run")],
        provider=AutoApprove())
    assert (await runner.call("wipe", {"scope": "prod"}, call_id="c2")) == {"wiped": "prod"}
    denied = await ToolRunner(tools=[FunctionTool(wipe, require_confirmation=True)],
                              provider=AutoDeny("reason")).call("wipe", {"scope": "x"})
    assert "reason" in denied["error"] and wiped == ["prod"]
    for answer in (True, ToolConfirmation(confirmed=True)):
        cb = ToolRunner(tools=[FunctionTool(wipe, require_confirmation=True)],
                        provider=CallbackConfirmationProvider(lambda request, a=answer: a))
        assert (await cb.call("wipe", {"scope": "cb"}))["wiped"] == "cb"

    store = str(tmp_path / "approvals.db")
    runner = ToolRunner(tools=[FunctionTool(wipe, require_confirmation=True)], store_path=store)
    r = await runner.call("wipe", {"scope": "prod"}, call_id="c3")
    assert r["status"] == "awaiting_confirmation" and r["confirmation_id"]
    [request] = await runner.pending()
    assert (request.id, request.call_id, request.tool, request.args) == (
        r["confirmation_id"], "c3", "wipe", {"scope": "prod"})
    assert isinstance(request.hint, str)
    r = await runner.resume(r["confirmation_id"], ToolConfirmation(confirmed=True))
    assert r == {"wiped": "prod"}


def test_tool_confirmation_accepts_camel_case_and_rejects_unknown_fields() -> None:
    from sandbox import ConfigurationError, ToolConfirmation

    assert ToolConfirmation.model_validate({"confirmed": True, "hint": "h", "payload": 1})
    import pydantic

    with pytest.raises(pydantic.ValidationError):
        ToolConfirmation.model_validate({"confirmd": True})
    with pytest.raises(ConfigurationError, match="confirmd"):
        ToolConfirmation.parse({"confirmd": True})
