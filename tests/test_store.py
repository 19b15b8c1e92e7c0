"""Single-use grants, the approved → started → done journal, and a store that survives
restarts and is answered from other processes."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    ApprovalStore,
    AutoApprove,
    AutoDeny,
    ConfigurationError,
    ConfirmationStateError,
    Decision,
    FunctionTool,
    StoreError,
    ToolConfirmation,
    ToolRunner,
    UnknownCallError,
)

from .conftest import Processes, SideEffect

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def append_tool(effect: SideEffect) -> FunctionTool:
    def append(text: str) -> dict[str, Any]:
        effect.append(text)
        return {"written": text}

    return FunctionTool(append, require_confirmation=True)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "approvals.db")


def states(runner: ToolRunner, call_id: str) -> list[str]:
    return [state for state, _, _ in runner.store.journal(call_id)]


# -- single-use grants ------------------------------------------------------------------


async def test_resuming_twice_runs_the_tool_at_most_once(effect: SideEffect, db: str) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "a"}, call_id="c1")

    first = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))
    second = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))

    assert first == {"written": "a"}
    assert second["status"] == "rejected" and "already answered" in second["error"]
    assert effect.lines == ["a"]


async def test_a_denial_cannot_be_overturned_by_a_later_approval(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})
    await runner.resume(parked["confirmation_id"], Decision.deny("no"))

    again = await runner.resume(parked["confirmation_id"], True)

    assert again["status"] == "rejected"
    assert not effect.happened


async def test_resuming_with_other_arguments_runs_nothing_and_the_request_stays_pending(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "ls"}, call_id="c1")

    forged = await runner.resume(parked["confirmation_id"], True, args={"text": "rm -rf /"})

    assert forged["status"] == "rejected" and "differ" in forged["error"]
    assert not effect.happened
    assert [r.id for r in await runner.pending()] == [parked["confirmation_id"]]
    exact = await runner.resume(parked["confirmation_id"], True, args={"text": "ls"})
    assert exact == {"written": "ls"}
    assert effect.lines == ["ls"]


async def test_arguments_tampered_in_the_store_file_are_detected_and_nothing_runs(
    effect: SideEffect, db: str
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "ls"}, call_id="c1")
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE requests SET args=? WHERE id=?",
                    (json.dumps({"text": "rm -rf /"}), parked["confirmation_id"]))

    result = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))

    assert result["status"] == "error" and "modified" in result["error"]
    assert not effect.happened
    assert runner.store.get_request(parked["confirmation_id"]).status == "error"


async def test_a_grant_is_bound_to_its_call_and_digest_in_the_store() -> None:
    store = ApprovalStore()
    store.open_call("c1", "t", "digest-a", {"x": 1})

    assert store.start("c1", "digest-b") is False  # another digest: not the call opened
    assert store.start("c1", "digest-a") is True
    assert store.start("c1", "digest-a") is False  # claimed once


# -- the journal ----------------------------------------------------------------------------


async def test_journal_of_an_approved_call_reads_approved_started_done(
    effect: SideEffect, db: str
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    await runner.resume(parked["confirmation_id"], True)

    assert states(runner, "c1") == ["new", "awaiting", "approved", "started", "done"]
    assert runner.store.get_call("c1").result == {"written": "a"}


async def test_journal_of_a_provider_approved_call_reads_approved_started_done(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoApprove())
    await runner.call("append", {"text": "a"}, call_id="c1")

    assert states(runner, "c1") == ["new", "awaiting", "approved", "started", "done"]


async def test_journal_of_a_denied_call_never_shows_started(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoDeny("no"))
    await runner.call("append", {"text": "a"}, call_id="c1")

    assert states(runner, "c1") == ["new", "awaiting", "denied"]


async def test_journal_records_who_decided(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    await runner.resume(parked["confirmation_id"], True, decided_by="alice")

    [(_, _, detail)] = [j for j in runner.store.journal("c1") if j[0] == "approved"]
    assert detail is not None and "alice" in detail


# -- restarts and other processes -------------------------------------------------------------


async def test_pending_requests_survive_a_restart_of_the_store(
    effect: SideEffect, db: str
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    runner.store.close()

    later = ToolRunner([append_tool(effect)], store=ApprovalStore(db))

    [req] = await later.pending()
    assert (req.id, req.call_id, req.args) == (parked["confirmation_id"], "c1", {"text": "a"})
    assert await later.resume(req.id, True) == {"written": "a"}
    assert len(effect.lines) == 1


async def test_a_request_parked_by_a_process_that_exited_is_resumed_by_another(
    effect: SideEffect, db: str, processes: Processes
) -> None:
    parked = json.loads(processes.run("gate_process.py", db, str(effect.path), "defer", "c1",
                                      "from-child"))
    assert parked["status"] == "awaiting_confirmation"
    assert not effect.happened

    runner = ToolRunner([append_tool(effect)], store_path=db)
    [req] = await runner.pending()
    result = await runner.resume(req.id, True)

    assert req.id == parked["confirmation_id"]
    assert result == {"written": "from-child"}
    assert effect.lines == ["from-child"]


async def test_another_process_sees_pending_requests_and_resumes_them(
    effect: SideEffect, db: str, processes: Processes
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "x"}, call_id="c1")

    seen = json.loads(processes.run("gate_process.py", db, str(effect.path), "pending"))
    result = json.loads(processes.run("gate_process.py", db, str(effect.path), "resume",
                                      parked["confirmation_id"]))

    assert [r["id"] for r in seen] == [parked["confirmation_id"]]
    assert result == {"written": "x"}
    assert len(effect.lines) == 1 and "pid=" in effect.lines[0]
    assert runner.store.get_call("c1").state == "done"


async def test_answer_submitted_from_another_process_is_applied_by_resume_without_an_answer(
    effect: SideEffect, db: str, processes: Processes
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    processes.run("gate_process.py", db, str(effect.path), "submit", parked["confirmation_id"])
    assert not effect.happened  # an answer alone runs nothing

    result = await runner.resume(parked["confirmation_id"])

    assert result == {"written": "a"}
    decision = runner.store.request_decision(parked["confirmation_id"])
    assert decision is not None
    assert (decision["decided_by"], decision["channel"]) == ("bob", "other-process")


async def test_apply_answers_runs_every_answered_request_once(effect: SideEffect,
                                                              db: str) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    a = await runner.call("append", {"text": "a"})
    b = await runner.call("append", {"text": "b"})
    unanswered = await runner.call("append", {"text": "c"})
    with ApprovalStore(db) as other:
        other.submit_answer(a["confirmation_id"], {"confirmed": True})
        other.submit_answer(b["confirmation_id"], Decision.deny("not b", decided_by="carol"))

    results = await runner.apply_answers()
    again = await runner.apply_answers()

    assert results[a["confirmation_id"]] == {"written": "a"}
    assert results[b["confirmation_id"]]["reason"] == "not b"
    assert again == {}
    assert effect.lines == ["a"]
    assert [r.id for r in await runner.pending()] == [unanswered["confirmation_id"]]


async def test_a_second_submitted_answer_is_refused(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})
    runner.store.submit_answer(parked["confirmation_id"], Decision.deny("no"))

    with pytest.raises(ConfirmationStateError, match="answered once"):
        runner.store.submit_answer(parked["confirmation_id"], Decision.approve())
    assert (await runner.resume(parked["confirmation_id"]))["status"] == "denied"
    assert not effect.happened


async def test_a_malformed_submitted_answer_is_refused_and_does_not_block_the_real_one(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    with pytest.raises(ConfigurationError, match="confirm"):
        runner.store.submit_answer(parked["confirmation_id"], {"confirm": True})
    runner.store.submit_answer(parked["confirmation_id"], {"confirmed": True})

    assert await runner.resume(parked["confirmation_id"]) == {"written": "a"}


async def test_resume_without_an_answer_and_none_recorded_is_a_clear_error(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    with pytest.raises(ConfirmationStateError, match="no recorded answer"):
        await runner.resume(parked["confirmation_id"])


# -- expiry and bounds -------------------------------------------------------------------------


async def test_an_expired_request_is_recorded_as_timed_out_never_approved(
    effect: SideEffect,
) -> None:
    import anyio

    runner = ToolRunner([append_tool(effect)], approval_ttl=0.05)
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    await anyio.sleep(0.1)

    assert await runner.pending() == []
    result = await runner.resume(parked["confirmation_id"], True)

    assert result["status"] != "done" and "timed out" in result["error"]
    assert not effect.happened
    assert runner.store.get_request(parked["confirmation_id"]).status == "timed_out"
    assert runner.store.get_call("c1").state == "timed_out"


async def test_the_pending_queue_is_bounded(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)], store=ApprovalStore(max_pending=2))
    await runner.call("append", {"text": "a"})
    await runner.call("append", {"text": "b"})

    third = await runner.call("append", {"text": "c"})

    assert third["status"] == "error" and "max_pending=2" in third["error"]
    assert len(await runner.pending()) == 2
    assert not effect.happened


# -- the store file ------------------------------------------------------------------------------


def test_the_store_file_is_private_to_its_user(db: str) -> None:
    ApprovalStore(db).close()

    assert stat.S_IMODE(Path(db).stat().st_mode) == 0o600


def test_a_store_in_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        ApprovalStore(tmp_path / "nope" / "approvals.db")


def test_a_store_of_another_schema_version_is_refused(db: str) -> None:
    ApprovalStore(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE meta SET value='999' WHERE key='schema'")

    with pytest.raises(StoreError, match="schema version 999"):
        ApprovalStore(db)


def test_a_file_that_is_not_a_database_is_a_clear_error(db: str) -> None:
    Path(db).write_text("not sqlite " * 100)

    with pytest.raises(StoreError, match="cannot open approval store"):
        ApprovalStore(db)


def test_an_unknown_call_id_is_an_unknown_call_error() -> None:
    with pytest.raises(UnknownCallError, match="nope"):
        ApprovalStore().get_call("nope")
