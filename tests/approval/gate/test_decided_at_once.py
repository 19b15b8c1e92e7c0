"""An answer known before asking (AutoApprove, remembered rules) on a store of this
process is recorded in one store step (`MemoryApprovalStore.open_decided`): the records,
the journal and the guarantees must be exactly those of the general path, which parks
the request and decides it one step after the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sandbox import AutoApprove, FunctionTool, MemoryApprovalStore, ToolRunner
from sandbox.approval.gate.results import NotRun, Ran, Replayed
from sandbox.audit import AuditLog

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def add(n: int) -> dict[str, Any]:
    return {"n": n + 1}


async def plain(n: int) -> int:
    return n * 2


def runner(*, fast: bool, store: MemoryApprovalStore | None = None,
           **kwargs: Any) -> ToolRunner:
    made = ToolRunner([FunctionTool(add, require_confirmation=True),
                       FunctionTool(plain, require_confirmation=True)],
                      provider=AutoApprove(), store=store or MemoryApprovalStore(),
                      session_id="s1", **kwargs)
    assert made._open_decided is not None
    if not fast:
        made._open_decided = None  # the general path: park, then decide
    return made


def records(r: ToolRunner, call_id: str) -> dict[str, Any]:
    """Everything the store holds about a call, with its ids and times left out."""
    store = r.store
    rec = store.get_call(call_id)
    assert rec.request_id is not None
    req = store.get_request(rec.request_id)
    rid = req.id
    decision = store.request_decision(rid)
    assert decision is not None
    decision.pop("decided_at")
    journal = [(state, (detail or "").replace(rid, "<rid>"))
               for state, _at, detail in store.journal(call_id)]
    return {
        "call": (rec.tool, rec.digest, rec.args, rec.state, rec.result, rec.session_id),
        "request": req.model_dump(exclude={"id", "created_at"}),
        "decision": decision,
        "journal": journal,
        "count": store.count_requests(call_id),
    }


async def test_the_records_are_those_of_the_general_path() -> None:
    fast, general = runner(fast=True), runner(fast=False)
    for r in (fast, general):
        assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2}
    assert records(fast, "c1") == records(general, "c1")
    journal = records(fast, "c1")["journal"]
    assert [state for state, _ in journal] == ["new", "awaiting", "approved", "started",
                                               "done"]
    assert records(fast, "c1")["decision"]["decided_by"] == "auto-approve"


async def test_a_remembered_rule_still_answers_first_and_its_use_is_counted() -> None:
    results = []
    for fast in (True, False):
        r = runner(fast=fast)
        rule = r.rules.add(tool="add", kind="tool", scope="always", ttl=60)
        assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2}
        rec = records(r, "c1")
        assert rec["decision"]["decided_by"] == rule.id
        assert rec["decision"]["channel"] == "rule"
        assert r.rules.get(rule.id).uses == 1
        results.append(json.loads(json.dumps(rec, default=str).replace(rule.id, "<rule>")))
    assert results[0] == results[1]


async def test_a_call_id_runs_once_and_replays_its_record() -> None:
    r = runner(fast=True)
    assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2}
    assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2, "replayed": True}
    assert [s for s, _ in records(r, "c1")["journal"]].count("started") == 1
    assert records(r, "c1")["count"] == 1


async def test_a_full_pending_bound_is_met_as_on_the_general_path() -> None:
    outcomes = []
    for fast in (True, False):
        store = MemoryApprovalStore(max_pending=1)
        deferred = ToolRunner([FunctionTool(add, require_confirmation=True)], store=store,
                              session_id="s1")
        waiting = await deferred.call("add", {"n": 0}, call_id="waits")
        assert waiting["status"] == "awaiting_confirmation"
        r = runner(fast=fast, store=store)
        outcome = await r.call_outcome("add", {"n": 1}, call_id="c1")
        assert isinstance(outcome, NotRun)
        assert "already pending" in outcome.message
        outcomes.append((outcome.to_dict(), store.get_call("c1").state))
    assert outcomes[0] == outcomes[1]


async def test_an_audited_call_writes_every_event(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    r = runner(fast=True, audit=AuditLog(str(path)))
    assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2}
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events == ["tool.requested", "tool.decided", "tool.started", "tool.finished"]


async def test_the_typed_outcome_carries_the_tools_own_value() -> None:
    r = runner(fast=True)
    ran = await r.call_outcome("plain", {"n": 2}, call_id="c1")
    assert isinstance(ran, Ran) and ran.value == 4 and ran.to_dict() == {"result": 4}
    again = await r.call_outcome("plain", {"n": 2}, call_id="c1")
    assert isinstance(again, Replayed) and again.state == "done"
    assert again.to_dict() == {"result": 4, "replayed": True}
    assert await r.call("plain", {"n": 2}, call_id="c1") == {"result": 4, "replayed": True}


class Never(FunctionTool):
    async def check_require_confirmation(self, args: dict[str, Any],
                                         tool_context: Any) -> bool:
        return False


async def test_a_tools_own_hooks_are_never_bypassed() -> None:
    """The verdict known without awaiting (`gate.check.known`) holds only for a tool
    whose hooks are FunctionTool's own: an overridden predicate or an instance's own
    precheck is asked."""
    never = Never(add, require_confirmation=True)
    patched = FunctionTool(plain, require_confirmation=False)

    async def refuse(args: dict[str, Any]) -> dict[str, Any] | None:
        return {"error": "refused by the instance's own precheck"}

    patched.precheck = refuse  # type: ignore[method-assign]
    r = ToolRunner([never, patched], store=MemoryApprovalStore())
    assert await r.call("add", {"n": 1}) == {"n": 2}  # the subclass says no human
    assert await r.call("plain", {"n": 1}) == {
        "status": "blocked", "error": "refused by the instance's own precheck"}


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("where", ["instance", "class"])
@pytest.mark.parametrize("step", ["open_call", "park", "decide"])
async def test_a_step_patched_on_the_store_is_called(
        monkeypatch: pytest.MonkeyPatch, step: str, where: str, when: str) -> None:
    """The one-step path stands for open_call, park and decide only while they are the
    store's own: a step patched on the instance, or on the class after the runner was
    built (a deployment's hook that logs or checks each decision, a test's spy), is
    called, as on the general path. The check was made once, at construction, and of
    the class only."""
    class Store(MemoryApprovalStore):
        pass

    store = Store()
    seen: list[str] = []
    original = getattr(store, step)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(step)
        return original(*args, **kwargs)

    def patch() -> None:
        if where == "instance":
            monkeypatch.setattr(store, step, spy)
        else:
            monkeypatch.setattr(Store, step, lambda self, *a, **k: spy(*a, **k))

    if when == "before":
        patch()
    r = ToolRunner([FunctionTool(add, require_confirmation=True)], provider=AutoApprove(),
                   store=store, session_id="s1")
    if when == "after":
        patch()
    assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2}
    assert seen == [step]
    assert [s for s, _at, _ in store.journal("c1")] == [
        "new", "awaiting", "approved", "started", "done"]


async def test_a_capability_a_store_subclass_adds_is_used() -> None:
    """A store subclass that adds a capability the general path uses instead of the
    three steps (``open_and_park``: `OpensAndParks`) has it called: the one-step path
    stands only for steps it knows are the store's own."""
    seen: list[str] = []

    class Store(MemoryApprovalStore):
        def open_and_park(self, *, call_id: str, tool: str, digest: str,
                          args: dict[str, Any], session_id: str | None,
                          args_json: str | None, hint: str, payload: Any, kind: str,
                          expires_at: float | None, details: dict[str, Any] | None,
                          edited_from: str | None) -> Any:
            seen.append("open_and_park")
            rec = self.open_call(call_id, tool, digest, args, session_id,
                                 args_json=args_json)
            if rec is not None:
                return rec
            return self.park(call_id=call_id, tool=tool, args=args, digest=digest,
                             hint=hint, payload=payload, kind=kind, expires_at=expires_at,
                             details=details, edited_from=edited_from,
                             session_id=session_id, args_json=args_json)

    store = Store()
    r = ToolRunner([FunctionTool(add, require_confirmation=True)], provider=AutoApprove(),
                   store=store, session_id="s1")
    assert await r.call("add", {"n": 1}, call_id="c1") == {"n": 2}
    assert seen == ["open_and_park"]
