"""The audit log of a decision: what the human was shown, what they decided, through which
channel and as whom, the diff of an edit, and the digest of what actually ran — in a
hash chain that exposes a changed, inserted or deleted record."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import Decision, FunctionTool, ToolRunner, args_digest, verify_audit

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def run_edit_and_rule(tmp_path: Path) -> tuple[Path, list[str]]:
    audit = tmp_path / "audit.jsonl"
    ran: list[str] = []

    def deploy(target: str, api_key: str) -> dict[str, Any]:
        ran.append(target)
        return {"deployed": target}

    runner = ToolRunner([FunctionTool(deploy, require_confirmation=lambda target, api_key:
                                      target != "staging")],
                        store_path=str(tmp_path / "approvals.db"), audit_path=str(audit))
    first = await runner.call("deploy", {"target": "prod\r", "api_key": "sk-123"}, call_id="c1")
    await runner.resume(first["confirmation_id"],
                        Decision.edit({"target": "staging", "api_key": "sk-123"},
                                      decided_by="alice", channel="web"))
    second = await runner.call("deploy", {"target": "eu", "api_key": "sk-123"}, call_id="c2")
    await runner.resume(second["confirmation_id"],
                        Decision.approve(scope="always", decided_by="bob", channel="cli"))
    await runner.call("deploy", {"target": "eu", "api_key": "sk-123"}, call_id="c3")
    return audit, ran


async def test_a_decision_record_holds_what_was_shown_and_what_ran(tmp_path: Path) -> None:
    audit, ran = await run_edit_and_rule(tmp_path)
    assert ran == ["staging", "eu", "eu"]
    records = read(audit)
    decided = next(r for r in records if r["event"] == "tool.decided" and r["call_id"] == "c1")
    # What the human saw: the tool, the arguments as rendered (escaped, secrets redacted),
    # the hint and the policy details.
    assert decided["shown"]["tool"] == "deploy"
    assert '"target": "prod\\r"' in decided["shown"]["args"]
    assert "sk-123" not in json.dumps(decided)
    assert "[REDACTED]" in decided["shown"]["args"]
    assert decided["shown"]["hint"].startswith("Please approve")
    # What they decided, where, as whom, and what the edit changed.
    assert (decided["decision"], decided["channel"], decided["decided_by"]) == (
        "edited", "web", "alice")
    edited_digest = args_digest("deploy", {"target": "staging", "api_key": "sk-123"})
    assert decided["edit"] == {"changed": {"target": {"old": "prod\r", "new": "staging"}},
                               "added": {}, "removed": {}, "new_digest": edited_digest}
    # What ran: the started/finished events carry the digest of the edited call.
    started = next(r for r in records if r["event"] == "tool.started" and r["call_id"] == "c1")
    finished = next(r for r in records if r["event"] == "tool.finished" and r["call_id"] == "c1")
    assert started["digest"] == finished["digest"] == edited_digest != decided["digest"]


async def test_a_rule_decision_and_the_rule_it_came_from_are_recorded(tmp_path: Path) -> None:
    audit, _ = await run_edit_and_rule(tmp_path)
    records = read(audit)
    created = next(r for r in records if r["event"] == "rule.created")
    assert (created["decided_by"], created["channel"], created["scope"]) == ("bob", "cli",
                                                                             "always")
    by_rule = next(r for r in records if r["event"] == "tool.decided" and r["call_id"] == "c3")
    assert by_rule["channel"] == "rule" and by_rule["decided_by"] == created["rule_id"]


async def test_the_chain_finds_a_changed_an_inserted_and_a_deleted_record(
        tmp_path: Path) -> None:
    audit, _ = await run_edit_and_rule(tmp_path)
    lines = audit.read_text().splitlines(keepends=True)
    assert verify_audit(audit).ok and verify_audit(audit).records == len(lines)
    decided_at = next(i for i, line in enumerate(lines) if '"tool.decided"' in line)

    changed = tmp_path / "changed.jsonl"
    changed.write_text("".join(lines).replace('"decided_by":"alice"', '"decided_by":"mallory"')
                       .replace('"decided_by": "alice"', '"decided_by": "mallory"'))
    assert changed.read_text() != "".join(lines)
    result = verify_audit(changed)
    assert not result.ok and result.line == decided_at + 1
    assert result.problem == "record was modified"

    inserted = tmp_path / "inserted.jsonl"
    inserted.write_text("".join([*lines[:decided_at + 1], lines[decided_at],
                                 *lines[decided_at + 1:]]))
    result = verify_audit(inserted)
    assert not result.ok and result.line == decided_at + 2

    deleted = tmp_path / "deleted.jsonl"
    deleted.write_text("".join(lines[:decided_at] + lines[decided_at + 1:]))
    result = verify_audit(deleted)
    assert not result.ok and result.line == decided_at + 1
    assert "chain broken" in (result.problem or "")

    for bad in (changed, inserted, deleted):
        proc = await anyio.run_process(
            [sys.executable, "-m", "sandbox", "audit", "verify", str(bad)], check=False)
        assert proc.returncode == 1 and b"TAMPERED" in proc.stdout
