"""Single-use grants, the approved → started → done journal, and a store that survives
restarts and is answered from other processes."""

from __future__ import annotations

import json
import sqlite3
import stat
from collections.abc import Callable
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
    UnknownConfirmationError,
)
from sandbox.approval.store import MemoryApprovalStore, SQLiteApprovalStore, open_store
from tests.conftest import Processes, SideEffect

MakeStore = Callable[..., ApprovalStore]

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


async def test_resuming_twice_runs_the_tool_at_most_once(effect: SideEffect,
                                                         make_store: MakeStore) -> None:
    runner = ToolRunner([append_tool(effect)], store=make_store())
    parked = await runner.call("append", {"text": "a"}, call_id="c1")

    first = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))
    second = await runner.resume(parked["confirmation_id"], ToolConfirmation(confirmed=True))

    assert first == {"written": "a"}
    assert second["status"] == "rejected" and "already answered" in second["error"]
    assert effect.lines == ["a"]


async def test_a_denial_cannot_be_overturned_by_a_later_approval(effect: SideEffect,
                                                                 store_backend: str) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})
    await runner.resume(parked["confirmation_id"], Decision.deny("no"))

    again = await runner.resume(parked["confirmation_id"], True)

    assert again["status"] == "rejected"
    assert not effect.happened


async def test_resuming_with_other_arguments_runs_nothing_and_the_request_stays_pending(
    effect: SideEffect, store_backend: str,
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


async def test_a_grant_is_bound_to_its_call_and_digest_in_the_store(
        make_store: MakeStore) -> None:
    store = make_store()
    store.open_call("c1", "t", "digest-a", {"x": 1})

    assert store.start("c1", "digest-b") is False  # another digest: not the call opened
    assert store.start("c1", "digest-a") is True
    assert store.start("c1", "digest-a") is False  # claimed once


# -- the journal ----------------------------------------------------------------------------


async def test_journal_of_an_approved_call_reads_approved_started_done(
    effect: SideEffect, make_store: MakeStore
) -> None:
    runner = ToolRunner([append_tool(effect)], store=make_store())
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    await runner.resume(parked["confirmation_id"], True)

    assert states(runner, "c1") == ["new", "awaiting", "approved", "started", "done"]
    assert runner.store.get_call("c1").result == {"written": "a"}


async def test_journal_of_a_provider_approved_call_reads_approved_started_done(
    effect: SideEffect, store_backend: str,
) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoApprove())
    await runner.call("append", {"text": "a"}, call_id="c1")

    assert states(runner, "c1") == ["new", "awaiting", "approved", "started", "done"]


async def test_journal_of_a_denied_call_never_shows_started(effect: SideEffect,
                                                            store_backend: str) -> None:
    runner = ToolRunner([append_tool(effect)], provider=AutoDeny("no"))
    await runner.call("append", {"text": "a"}, call_id="c1")

    assert states(runner, "c1") == ["new", "awaiting", "denied"]


async def test_journal_records_who_decided(effect: SideEffect, store_backend: str) -> None:
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


async def test_a_second_submitted_answer_is_refused(effect: SideEffect,
                                                    store_backend: str) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})
    runner.store.submit_answer(parked["confirmation_id"], Decision.deny("no"))

    with pytest.raises(ConfirmationStateError, match="answered once"):
        runner.store.submit_answer(parked["confirmation_id"], Decision.approve())
    assert (await runner.resume(parked["confirmation_id"]))["status"] == "denied"
    assert not effect.happened


