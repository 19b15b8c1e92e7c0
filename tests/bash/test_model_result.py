"""What the model reads of a bash result: ADK's shape plus what it can act on. The layer
report (which protections were active, as which user) stays in the result object for
code and logs; the ADK and MCP adapters leave it out of the model's context."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from sandbox import AutoApprove, BashToolPolicy, ExecuteBashTool, ToolRunner
from sandbox.integrations.adk import to_adk_tool
from sandbox.tools.model_view import FOR_CODE_ONLY, for_model
from tests.integrations.test_adk_integration import Harness, call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

POLICY = BashToolPolicy(allowed_command_prefixes=("echo", "sleep"), timeout_seconds=1,
                        max_output_bytes=64)


async def test_the_result_object_keeps_the_layer_report_for_code(tmp_path: Path) -> None:
    runner = ToolRunner([ExecuteBashTool(workspace=tmp_path, policy=POLICY)], provider=AutoApprove())
    result = await runner.call("execute_bash", {"command": "echo hi"})
    assert result["stdout"] == "hi\n"
    assert isinstance(result["containment"], dict) and result["containment"]
    assert "privileges" in result and "duration_ms" in result
    seen = for_model(result)
    assert not FOR_CODE_ONLY & seen.keys()
    assert {"stdout", "stderr", "returncode", "timed_out", "truncated"} <= seen.keys()
    assert len(json.dumps(seen)) < 200


async def test_an_adk_model_reads_adks_shape_and_what_it_can_act_on(tmp_path: Path) -> None:
    bash = ExecuteBashTool(workspace=tmp_path, policy=POLICY)
    runner = ToolRunner([bash], provider=AutoApprove())
    harness = Harness([to_adk_tool(bash, runner=runner)], [], [[
        call("execute_bash", "ok", command="echo hi"),
        call("execute_bash", "slow", command="sleep 5"),
        call("execute_bash", "long", command="echo " + "x" * 300),
        call("execute_bash", "refused", command="rm -rf /"),
    ]])
    await harness.ask()
    seen = harness.model.responses_seen()
    for response in seen.values():
        assert not FOR_CODE_ONLY & response.keys(), response
        assert "root" not in json.dumps(response)
    assert seen["ok"]["stdout"] == "hi\n" and seen["ok"]["returncode"] == 0
    assert seen["slow"]["timed_out"] is True and "timed out" in seen["slow"]["error"]
    assert seen["long"]["truncated"] is True and seen["long"]["stdout_bytes_dropped"] > 0
    assert "blocked" in seen["refused"]["error"] and seen["refused"]["rule"]


async def test_an_mcp_client_reads_no_layer_report(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sandbox", "mcp", "--policy", "readonly", "--workspace", str(tmp_path), "--approvals", "deny"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("execute_bash", {"command": "echo hi"})
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["stdout"] == "hi\n"
    assert not FOR_CODE_ONLY & result.structured_content.keys()
    assert "containment" not in json.dumps([c.model_dump() for c in result.content])


def test_other_results_pass_unchanged() -> None:
    value: dict[str, Any] = {"containment": "a word in a user's result", "stdout": "x"}
    assert for_model(value) is value
    assert for_model([1]) == [1]
