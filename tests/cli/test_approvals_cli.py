"""`sandbox approvals list|approve|deny|edit|rules [revoke]` against a real store file, in a
real process; answers are applied by the runner that holds the tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import ApprovalStore, FunctionTool, ToolRunner
from sandbox.approval.rules import RuleBook
from sandbox.bash.policy.evaluate import BashToolPolicy

pytestmark = pytest.mark.timeout(60)


class ShellTool(FunctionTool):
    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        return BashToolPolicy().check(args["command"]).commands


def cli(*args: str, store: Path | None = None, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    extra = ["--store", str(store)] if store is not None else []
    return subprocess.run([sys.executable, "-m", "sandbox", "approvals", *args, *extra],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "USER": "erin", **(env or {})})


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ToolRunner, Path, list[str]]:
    store = tmp_path / "approvals.db"
    ran: list[str] = []

    def shell(command: str) -> dict[str, Any]:
        ran.append(command)
        return {"ran": command}
    runner = ToolRunner([ShellTool(shell, require_confirmation=True)], store_path=str(store))
    return runner, store, ran


def ask(runner: ToolRunner, command: str) -> str:
    result = anyio.run(runner.call, "shell", {"command": command})
    assert result["status"] == "awaiting_confirmation"
    return str(result["confirmation_id"])


def test_list_shows_pending_requests_escaped(setup: Any) -> None:
    runner, store, _ = setup
    cid = ask(runner, "echo hi\r rm -rf ~")
    text = cli("list", store=store)
    assert text.returncode == 0
    assert cid in text.stdout and "echo hi\\r rm -rf ~" in text.stdout
    assert "\r" not in text.stdout
    data = json.loads(cli("list", "--json", store=store).stdout)
    (item,) = data["requests"]
    assert item["id"] == cid and item["args"] == {"command": "echo hi\r rm -rf ~"}
    assert item["rule_subjects"]  # the parsed commands, for choosing a rule


def test_approve_records_an_answer_the_runner_applies(setup: Any) -> None:
    runner, store, ran = setup
    cid = ask(runner, "make test")
    out = json.loads(cli("approve", cid, "--json", store=store).stdout)
    assert out == {"ok": True, "id": cid, "outcome": "approve", "scope": "once",
                   "decided_by": "erin"}
    assert ran == []  # the CLI does not hold the tool
    results = anyio.run(runner.apply_answers)
    assert results[cid] == {"ran": "make test"} and ran == ["make test"]
    decision = ApprovalStore(store).request_decision(cid)
    assert decision is not None
    assert (decision["channel"], decision["decided_by"]) == ("cli", "erin")


def test_a_second_answer_is_refused(setup: Any) -> None:
    runner, store, _ = setup
    cid = ask(runner, "make test")
    assert cli("deny", cid, "--reason", "no", store=store).returncode == 0
    again = cli("approve", cid, "--json", store=store)
    assert again.returncode == 1
    assert json.loads(again.stdout)["status"] == "already_answered"


def test_deny_and_edit(setup: Any) -> None:
    runner, store, ran = setup
    denied = ask(runner, "rm -rf build")
    edited = ask(runner, "rm -rf dist")
    assert cli("deny", denied, "--reason", "use make clean", store=store).returncode == 0
    assert cli("edit", edited, "--command", "ls dist", store=store).returncode == 0
    results = anyio.run(runner.apply_answers)
    assert results[denied]["reason"] == "use make clean"
    # The human who edited approved the edited call: it runs once, not asked again.
    assert results[edited] == {"ran": "ls dist"}
    assert ran == ["ls dist"]
    assert ApprovalStore(store).pending() == []


def test_always_with_a_prefix_then_list_and_revoke_rules(setup: Any) -> None:
    runner, store, _ = setup
    cid = ask(runner, "git log --oneline && ls")
    bad = cli("approve", cid, "--scope", "always", "--prefix", "rm", store=store)
    assert bad.returncode == 2 and "not the first words" in bad.stderr
    ok = cli("approve", cid, "--scope", "always", "--prefix", "git log", store=store)
    assert ok.returncode == 0, ok.stderr
    anyio.run(runner.apply_answers)
    rules = json.loads(cli("rules", "--json", store=store).stdout)["rules"]
    assert sorted((tuple(r["words"]), r["prefix"]) for r in rules) == [
        (("git", "log"), True), (("ls",), False)]
    assert all(r["created_by"] == "erin" and r["channel"] == "cli" for r in rules)
    listing = cli("rules", store=store).stdout
    assert "git log …(and any further words)" in listing and "[active]" in listing
    git_rule = next(r["id"] for r in rules if r["words"] == ["git", "log"])
    revoked = json.loads(cli("rules", "revoke", git_rule, "--json", store=store).stdout)
    assert revoked["rule"]["state"] == "revoked" and revoked["rule"]["revoked_by"] == "erin"
    assert [r.id for r in RuleBook(ApprovalStore(store)).rules()] != [git_rule]
    assert len(json.loads(cli("rules", "--all", "--json", store=store).stdout)["rules"]) == 2
    assert cli("rules", "revoke", "rule_nope", store=store).returncode == 2


def test_store_comes_from_the_environment_and_missing_stores_are_named(
        setup: Any, tmp_path: Path) -> None:
    runner, store, _ = setup
    cid = ask(runner, "ls")
    via_env = cli("list", "--json", env={"SANDBOX_STORE": str(store)})
    assert [r["id"] for r in json.loads(via_env.stdout)["requests"]] == [cid]
    missing = cli("list", store=tmp_path / "nope.db")
    assert missing.returncode == 2 and "no approval store at" in missing.stderr


def test_help_has_an_example_for_every_command() -> None:
    for command in ("serve", "list", "approve", "deny", "edit", "rules"):
        out = cli(command, "--help").stdout
        assert "example:" in out and f"sandbox approvals {command}" in out
    assert "examples:" in cli("--help").stdout
