"""The audit trail: an event per step, redacted arguments, a hash chain that finds edits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from sandbox import (
    AuditLog,
    AutoApprove,
    AutoDeny,
    BaseTool,
    CallbackConfirmationProvider,
    ConfirmationRequest,
    Decision,
    FunctionTool,
    ToolContext,
    ToolRunner,
    args_digest,
    verify_audit,
)
from tests.conftest import SideEffect

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


def login_tool(effect: SideEffect, *, require_confirmation: bool = True) -> FunctionTool:
    def login(user: str, password: str) -> dict[str, Any]:
        effect.append(user)
        return {"ok": True}

    return FunctionTool(login, require_confirmation=require_confirmation)


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def events(path: Path) -> list[str]:
    return [r["event"] for r in read(path)]


ARGS = {"user": "ann", "password": "hunter2"}


# -- one event per step ---------------------------------------------------------------------


async def test_an_approved_call_logs_requested_decided_started_finished(
    effect: SideEffect, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log), provider=CallbackConfirmationProvider(
        lambda req: Decision.approve(decided_by="alice"), name="ops-ui"))

    await runner.call("login", ARGS, call_id="c1")

    records = read(log)
    assert [r["event"] for r in records] == ["tool.requested", "tool.decided", "tool.started",
                                             "tool.finished"]
    digest = args_digest("login", ARGS)
    assert all((r["call_id"], r["tool"], r["digest"]) == ("c1", "login", digest)
               for r in records)
    decided = records[1]
    assert (decided["decision"], decided["decided_by"], decided["channel"]) == (
        "approved", "alice", "ops-ui")
    assert records[0]["confirmation_id"] == decided["confirmation_id"]
    assert all("ts" in r for r in records)


async def test_a_denied_call_logs_the_decision_and_never_started(
    effect: SideEffect, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log), provider=AutoDeny("no"))

    await runner.call("login", ARGS)

    assert events(log) == ["tool.requested", "tool.decided"]
    assert read(log)[1]["decision"] == "denied" and read(log)[1]["reason"] == "no"


async def test_a_failing_tool_logs_failed(tmp_path: Path) -> None:
    def boom() -> None:
        raise RuntimeError("kaput")

    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([FunctionTool(boom)], audit_path=str(log))

    await runner.call("boom", {})

    assert events(log) == ["tool.started", "tool.failed"]
    assert "kaput" in read(log)[-1]["error"]


async def test_a_provider_timeout_logs_timed_out_not_denied(effect: SideEffect,
                                                            tmp_path: Path) -> None:
    async def never(req: ConfirmationRequest) -> bool:
        await anyio.sleep(60)
        return True

    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log),
                        provider=CallbackConfirmationProvider(never, timeout=0.1))

    await runner.call("login", ARGS)

    last = read(log)[-1]
    assert last["event"] == "tool.timed_out"
    assert last.get("decision", "timed_out") == "timed_out"
    assert "denied" not in json.dumps(read(log)) and "approved" not in json.dumps(read(log))


async def test_a_provider_error_logs_error_not_denied(effect: SideEffect,
                                                      tmp_path: Path) -> None:
    def crash(req: ConfirmationRequest) -> bool:
        raise RuntimeError("ui down")

    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log),
                        provider=CallbackConfirmationProvider(crash))

    await runner.call("login", ARGS)

    decided = read(log)[-1]
    assert decided["event"] == "tool.decided" and decided["decision"] == "error"
    assert "ui down" in decided["reason"]


async def test_a_blocked_call_logs_blocked(tmp_path: Path) -> None:
    class Blocked(BaseTool):
        async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
            return {"error": "blocked by policy"}

        async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
            raise AssertionError("must not run")

    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([Blocked(name="b", description="")], audit_path=str(log))

    await runner.call("b", {})

    assert events(log) == ["tool.blocked"]
    assert read(log)[0]["error"] == "blocked by policy"


async def test_an_edit_logs_the_edited_arguments(effect: SideEffect, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    edited = {"user": "bob", "password": "pw2"}
    runner = ToolRunner([login_tool(effect)], audit_path=str(log),
                        provider=CallbackConfirmationProvider(
                            lambda req: Decision.edit(edited) if req.kind != "edit" else True))

    await runner.call("login", ARGS)

    decided = [r for r in read(log) if r["event"] == "tool.decided"]
    assert decided[0]["decision"] == "edited"
    assert decided[0]["edited_args"]["user"] == "bob"
    assert decided[0]["edited_args"]["password"] == "[REDACTED]"


# -- redaction -------------------------------------------------------------------------------


async def test_secret_looking_arguments_are_redacted_by_default(effect: SideEffect,
                                                                tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log), provider=AutoApprove())

    await runner.call("login", {"user": "ann", "password": "hunter2"})

    assert "hunter2" not in log.read_text()
    assert read(log)[0]["args"] == {"user": "ann", "password": "[REDACTED]"}


async def test_a_custom_redaction_hook_sees_tool_and_arguments(effect: SideEffect,
                                                               tmp_path: Path) -> None:
    seen: list[str] = []

    def hide_users(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        seen.append(tool)
        return {k: ("***" if k == "user" else v) for k, v in args.items()}

    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log), provider=AutoApprove(),
                        redact=hide_users)

    await runner.call("login", {"user": "zelda", "password": "pw"})

    assert read(log)[0]["args"] == {"user": "***", "password": "pw"}
    assert set(seen) == {"login"}
    assert "zelda" not in log.read_text()


async def test_default_redaction_reaches_nested_secrets() -> None:
    from sandbox import redact_secrets

    out = redact_secrets("t", {"headers": {"Authorization": "Bearer x"},
                               "items": [{"api_key": "k"}], "name": "n"})

    assert out == {"headers": {"Authorization": "[REDACTED]"},
                   "items": [{"api_key": "[REDACTED]"}], "name": "n"}


async def test_the_runners_store_keeps_the_real_arguments_to_run_them(
    effect: SideEffect, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log))
    parked = await runner.call("login", ARGS)

    assert await runner.resume(parked["confirmation_id"], True) == {"ok": True}
    assert effect.lines == ["ann"]


async def test_events_also_go_to_a_given_structlog_logger(effect: SideEffect) -> None:
    try:
        with structlog.testing.capture_logs() as logs:
            audit = AuditLog(structlog_logger=structlog.get_logger())
            runner = ToolRunner([login_tool(effect, require_confirmation=False)], audit=audit)
            await runner.call("login", ARGS, call_id="c1")
    finally:
        structlog.reset_defaults()  # capture_logs leaves structlog marked "configured"

    assert [e["event"] for e in logs] == ["tool.started", "tool.finished"]
    assert logs[0]["call_id"] == "c1"


# -- the hash chain ---------------------------------------------------------------------------


async def chained_log(effect: SideEffect, tmp_path: Path) -> Path:
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([login_tool(effect)], audit_path=str(log), provider=AutoApprove())
    for i in range(3):
        await runner.call("login", {"user": f"u{i}", "password": "p"})
    return log


async def test_an_untouched_log_verifies(effect: SideEffect, tmp_path: Path) -> None:
    log = await chained_log(effect, tmp_path)

    result = verify_audit(log)

    assert result.ok and result.records == 12


async def test_a_changed_record_is_detected(effect: SideEffect, tmp_path: Path) -> None:
    log = await chained_log(effect, tmp_path)
    lines = log.read_text().splitlines()
    lines[1] = lines[1].replace('"approved"', '"denied"')
    log.write_text("\n".join(lines) + "\n")

    result = verify_audit(log)

    assert not result.ok and result.line == 2 and "modified" in (result.problem or "")


async def test_an_inserted_record_is_detected(effect: SideEffect, tmp_path: Path) -> None:
    log = await chained_log(effect, tmp_path)
    lines = log.read_text().splitlines()
    lines.insert(3, lines[2])  # a plausible, well-formed record in the wrong place
    log.write_text("\n".join(lines) + "\n")

    result = verify_audit(log)

    assert not result.ok and result.line == 4


async def test_a_deleted_record_is_detected(effect: SideEffect, tmp_path: Path) -> None:
    log = await chained_log(effect, tmp_path)
    lines = log.read_text().splitlines()
    del lines[5]
    log.write_text("\n".join(lines) + "\n")

    result = verify_audit(log)

    assert not result.ok and result.line == 6 and "chain broken" in (result.problem or "")


async def test_two_runners_appending_to_one_log_keep_one_chain(effect: SideEffect,
                                                              tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    a = ToolRunner([login_tool(effect)], audit_path=str(log), provider=AutoApprove())
    b = ToolRunner([login_tool(effect)], audit_path=str(log), provider=AutoApprove())

    for runner in (a, b, a, b):
        await runner.call("login", {"user": "u", "password": "p"})

    assert verify_audit(log).ok and verify_audit(log).records == 16


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sandbox", "audit", "verify", *args],
                          capture_output=True, text=True, timeout=30)


async def test_cli_verify_exits_0_for_an_intact_log_and_1_for_a_tampered_one(
    effect: SideEffect, tmp_path: Path
) -> None:
    log = await chained_log(effect, tmp_path)

    ok = cli(str(log))
    as_json = cli(str(log), "--json")
    log.write_text(log.read_text().replace('"u1"', '"u9"'))
    tampered = cli(str(log))

    assert ok.returncode == 0 and "OK: 12 records" in ok.stdout
    shown = json.loads(as_json.stdout)
    assert {k: shown[k] for k in ("ok", "records", "problem", "line", "anchored")} == {
        "ok": True, "records": 12, "problem": None, "line": None, "anchored": False}
    assert "cannot be detected" in shown["note"]
    assert tampered.returncode == 1 and "TAMPERED" in tampered.stdout


async def test_cli_verify_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    assert cli(str(tmp_path / "missing.jsonl")).returncode == 2


async def test_no_audit_file_is_written_without_a_path(effect: SideEffect,
                                                       tmp_path: Path) -> None:
    runner = ToolRunner([login_tool(effect)], provider=AutoApprove())

    await runner.call("login", ARGS)

    assert not runner.audit.enabled
    assert os.listdir(tmp_path) == [effect.path.name]
