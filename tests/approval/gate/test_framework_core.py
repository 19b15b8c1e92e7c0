"""The gate's pieces every framework adapter uses: would_ask, park, answer/deny from the
framework's side, sessions, and results unwrapped exactly (sandbox.integrations.common)."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox import (
    AutoApprove,
    CallbackConfirmationProvider,
    Decision,
    FunctionTool,
    ToolRunner,
    UnknownToolError,
)
from sandbox.approval import ApprovalStore
from sandbox.integrations.common import answer_call, run_call, session_key
from tests.conftest import SideEffect

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20), pytest.mark.usefixtures("store_backend")]


def append_tool(effect: SideEffect, *, require_confirmation: Any = True) -> FunctionTool:
    def append(text: str) -> dict[str, Any]:
        """Append a line.

        Args:
            text: The line.
        """
        effect.append(text)
        return {"written": text}

    return FunctionTool(append, require_confirmation=require_confirmation)


def shout_tool(effect: SideEffect) -> FunctionTool:
    def shout(text: str) -> str:
        """Shout a line.

        Args:
            text: The line.
        """
        effect.append(text)
        return text.upper()

    return FunctionTool(shout, require_confirmation=lambda text: text.startswith("!"))


def calls_in(runner: ToolRunner) -> list[Any]:
    return list(runner.store.list_calls()) if hasattr(runner.store, "list_calls") else []


# -- would_ask: the verdict, recording nothing ------------------------------------------


async def test_would_ask_agrees_with_call_and_records_nothing(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect, require_confirmation=lambda text: "rm" in text)])

    asks = await runner.would_ask("append", {"text": "rm -rf /"}, call_id="c1")
    runs = await runner.would_ask("append", {"text": "hello"}, call_id="c2")

    assert asks.action == "ask" and asks.asks and bool(asks)
    assert "append" in (asks.hint or "")
    assert runs.action == "run" and not runs
    for call_id in ("c1", "c2"):
        with pytest.raises(LookupError):
            runner.store.get_call(call_id)
    assert await runner.pending() == [] and not effect.happened
    # call() then does what the verdict said.
    assert (await runner.call("append", {"text": "rm -rf /"}, call_id="c1"))["status"] == \
        "awaiting_confirmation"
    assert await runner.call("append", {"text": "hello"}, call_id="c2") == {"written": "hello"}


async def test_would_ask_counts_the_call_ids_history(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    first = await runner.call("append", {"text": "a"}, call_id="c1")

    pending = await runner.would_ask("append", {"text": "a"}, call_id="c1")
    other = await runner.would_ask("append", {"text": "b"}, call_id="c1")

    assert pending.action == "pending" and pending.confirmation_id == first["confirmation_id"]
    assert pending.answer is None
    assert other.action == "refuse" and "other arguments" in (other.reason or "")
    runner.store.submit_answer(first["confirmation_id"], Decision.deny("no"), channel="web")
    answered = await runner.would_ask("append", {"text": "a"}, call_id="c1")
    assert answered.action == "pending" and answered.answer is not None
    assert answered.answer["outcome"] == "deny"
    await runner.resume(first["confirmation_id"])
    assert (await runner.would_ask("append", {"text": "a"}, call_id="c1")).action == "replay"
    assert not effect.happened


async def test_would_ask_sees_remembered_rules_without_counting_a_use(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)], session_id="s1")
    first = await runner.call("append", {"text": "a"}, call_id="c1")
    await runner.resume(first["confirmation_id"], Decision.approve(scope="session"))
    [rule] = runner.rules.rules()

    verdict = await runner.would_ask("append", {"text": "a"}, call_id="c2")

    assert verdict.action == "run" and verdict.rules == (rule.id,)
    assert runner.rules.get(rule.id).uses == rule.uses  # only looked
    assert (await runner.would_ask("append", {"text": "b"})).action == "ask"


async def test_would_ask_refuses_what_call_refuses(effect: SideEffect, tmp_path: Any) -> None:
    from sandbox import BashToolPolicy, ExecuteBashTool

    bash = ExecuteBashTool(workspace=tmp_path,
                           policy=BashToolPolicy(allowed_command_prefixes=("echo",)))
    runner = ToolRunner([append_tool(effect), bash])

    invalid = await runner.would_ask("append", {"txt": "typo"})
    blocked = await runner.would_ask("execute_bash", {"command": "curl http://127.0.0.1:9"})

    assert invalid.action == "refuse" and "txt" in (invalid.reason or "")
    assert blocked.action == "refuse" and blocked.state == "blocked"
    assert (await runner.would_ask("execute_bash", {"command": "echo hi"})).action == "ask"
    with pytest.raises(UnknownToolError):
        await runner.would_ask("nope", {})


# -- park: the question recorded, nothing run -------------------------------------------


async def test_park_records_the_question_and_never_runs_or_consults(effect: SideEffect) -> None:
    asked: list[Any] = []
    runner = ToolRunner([append_tool(effect)],
                        provider=CallbackConfirmationProvider(lambda r: asked.append(r) or True))

    parked = await runner.park("append", {"text": "a"}, call_id="c1")
    again = await runner.park("append", {"text": "a"}, call_id="c1")

    assert parked is not None and parked["status"] == "awaiting_confirmation"
    assert again == parked
    [req] = await runner.pending()
    assert req.id == parked["confirmation_id"] and req.call_id == "c1"
    assert asked == [] and not effect.happened
    free = ToolRunner([append_tool(effect, require_confirmation=False)])
    assert await free.park("append", {"text": "a"}, call_id="c9") is None
    assert not effect.happened


# -- answer / deny from the framework's side --------------------------------------------


async def test_deny_by_call_id_resolves_the_stored_request_and_spends_the_id(
    effect: SideEffect,
) -> None:
    runner = ToolRunner([append_tool(effect)])
    first = await runner.call("append", {"text": "a"}, call_id="c1")

    denied = await runner.deny("c1", "not today")

    assert denied["status"] == "denied" and denied["reason"] == "not today"
    assert await runner.pending() == []
    assert runner.store.get_request(first["confirmation_id"]).status == "denied"
    # Nothing can run it afterwards: not the model's call again, not an approval.
    replay = await runner.call("append", {"text": "a"}, call_id="c1")
    assert replay["status"] == "denied" and replay["replayed"] is True
    late = await runner.answer("c1", True)
    assert late["status"] == "denied"
    assert not effect.happened


async def test_deny_of_a_call_never_asked_records_it_so_it_never_runs(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect, require_confirmation=False)])

    denied = await runner.deny("c1", "rejected in the UI", tool="append", args={"text": "a"})

    assert denied["status"] == "denied"
    after = await runner.call("append", {"text": "a"}, call_id="c1")
    assert after["status"] == "denied" and not effect.happened


async def test_an_approval_planted_for_a_call_never_asked_runs_nothing(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])

    planted = await runner.answer("never-asked", True, args={"text": "a"}, tool="append")

    assert planted["status"] == "rejected" and "never asked" in planted["error"]
    assert not effect.happened


async def test_answer_approves_once_and_refuses_tampered_arguments(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    await runner.call("append", {"text": "a"}, call_id="c1")

    tampered = await runner.answer("c1", True, args={"text": "rm -rf /"})
    assert tampered["status"] == "rejected" and not effect.happened
    assert len(await runner.pending()) == 1  # the real question still stands

    ran = await runner.answer("c1", True, args={"text": "a"})
    twice = await runner.answer("c1", True, args={"text": "a"})

    assert ran == {"written": "a"}
    assert twice["written"] == "a" and twice["replayed"] is True
    assert effect.lines == ["a"]
    late_denial = await runner.deny("c1", "too late")
    assert late_denial["status"] == "rejected" and "already done" in late_denial["error"]


async def test_answer_with_an_edit_runs_the_edited_call_once(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    await runner.call("append", {"text": "a"}, call_id="c1")

    edited = await runner.answer("c1", Decision.edit({"text": "b"}), args={"text": "a"})

    assert edited == {"written": "b"} and effect.lines == ["b"]
    assert await runner.pending() == []


async def test_answer_applies_the_answer_another_channel_recorded(effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    first = await runner.call("append", {"text": "a"}, call_id="c1")
    runner.store.submit_answer(first["confirmation_id"], True, channel="web")

    assert await runner.answer("c1") == {"written": "a"}
    assert effect.lines == ["a"]


# -- sessions --------------------------------------------------------------------------


async def test_for_session_shares_the_store_and_keeps_sessions_apart(effect: SideEffect) -> None:
    base = ToolRunner([append_tool(effect)], store=ApprovalStore())
    alice = base.for_session(session_key("test", "alice"))
    bob = base.for_session(session_key("test", "bob"))

    assert alice is base.for_session("test:alice") and alice.store is base.store
    asked = await alice.call("append", {"text": "a"}, call_id="c1")

    refused = await bob.answer("c1", True)
    assert refused["status"] == "rejected" and not effect.happened
    assert await alice.answer(asked["confirmation_id"], True) == {"written": "a"}
    with pytest.raises(ValueError):
        session_key("test", None)


# -- results as the framework expects them ---------------------------------------------


async def test_run_call_returns_the_tools_own_value_and_never_replayed(effect: SideEffect) -> None:
    runner = ToolRunner([shout_tool(effect)], provider=AutoApprove())

    first = await run_call(runner, "shout", {"text": "hi"}, "c1")
    again = await run_call(runner, "shout", {"text": "hi"}, "c1")
    asked = await run_call(runner, "shout", {"text": "!x"}, "c2")

    assert first.value == "HI" and first.ran and first.status is None
    assert again.value == "HI" and again.replayed and not again.ran
    assert "replayed" not in again.result
    assert asked.value == "!X" and asked.ran
    assert effect.lines == ["hi", "!x"]


async def test_run_call_maps_a_reused_call_id_to_rejected(effect: SideEffect) -> None:
    runner = ToolRunner([shout_tool(effect)])
    await run_call(runner, "shout", {"text": "hi"}, "c1")

    reused = await run_call(runner, "shout", {"text": "other"}, "c1")

    assert reused.status == "rejected" and "Nothing was run" in reused.message
    assert effect.lines == ["hi"]


async def test_run_call_applies_an_answer_given_on_another_channel(effect: SideEffect) -> None:
    runner = ToolRunner([shout_tool(effect)])
    first = await run_call(runner, "shout", {"text": "!go"}, "c1")
    assert first.awaiting and first.confirmation_id

    runner.store.submit_answer(first.confirmation_id, Decision.deny("no shouting"),
                               channel="cli")
    denied = await run_call(runner, "shout", {"text": "!go"}, "c1")

    assert denied.denied and denied.message == "no shouting"
    assert not effect.happened


async def test_answer_call_outcome(effect: SideEffect) -> None:
    runner = ToolRunner([shout_tool(effect)])
    await run_call(runner, "shout", {"text": "!go"}, "c1")

    done = await answer_call(runner, "c1", True, args={"text": "!go"})

    assert done.value == "!GO" and done.ran
    unknown = await answer_call(runner, "zzz", True)
    assert unknown.status == "rejected"


async def test_answer_call_applying_an_answer_already_applied_gets_the_record(
        effect: SideEffect) -> None:
    runner = ToolRunner([append_tool(effect)])
    first = await runner.call("append", {"text": "a"}, call_id="c1")
    runner.store.submit_answer(first["confirmation_id"], True, channel="web")
    assert await runner.answer("c1") == {"written": "a"}  # applied by someone else

    again = await answer_call(runner, "c1", None)

    assert again.value == {"written": "a"} and again.replayed
    assert effect.lines == ["a"]


async def test_a_framework_denial_is_audited_with_its_channel_and_reason(
        effect: SideEffect, tmp_path: Any) -> None:
    import json

    log = tmp_path / "audit.jsonl"
    runner = ToolRunner([append_tool(effect)], audit_path=str(log))
    await runner.call("append", {"text": "a"}, call_id="c1")

    await runner.deny("c1", "rejected in the UI", channel="openai-agents", decided_by="erin")
    await runner.deny("c2", "never asked", tool="append", args={"text": "b"})

    events = [json.loads(line) for line in log.read_text().splitlines()]
    decided = [e for e in events if e.get("event") == "tool.decided"]
    assert [(e["call_id"], e["decision"], e["reason"], e["channel"]) for e in decided] == [
        ("c1", "denied", "rejected in the UI", "openai-agents"),
        ("c2", "denied", "never asked", "framework")]
    assert decided[0]["decided_by"] == "erin"
    assert [e["call_id"] for e in events if e.get("event") == "tool.requested"] == ["c1", "c2"]


async def test_a_call_id_from_another_session_is_never_replayed_nor_run(
        effect: SideEffect) -> None:
    # Found by fw-more: session B read session A's output by reusing A's call id.
    from sandbox import DuplicateCallError

    def secret(q: str) -> dict[str, Any]:
        """Read a secret."""
        effect.append(q)
        return {"answer": "A's data"}

    base = ToolRunner([FunctionTool(secret)])
    alice, bob = base.for_session("A"), base.for_session("B")
    assert await alice.call("secret", {"q": "x"}, "call_1") == {"answer": "A's data"}

    with pytest.raises(DuplicateCallError, match="another session"):
        await bob.call("secret", {"q": "x"}, "call_1")
    reused = await run_call(bob, "secret", {"q": "x"}, "call_1")
    assert reused.status == "rejected" and "A's data" not in str(reused.result)
    verdict = await bob.would_ask("secret", {"q": "x"}, "call_1")
    assert verdict.action == "refuse" and "another session" in (verdict.reason or "")
    answered = await bob.answer("call_1", True)
    assert answered["status"] == "rejected" and "A's data" not in str(answered)
    denied = await bob.deny("call_1", "mine now")
    assert denied["status"] == "rejected"
    assert alice.store.get_call("call_1").state == "done"
    assert effect.lines == ["x"]
