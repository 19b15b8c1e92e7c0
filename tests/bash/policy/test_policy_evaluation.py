"""`BashToolPolicy.evaluate`: one typed value per command (allow / confirm / block, the
rule, the matched prefixes, the rule subjects, the reason), of which `check`,
`needs_confirmation` and `rule_subjects` are views, kept in one cache (the policy's)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from sandbox import CallbackConfirmationProvider, ExecuteBashTool, ToolRunner
from sandbox.bash.policy import BashToolPolicy, Decision, Evaluation, PolicyDecision, Rule
from tests.paths import TESTS

ANY = BashToolPolicy()
LS = BashToolPolicy(allowed_command_prefixes=("ls",))
TOOLS = BashToolPolicy(allowed_command_prefixes=("ls", "wc -l", "git status", "echo"),
                       blocked_operators=(";",), no_confirmation_prefixes=("ls", "echo"))
GIT_SPECS = BashToolPolicy(allowed_command_prefixes=("git",), program_specs="builtin")
TEST_AND_LS = BashToolPolicy(allowed_command_prefixes=("[", "ls"))


# -- each rule of POLICY.md, as the evaluation names it -----------------------------------

BLOCKED = [
    # (policy, command, rule, the simple command at fault, the token at fault)
    (TOOLS, "ls; wc -l", Rule.R1, None, ";"),
    (LS, "ls; id", Rule.R2, "id", "id"),
    (LS, "lsblk", Rule.R3, "lsblk", "lsblk"),
    (LS, "/bin/ls", Rule.R4, "/bin/ls", "/bin/ls"),
    (LS, "LD_PRELOAD=x ls", Rule.R5, "LD_PRELOAD=x ls", "LD_PRELOAD=x"),
    (LS, "env ls", Rule.R5, "env ls", "env"),
    (LS, "ls\x00", Rule.R6, None, "\\0"),
    (LS, "echo (", Rule.R6, None, "("),
    (GIT_SPECS, "git -c core.pager=x log", Rule.R7, "git -c core.pager=x log", "-c"),
    (GIT_SPECS, "git status --frobnicate", Rule.R7, "git status --frobnicate", "--frobnicate"),
    (ANY, "ls\r\nid", Rule.R8, None, "\\r"),
    (TEST_AND_LS, "[b];ls -n", Rule.R9, None, "[b];ls -n"),
    (LS, "   ", Rule.EMPTY, None, None),
]


@pytest.mark.parametrize(("policy", "command", "rule", "at", "token"), BLOCKED,
                         ids=[f"{c[2].value}-{c[1]!r}" for c in BLOCKED])
def test_a_blocked_command_names_its_rule_command_and_token(
    policy: BashToolPolicy, command: str, rule: Rule, at: str | None, token: str | None
) -> None:
    evaluation = policy.evaluate(command)
    assert evaluation.decision is Decision.BLOCK
    assert evaluation.rule is rule
    assert (evaluation.command, evaluation.token) == (at, token)
    assert evaluation.prefixes == () and evaluation.subjects == ()
    assert not evaluation.allowed and evaluation.needs_confirmation
    if rule is Rule.EMPTY:
        assert evaluation.reason.startswith("blocked: ")
    else:
        assert evaluation.reason.startswith(f"blocked by {rule.value} ({rule.meaning}): ")
    # check's decision is the same facts; its rule is the enum's string (None: EMPTY)
    decision = policy.check(command)
    assert decision == PolicyDecision(
        allowed=False, reason=evaluation.reason,
        rule=None if rule is Rule.EMPTY else rule.value,
        command=at, token=token, commands=evaluation.commands)  # fmt: skip
    assert decision.rule == (None if rule is Rule.EMPTY else rule)  # Rule.R7 == "R7"


def test_a_spec_refusal_and_a_hardening_refusal_are_both_r7_and_say_which() -> None:
    spec = GIT_SPECS.evaluate("git status --frobnicate")
    table = GIT_SPECS.evaluate("git -c core.pager=x log")
    assert spec.rule is table.rule is Rule.R7
    assert "[spec 'git status']" in spec.reason and "[spec" not in table.reason


ALLOWED = [
    # (policy, command, decision, prefixes, subjects)
    (TOOLS, "ls -la", Decision.ALLOW, ("ls",), (("ls", "-la"),)),
    (TOOLS, "ls | wc -l", Decision.CONFIRM, ("ls", "wc -l"), (("ls",), ("wc", "-l"))),
    (TOOLS, "ls && ls -a | wc -l", Decision.CONFIRM, ("ls", "wc -l"),
     (("ls",), ("ls", "-a"), ("wc", "-l"))),
    (TOOLS, "ls 2>/dev/null", Decision.ALLOW, ("ls",), (("ls",),)),
    # a write: a human confirms, and no remembered rule covers it
    (TOOLS, "ls > out", Decision.CONFIRM, ("ls",), ()),
    (TOOLS, "git status", Decision.CONFIRM, ("git status",), (("git", "status"),)),
    # a heredoc is text on stdin, not a file written: no human needed, but no remembered
    # rule covers it either
    (TOOLS, "echo <<E\nx\nE", Decision.ALLOW, ("echo",), ()),
    (ANY, "f() { ls; }; f", Decision.CONFIRM, ("*",), ()),
    (BashToolPolicy(no_confirmation_prefixes=("*",)), "rm -rf build", Decision.ALLOW, ("*",),
     (("rm", "-rf", "build"),)),
    (LS, "2>/dev/null", Decision.CONFIRM, (), ()),
]


@pytest.mark.parametrize(("policy", "command", "decision", "prefixes", "subjects"), ALLOWED,
                         ids=[repr(c[1]) for c in ALLOWED])
def test_an_allowed_command_carries_its_prefixes_subjects_and_whether_to_ask(
    policy: BashToolPolicy, command: str, decision: Decision,
    prefixes: tuple[str, ...], subjects: tuple[tuple[str, ...], ...],
) -> None:
    evaluation = policy.evaluate(command)
    assert (evaluation.decision, evaluation.prefixes, evaluation.subjects) == (
        decision, prefixes, subjects)
    assert evaluation.rule is None and evaluation.command is None and evaluation.token is None
    assert evaluation.allowed
    assert evaluation.reason == policy.check(command).reason
    if prefixes and prefixes != ("*",):
        assert all(repr(p) in evaluation.reason for p in prefixes)


def test_an_internal_error_blocks_under_r6_and_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sandbox.bash.policy.evaluate as module

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    policy = BashToolPolicy(allowed_command_prefixes=("ls",))
    monkeypatch.setattr(module, "parse", broken)
    evaluation = policy.evaluate("ls")
    assert (evaluation.decision, evaluation.rule) == (Decision.BLOCK, Rule.R6)
    assert "internal error RuntimeError: boom" in evaluation.reason
    assert policy.needs_confirmation("ls") and policy.rule_subjects("ls") == ()
    monkeypatch.undo()
    assert policy.evaluate("ls").allowed  # the failure was not cached


def test_the_evaluation_is_immutable_and_compares_by_its_facts() -> None:
    evaluation = TOOLS.evaluate("ls -la")
    with pytest.raises(dataclasses.FrozenInstanceError):
        evaluation.decision = Decision.BLOCK  # type: ignore[misc]
    fresh = BashToolPolicy(**{f.name: getattr(TOOLS, f.name)
                              for f in dataclasses.fields(TOOLS)}).evaluate("ls -la")
    assert fresh == evaluation and fresh is not evaluation
    assert hash(fresh) == hash(evaluation)
    assert isinstance(evaluation, Evaluation)
    assert "policy_decision" not in repr(evaluation) and "script" not in repr(evaluation)


# -- check, needs_confirmation and rule_subjects are views of evaluate --------------------


def _corpora() -> list[Path]:
    paths = [TESTS / "data" / "bash-policy-sample.json", Path("/work/shared/corpus/bash-policy-sample.json")]
    if os.environ.get("SANDBOX_POLICY_CORPUS"):
        paths.append(Path(os.environ["SANDBOX_POLICY_CORPUS"]))
    return [p for p in dict.fromkeys(paths) if p.is_file()]


def _policies(corpus: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, spec in corpus["policies"].items():
        base = {"allowed_command_prefixes": tuple(spec["allowed_command_prefixes"]),
                "blocked_operators": tuple(spec["blocked_operators"])}
        out[name] = base
        out[name + "+no-confirmation"] = {
            **base, "no_confirmation_prefixes": base["allowed_command_prefixes"][:3]}
        out[name + "+specs"] = {**base, "program_specs": "builtin",
                                "no_confirmation_prefixes": base["allowed_command_prefixes"]}
    out["*"] = {"no_confirmation_prefixes": ("ls", "cat", "git status")}
    return out


def _cases() -> list[tuple[str, dict[str, Any], list[str]]]:
    cases = []
    for path in _corpora():
        corpus = json.loads(path.read_text(encoding="utf-8"))
        commands = [c["cmd"] for c in corpus["cases"]]
        for name, fields in _policies(corpus).items():
            cases.append((f"{path.parent.name}/{name}", fields, commands))
    return cases


@pytest.mark.parametrize(("name", "fields", "commands"), _cases(), ids=[c[0] for c in _cases()])
def test_check_needs_confirmation_and_rule_subjects_are_views_of_evaluate(
    name: str, fields: dict[str, Any], commands: list[str]
) -> None:
    decisions = set()
    for command in commands:
        # Each view asked first of a policy of its own (no cache shared with evaluate),
        # then evaluate of yet another: the views agree with the value, not with a cache.
        checked = BashToolPolicy(**fields).check(command)
        confirm = BashToolPolicy(**fields).needs_confirmation(command)
        subjects = BashToolPolicy(**fields).rule_subjects(command)
        evaluation = BashToolPolicy(**fields).evaluate(command)
        decisions.add(evaluation.decision)
        assert checked == evaluation.policy_decision, command
        assert confirm == evaluation.needs_confirmation, command
        assert subjects == evaluation.subjects, command
        # the value holds together
        assert checked.allowed == evaluation.allowed == (evaluation.decision is not Decision.BLOCK)
        assert (evaluation.rule is None) == evaluation.allowed, command
        assert checked.rule == (None if evaluation.rule in (None, Rule.EMPTY)
                                else evaluation.rule.value)  # fmt: skip
        assert (checked.reason, checked.command, checked.token, checked.commands) == (
            evaluation.reason, evaluation.command, evaluation.token, evaluation.commands)
        if evaluation.subjects:
            assert evaluation.allowed and evaluation.subjects == evaluation.commands
        if not evaluation.allowed:
            assert evaluation.prefixes == ()
        elif fields.get("allowed_command_prefixes", ("*",)) == ("*",):
            assert evaluation.prefixes == ("*",)
        else:
            assert set(evaluation.prefixes) <= set(fields["allowed_command_prefixes"])
    # the corpus exercises more than one outcome under every policy
    assert Decision.BLOCK in decisions and len(decisions) >= 2, (name, decisions)


# -- one cache ------------------------------------------------------------------------------


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    evaluated: list[object] = []
    real = BashToolPolicy._evaluate_uncached

    def counting(self: BashToolPolicy, command: object) -> Evaluation:
        evaluated.append(command)
        return real(self, command)

    monkeypatch.setattr(BashToolPolicy, "_evaluate_uncached", counting)
    return evaluated


def test_the_views_share_one_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluated = _counting(monkeypatch)
    policy = BashToolPolicy(allowed_command_prefixes=("ls", "wc"))
    command = "ls -la | wc -l"
    first = policy.evaluate(command)
    assert policy.check(command) is first.policy_decision
    assert policy.needs_confirmation(command) and policy.rule_subjects(command) == first.subjects
    assert policy.evaluate(command) is first
    assert evaluated == [command]


@pytest.mark.anyio
@pytest.mark.parametrize(("command", "runs"), [("echo a | wc -c", True), ("echo a; id", False)])
async def test_a_gated_call_evaluates_its_command_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, runs: bool
) -> None:
    # precheck, the confirmation question, what the human sees and the remembered-rule
    # subjects all read the policy's one evaluation: the tool keeps no cache of its own.
    evaluated = _counting(monkeypatch)
    tool = ExecuteBashTool(workspace=tmp_path, policy=BashToolPolicy(
        allowed_command_prefixes=("echo", "wc")))
    asked: list[object] = []
    runner = ToolRunner(tools=[tool],
                        provider=CallbackConfirmationProvider(lambda r: asked.append(r) or True))
    result = await runner.call("execute_bash", {"command": command})
    assert evaluated == [command]
    if runs:
        assert result["stdout"].strip() == "2" and len(asked) == 1
    else:
        assert result["rule"] == "R2" and asked == []
    await runner.call("execute_bash", {"command": command})
    assert evaluated == [command]  # a repeated call is decided from the policy's cache