async def test_a_malformed_submitted_answer_is_refused_and_does_not_block_the_real_one(
    effect: SideEffect, store_backend: str,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    with pytest.raises(ConfigurationError, match="confirm"):
        runner.store.submit_answer(parked["confirmation_id"], {"confirm": True})
    runner.store.submit_answer(parked["confirmation_id"], {"confirmed": True})

    assert await runner.resume(parked["confirmation_id"]) == {"written": "a"}


async def test_resume_without_an_answer_and_none_recorded_is_a_clear_error(
    effect: SideEffect, store_backend: str,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    parked = await runner.call("append", {"text": "a"})

    with pytest.raises(ConfirmationStateError, match="no recorded answer"):
        await runner.resume(parked["confirmation_id"])


# -- expiry and bounds -------------------------------------------------------------------------


async def test_an_expired_request_is_recorded_as_timed_out_never_approved(
    effect: SideEffect, store_backend: str,
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


async def test_the_pending_queue_is_bounded(effect: SideEffect, store_backend: str) -> None:
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


async def test_a_version_1_store_file_is_migrated_and_its_pending_requests_still_run(
    effect: SideEffect, db: str
) -> None:
    runner = ToolRunner([append_tool(effect)], store_path=db)
    parked = await runner.call("append", {"text": "a"}, call_id="c1")
    runner.store.close()
    with sqlite3.connect(db) as raw:  # what version 1 of the library wrote
        raw.execute("DROP TRIGGER calls_journal_new")
        raw.execute("DROP TRIGGER calls_journal_state")
        raw.execute("ALTER TABLE calls DROP COLUMN note")
        raw.execute("UPDATE meta SET value='1' WHERE key='schema'")

    later = ToolRunner([append_tool(effect)], store=ApprovalStore(db))

    assert await later.resume(parked["confirmation_id"], True) == {"written": "a"}
    assert states(later, "c1") == ["new", "awaiting", "approved", "started", "done"]
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == ("3",)


def test_without_update_returning_sqlite_behaves_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox.approval.store import sqlite as store_module

    expected = _script(MemoryApprovalStore())
    monkeypatch.setattr(store_module, "_HAS_RETURNING", False)

    assert _script(ApprovalStore(":memory:")) == expected


def test_a_file_that_is_not_a_database_is_a_clear_error(db: str) -> None:
    Path(db).write_text("not sqlite " * 100)

    with pytest.raises(StoreError, match="cannot open approval store"):
        ApprovalStore(db)


def test_an_unknown_call_id_is_an_unknown_call_error(make_store: MakeStore) -> None:
    with pytest.raises(UnknownCallError, match="nope"):
        make_store().get_call("nope")


# -- the backends ---------------------------------------------------------------------------------


def test_the_backend_follows_the_path(tmp_path: Path) -> None:
    memory = ApprovalStore()
    sqlite_memory = ApprovalStore(":memory:")
    on_file = ApprovalStore(tmp_path / "approvals.db")

    assert type(memory) is MemoryApprovalStore and memory.path is None
    assert type(sqlite_memory) is SQLiteApprovalStore and sqlite_memory.path is None
    assert type(on_file) is SQLiteApprovalStore and on_file.path == tmp_path / "approvals.db"
    assert all(isinstance(s, ApprovalStore) for s in (memory, sqlite_memory, on_file))
    assert type(ToolRunner([]).store) is MemoryApprovalStore
    assert type(ToolRunner([], store_path=str(tmp_path / "b.db")).store) is SQLiteApprovalStore
    assert type(open_store()) is MemoryApprovalStore
    assert type(open_store(":memory:")) is SQLiteApprovalStore
    assert type(open_store(tmp_path / "c.db")) is SQLiteApprovalStore
    with pytest.raises(StoreError, match="ApprovalStore"):
        MemoryApprovalStore(tmp_path / "approvals.db")
    with pytest.raises(StoreError, match="max_pending"):
        ApprovalStore(max_pending=0)


def test_a_closed_memory_store_refuses_to_work() -> None:
    store = ApprovalStore()
    store.open_call("c1", "t", "d", {})
    store.close()

    with pytest.raises(StoreError, match="closed"):
        store.start("c1", "d")


def _script(store: ApprovalStore) -> list[Any]:
    """Every store operation the gate uses, with its outcome or error, ids normalised."""
    import re
    import time

    from sandbox.approval.rules import RuleBook

    seen: list[Any] = []
    names: dict[str, str] = {}

    def norm(value: Any) -> Any:
        text = json.dumps(value, default=repr, sort_keys=True)
        for real, alias in names.items():
            text = text.replace(real, alias)
        return json.loads(re.sub(r"\d{4}-\d\d-\d\dT[\d:.+]+", "<time>", text))

    def name(rid: str) -> str:
        names.setdefault(rid, f"<id{len(names)}>")
        return rid

    def step(label: str, fn: Callable[[], Any]) -> Any:
        try:
            out = fn()
        except Exception as exc:  # the error is part of the behaviour compared
            seen.append((label, type(exc).__name__, norm(str(exc))))
            return None
        shown: Any = out
        if hasattr(out, "model_dump"):
            shown = out.model_dump(exclude={"created_at", "expires_at"})
        elif hasattr(out, "__dataclass_fields__"):
            shown = {k: v for k, v in vars(out).items()
                     if k not in ("created", "updated", "owner")}
        elif isinstance(out, list):
            shown = [o.model_dump(exclude={"created_at", "expires_at"})
                     if hasattr(o, "model_dump") else o for o in out]
        seen.append((label, norm(shown)))
        return out

    def ask(call_id: str, expires: float | None = None, **kw: Any) -> str:
        req = store.add_request(call_id=call_id, tool="t", args={"x": call_id},
                                digest=f"d-{call_id}", hint="h", payload=kw.get("payload"),
                                kind="static", expires_at=expires, details=kw.get("details"))
        seen.append(("asked", call_id, norm(req.model_dump(exclude={"id", "created_at",
                                                                    "expires_at"}))))
        return name(req.id)

    for cid in ("c1", "c2", "c3", "c4", "c5", "c6"):
        step(f"open {cid}", lambda cid=cid: store.open_call(cid, "t", f"d-{cid}", {"x": cid}))
    step("open c1 again", lambda: store.open_call("c1", "t", "d-c1", {"x": "c1"}))
    step("start wrong digest", lambda: store.start("c1", "d-other"))
    r1 = ask("c1", payload={"p": [1, 2]}, details={"why": "risky"})
    step("pending", store.pending)
    step("count", lambda: store.count_requests("c1"))
    step("submit", lambda: store.submit_answer(r1, {"confirmed": True}, decided_by="ann",
                                               channel="web"))
    step("submit twice", lambda: store.submit_answer(r1, {"confirmed": False}))
    step("answer", lambda: store.get_answer(r1))
    step("states", lambda: store.answer_states([r1, "cf_nope"]))
    step("answered", store.answered_requests)
    step("approve+claim", lambda: store.decide(r1, status="approved", outcome="approve",
                                               decided_by="ann", channel="web",
                                               decision={"outcome": "approve"}, start=True))
    step("answer after decision", lambda: store.get_answer(r1))
    step("approve again", lambda: store.decide(r1, status="approved", start=True))
    step("claim again", lambda: store.start("c1", "d-c1"))
    step("finish c1", lambda: store.finish("c1", "done", {"r": {1}, "s": "é"}))
    step("finish c1 again", lambda: store.finish("c1", "failed", {"late": True}))
    step("call c1", lambda: store.get_call("c1"))
    step("decision c1", lambda: {k: v for k, v in (store.request_decision(r1) or {}).items()
                                 if k != "decided_at"})
    r2 = ask("c2", expires=time.time() - 1)
    step("approve expired", lambda: store.decide(r2, status="approved", start=True))
    step("request c2", lambda: store.get_request(r2).status)
    step("submit expired", lambda: store.submit_answer(r2, True))
    r3 = ask("c3")
    step("edit", lambda: store.decide(r3, status="edited", outcome="edit", decided_by="bo"))
    step("grant", lambda: store.grant("c3", "d-edited", {"x": "edited"}))
    step("grant again", lambda: store.grant("c3", "d-edited", {"x": "edited"}))
    step("start original", lambda: store.start("c3", "d-c3"))
    step("start edited", lambda: store.start("c3", "d-edited"))
    step("start edited again", lambda: store.start("c3", "d-edited"))
    r4 = ask("c4")
    step("deny", lambda: store.decide(r4, status="denied", outcome="deny", reason="no",
                                      call_result={"status": "denied"}))
    step("ask for a finished call", lambda: ask("c4"))
    r5 = ask("c5", expires=time.time() + 0.05)
    time.sleep(0.1)
    step("pending after expiry", store.pending)
    step("request c5", lambda: store.get_request(r5).status)
    r6 = ask("c6")
    step("end c6 while awaiting", lambda: store.finish("c6", "error", {"status": "error"}))
    step("approve+claim an ended call", lambda: store.decide(r6, status="approved",
                                                             start=True))
    step("request c6 still pending", lambda: store.get_request(r6).status)
    step("unknown decide", lambda: store.decide("cf_nope", status="approved"))
    step("unknown request", lambda: store.get_request("cf_nope"))
    step("unknown call", lambda: store.get_call("nope"))
    step("unknown journal", lambda: store.journal("nope"))
    step("in doubt", store.in_doubt)
    for cid in ("c1", "c2", "c3", "c4", "c5", "c6"):
        step(f"journal {cid}", lambda cid=cid: [(s, d) for s, _, d in store.journal(cid)])
        step(f"state {cid}", lambda cid=cid: store.get_call(cid).state)
    book = RuleBook(store)
    rule = book.add(tool="t", kind="args", args={"x": "c7"}, scope="always", ttl=60)
    name(rule.id)
    step("match", lambda: [r.id for r in book.match("t", {"x": "c7"}, subjects=None,
                                                    session_id=None) or []])
    step("no match", lambda: book.match("t", {"x": "c8"}, subjects=None, session_id=None))
    step("revoke", lambda: book.revoke(rule.id, by="eve").model_dump(
        include={"id", "revoked_by", "uses", "state"}))
    step("revoke unknown", lambda: book.revoke("rule_nope"))
    step("rules", lambda: [(r.id, r.state, r.uses) for r in book.rules(include_inactive=True)])
    return seen


def test_every_backend_behaves_the_same(tmp_path: Path) -> None:
    runs = {
        "memory": _script(MemoryApprovalStore()),
        "sqlite-memory": _script(ApprovalStore(":memory:")),
        "sqlite-file": _script(ApprovalStore(tmp_path / "approvals.db")),
    }

    assert runs["memory"] == runs["sqlite-memory"] == runs["sqlite-file"]
    seen = {entry[0]: entry[1:] for entry in runs["memory"]}
    assert seen["journal c1"] == ([["new", None], ["awaiting", "<id0>"],
                                   ["answered", "<id0> by ann"], ["approved", "<id0> by ann"],
                                   ["started", "d-c1"], ["done", None]],)
    assert seen["approve+claim an ended call"][0] == "ConfirmationStateError"
    assert seen["request c6 still pending"] == ("pending",)  # the refusal recorded nothing
    assert seen["start edited"] == (True,) and seen["start edited again"] == (False,)


@pytest.mark.parametrize("backend", ["memory", "sqlite-memory"])
def test_finished_calls_beyond_max_history_are_forgotten_never_pending_ones(
        backend: str) -> None:
    store = MemoryApprovalStore(max_history=10) if backend == "memory" else ApprovalStore(
        ":memory:", max_history=10)
    store.open_call("waiting", "t", "d", {})
    store.add_request(call_id="waiting", tool="t", args={}, digest="d", hint="",
                      payload=None, kind="static", expires_at=None)
    for i in range(2047):
        store.open_call(f"c{i}", "t", "d", {})
        assert store.start(f"c{i}", "d")
        store.finish(f"c{i}", "done", {"i": i})

    kept = []
    for i in range(2047):
        try:
            kept.append(store.get_call(f"c{i}").call_id)
        except UnknownCallError:
            pass
    assert kept == [f"c{i}" for i in range(2036, 2047)]
    assert store.get_call("waiting").state == "awaiting"
    assert [r.call_id for r in store.pending()] == ["waiting"]
    with pytest.raises(UnknownConfirmationError):
        store.decide("cf_nope", status="denied")
