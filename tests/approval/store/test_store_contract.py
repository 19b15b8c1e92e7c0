"""What every approval store backend promises (StoreProtocol), run on each backend:
paged pending listings, the per-session cap, the transition table, the audit anchor."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    ConfirmationStateError,
    FunctionTool,
    StoreError,
    ToolRunner,
    verify_audit,
)
from sandbox.approval.store import (
    ApprovalStore,
    CallState,
    MemoryApprovalStore,
    open_store,
)
from sandbox.approval.store.states import ENDINGS, TERMINAL, TRANSITIONS, allowed, sources
from tests.conftest import fresh_pg_url

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

Make = Callable[..., ApprovalStore]


@pytest.fixture(params=("memory", "sqlite-file", "postgresql"))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    opened: list[ApprovalStore] = []

    def build(**options: Any) -> ApprovalStore:
        ref: str | Path | None = None
        if request.param == "sqlite-file":
            ref = tmp_path / f"s{len(opened)}.db"
        elif request.param == "postgresql":
            ref = fresh_pg_url(request)
        store = open_store(ref, **options)
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def park(store: ApprovalStore, call_id: str, session: str | None = None) -> str:
    store.open_call(call_id, "t", f"d-{call_id}", {"x": call_id})
    rid, _ = store.park(call_id=call_id, tool="t", args={"x": call_id}, digest=f"d-{call_id}",
                        hint="", payload=None, kind="static", expires_at=None,
                        session_id=session)
    return rid


# -- paged listings ----------------------------------------------------------------------


def test_pending_pages_cover_every_request_once_in_order(make: Make) -> None:
    store = make()
    ids = [park(store, f"c{i}") for i in range(23)]

    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = store.list_pending(limit=10, after=after)
        pages += 1
        assert page.total == 23
        seen += [r.id for r in page.items]
        if page.next is None:
            break
        after = page.next

    assert seen == ids and pages == 3


def test_a_page_is_bounded_and_a_bad_limit_is_a_clear_error(make: Make) -> None:
    store = make()
    with pytest.raises(StoreError, match="between 1 and 500"):
        store.list_pending(limit=0)
    with pytest.raises(StoreError, match="between 1 and 500"):
        store.list_pending(limit=10_000)


def test_an_unknown_cursor_gives_an_empty_page(make: Make) -> None:
    store = make()
    park(store, "c1")

    page = store.list_pending(limit=5, after="cf_nope")

    assert page.items == [] and page.next is None and page.total == 1


def test_pending_pages_filter_by_session(make: Make) -> None:
    store = make()
    mine = [park(store, f"a{i}", "s1") for i in range(3)]
    park(store, "b", "s2")

    page = store.list_pending(limit=50, session_id="s1")

    assert [r.id for r in page.items] == mine and page.total == 3 and page.next is None


def test_answered_requests_leave_the_listing(make: Make) -> None:
    store = make()
    first, second = park(store, "c1"), park(store, "c2")
    store.decide(first, status="denied", outcome="deny", reason="no")

    assert [r.id for r in store.list_pending(limit=5).items] == [second]


# -- the per-session cap -----------------------------------------------------------------


def test_pending_requests_are_capped_per_session(make: Make) -> None:
    store = make(max_pending_per_session=2)
    park(store, "a1", "s1")
    park(store, "a2", "s1")

    with pytest.raises(ConfirmationStateError, match="max_pending_per_session=2"):
        park(store, "a3", "s1")
    park(store, "b1", "s2")  # another session is not held back

    assert store.get_call("a3").state == "new"  # refused: the call did not move
    assert store.list_pending(limit=10).total == 3


# -- the transition table ----------------------------------------------------------------


def test_the_table_only_lets_a_call_start_from_new_or_approved() -> None:
    assert sources(CallState.STARTED) == {CallState.NEW, CallState.APPROVED}
    assert all(not TRANSITIONS[s] for s in ENDINGS)
    assert CallState.IN_DOUBT in TERMINAL and not allowed("in_doubt", "started")


def test_a_finished_call_cannot_be_finished_again_on_any_backend(make: Make) -> None:
    store = make()
    store.open_call("c1", "t", "d", {})
    assert store.start("c1", "d")
    store.finish("c1", "done", {"ok": True})
    store.finish("c1", "failed", {"late": True})

    assert store.get_call("c1").state == "done"
    assert [s for s, _, _ in store.journal("c1")] == ["new", "started", "done"]


def test_every_journalled_move_is_in_the_table(make: Make) -> None:
    store = make()
    rid = park(store, "c1")
    store.decide(rid, status="approved", outcome="approve", start=True)
    store.finish("c1", "done", {})
    states = [s for s, _, _ in store.journal("c1")]

    assert all(allowed(a, b) for a, b in itertools.pairwise(states))


# -- the audit anchor ----------------------------------------------------------------------


def gated(tmp_path: Path) -> FunctionTool:
    def note(text: str) -> dict[str, Any]:
        (tmp_path / "effect.txt").write_text(text)
        return {"ok": True}

    return FunctionTool(note)


async def test_a_truncated_audit_log_is_detected_with_the_store(tmp_path: Path,
                                                                make: Make) -> None:
    store = make()
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([gated(tmp_path)], store=store, audit_path=str(log))
    for i in range(3):
        await runner.call("note", {"text": str(i)})
    assert verify_audit(log, anchor=store).ok
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-2]))  # cut the last two records off

    plain = verify_audit(log)
    anchored = verify_audit(log, anchor=store)

    assert plain.ok and plain.note is not None and "cannot be detected" in plain.note
    assert not anchored.ok and anchored.problem is not None
    assert "truncated" in anchored.problem and f"{len(lines)} records" in anchored.problem


async def test_a_rewritten_audit_log_tail_is_detected_with_the_store(tmp_path: Path,
                                                                     make: Make) -> None:
    store = make()
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([gated(tmp_path)], store=store, audit_path=str(log))
    await runner.call("note", {"text": "a"})
    await runner.call("note", {"text": "b"})
    head = store.audit_head(str(log.resolve()))
    assert head is not None and head[0] == len(log.read_text().splitlines())
    # Rewrite the whole log as a valid chain of fewer, different records.
    log.unlink()
    other = ToolRunner([gated(tmp_path)], store=MemoryApprovalStore(), audit_path=str(log))
    for text in "xyzw"[: head[0]]:
        await other.call("note", {"text": text})

    result = verify_audit(log, anchor=store)

    assert not result.ok and result.problem is not None and "rewritten" in result.problem


def test_sandbox_audit_verify_with_store_reports_the_cut(tmp_path: Path,
                                                        shared_store: str) -> None:
    db = shared_store  # a SQLite file, or a postgresql:// URL
    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([gated(tmp_path)], store_path=str(db), audit_path=str(log))
    runner.call_sync("note", {"text": "a"})
    runner.call_sync("note", {"text": "b"})
    runner.store.close()
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0])

    def cli(*extra: str) -> tuple[int, dict[str, Any]]:
        proc = subprocess.run([sys.executable, "-m", "sandbox", "audit", "verify", str(log),
                               "--json", *extra], capture_output=True, text=True, timeout=60)
        return proc.returncode, json.loads(proc.stdout)

    code, plain = cli()
    code_anchored, anchored = cli("--store", str(db))

    assert code == 0 and "cannot be detected" in plain["note"]
    assert code_anchored == 1 and "truncated" in anchored["problem"] and anchored["anchored"]


# -- an answer is applied only in the session it was asked in ------------------------------
# No session id is a session of its own, never a wildcard: a runner without one once took
# another session's approved request through apply_answers() and resume() and ran it in its
# own workspace (issue 16). SECURITY.md promises this on every store.


def effects_tool(effects: list[str]) -> FunctionTool:
    def touch(name: str) -> dict[str, Any]:
        effects.append(name)
        return {"touched": name}

    return FunctionTool(touch, require_confirmation=True)


SESSIONS = [("s-a", None), (None, "s-b"), ("s-a", "s-b")]


@pytest.mark.parametrize(("asked_in", "applied_in"), SESSIONS)
async def test_an_answer_is_applied_only_in_the_session_it_was_asked_in(
        make: Make, asked_in: str | None, applied_in: str | None) -> None:
    store = make()
    asked: list[str] = []
    other: list[str] = []
    asker = ToolRunner([effects_tool(asked)], store=store, session_id=asked_in)
    stranger = ToolRunner([effects_tool(other)], store=store, session_id=applied_in)
    parked = await asker.call("touch", {"name": "x"}, call_id="c-1")
    rid = parked["confirmation_id"]
    store.submit_answer(rid, {"outcome": "approve"}, decided_by="op", channel="test")

    assert await stranger.apply_answers() == {}
    refused = await stranger.resume(rid)
    assert refused["status"] == "rejected", refused
    assert "nothing was run" in refused["error"]
    refused = await stranger.resume(rid, True)
    assert refused["status"] == "rejected", refused
    assert other == [] and asked == []
    assert store.get_request(rid).status == "pending"  # still the asker's to apply
    assert [r.id for r in await stranger.pending()] == []  # what it may resume: none
    assert [r.id for r in await asker.pending()] == [rid]

    applied = await asker.apply_answers()
    assert applied == {rid: {"touched": "x"}}
    assert asked == ["x"] and other == []


async def test_runners_without_a_session_id_apply_each_others_answers(make: Make) -> None:
    """The one shape without sessions (a queue drained after a restart) keeps working:
    no session id matches no session id."""
    store = make()
    effects: list[str] = []
    first = ToolRunner([effects_tool(effects)], store=store)
    parked = await first.call("touch", {"name": "y"}, call_id="c-2")
    store.submit_answer(parked["confirmation_id"], {"outcome": "approve"})
    later = ToolRunner([effects_tool(effects)], store=store)

    assert [r.id for r in await later.pending()] == [parked["confirmation_id"]]
    assert await later.apply_answers() == {parked["confirmation_id"]: {"touched": "y"}}
    assert effects == ["y"]
