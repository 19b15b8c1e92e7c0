"""Every channel tells a human, in plain words, what will happen, why it was asked (the
predicate, the rule, the policy's verdict), who asked and what each answer does. ADK's
hint for the model ("... by responding with a FunctionResponse ...") stays on the
model's side, and no policy decision is shown as raw JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio

from sandbox import BashToolPolicy, ExecuteBashTool, FunctionTool, ToolContext, ToolRunner
from sandbox.approval.channels.console import ConsoleConfirmationProvider
from sandbox.approval.channels.web.listing import present
from sandbox.approval.explain import explain
from sandbox.approval.models import ConfirmationRequest
from sandbox.integrations.mcp import approval_message

SANDBOX = str(Path(sys.executable).parent / "sandbox")
DEVELOPER_WORDS = ("FunctionResponse", "ToolConfirmation", "Please approve or reject")


def deploy(service: str) -> dict[str, str]:
    """Deploy a service to production."""
    return {"deployed": service}


def wipe(scope: str) -> dict[str, str]:
    """Wipe a data scope."""
    return {"wiped": scope}


def transfer(amount: int, tool_context: ToolContext) -> dict[str, int]:
    """Move money between accounts."""
    if tool_context.tool_confirmation is None:
        tool_context.request_confirmation(hint=f"Transfer {amount} EUR, above the limit?")
        return {}
    return {"moved": amount}


def parked(tmp_path: Path) -> tuple[Path, dict[str, ConfirmationRequest]]:
    db = tmp_path / "approvals.db"
    runner = ToolRunner(tools=[
        FunctionTool(deploy, require_confirmation=True),
        FunctionTool(wipe, require_confirmation=lambda scope: scope != "dry-run"),
        FunctionTool(transfer),
        ExecuteBashTool(workspace=tmp_path, policy=BashToolPolicy(
            allowed_command_prefixes=("ls", "git status"))),
    ], store_path=str(db), session_id="ops-bot")

    async def go() -> None:
        await runner.call("deploy", {"service": "api"})
        await runner.call("wipe", {"scope": "prod"})
        await runner.call("transfer", {"amount": 5000})
        await runner.call("execute_bash", {"command": "ls -la | git status"})

    anyio.run(go)
    return db, {r.tool: r for r in anyio.run(runner.pending)}


def test_each_kind_of_request_says_why_in_words(tmp_path: Path) -> None:
    _, reqs = parked(tmp_path)
    static, predicate = explain(reqs["deploy"]), explain(reqs["wipe"])
    assert static.what == "Calls deploy with these arguments: Deploy a service to production."
    assert "always asks a human" in static.why
    assert "confirmation rule" in predicate.why and "other arguments" in predicate.why
    tool = explain(reqs["transfer"])
    assert "The tool itself stopped to ask" in tool.why and "5000 EUR" in tool.why
    bash = explain(reqs["execute_bash"])
    assert bash.what.startswith(f"Runs the bash command below in {tmp_path}")
    assert "The bash policy allows it (every simple command matches an allowed prefix" \
        in bash.why
    for said in (static, predicate, tool, bash):
        assert "ops-bot" in said.who
        assert [a for a, _ in said.answers] == [
            "approve once", "approve for this session", "always", "deny", "edit"]
        assert not any(w in said.what + said.why for w in DEVELOPER_WORDS)
    assert "ls -la; git status" in dict(bash.answers)["approve for this session"]
    # ADK's hint is still what the model's side reads.
    assert reqs["deploy"].hint.startswith("Please approve or reject the tool call deploy()")


def test_the_terminal_the_page_mcp_and_the_cli_show_no_developer_text(tmp_path: Path) -> None:
    db, reqs = parked(tmp_path)
    console = ConsoleConfirmationProvider()
    for req in reqs.values():
        card = present(req)
        shown = [console._render(req, False), approval_message(req),
                 json.dumps({k: card[k] for k in ("what", "why", "who", "details")})]
        for text in shown:
            assert not any(w in text for w in DEVELOPER_WORDS), text
            assert '"allowed": true' not in text and "'allowed': True" not in text
    listed = subprocess.run([SANDBOX, "approvals", "list", "--store", str(db)],
                            capture_output=True, text=True, check=True).stdout
    assert not any(w in listed for w in DEVELOPER_WORDS), listed
    assert '{"allowed"' not in listed
    assert listed.count("why asked: ") == 4 and listed.count("asked by: ") == 4
    assert "deny: it does not run; the model reads your reason" in listed
    as_json = json.loads(subprocess.run(
        [SANDBOX, "approvals", "list", "--store", str(db), "--json"],
        capture_output=True, text=True, check=True).stdout)
    rows = as_json if isinstance(as_json, list) else as_json["requests"]
    assert all(row["explain"]["why"] for row in rows)
