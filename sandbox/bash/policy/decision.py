"""What a policy decided: `Evaluation` (one typed value per command: the decision, the
rule, the matched prefixes, the rule subjects and the reason), `PolicyDecision` (the
shape `check` returns), and the reasons' shared wording."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, ConfigDict

from sandbox.bash.syntax.model import escape_controls

if TYPE_CHECKING:
    from sandbox.bash.syntax.model import ParsedScript

__all__ = ["Decision", "Evaluation", "PolicyDecision", "Rule"]

_RULE_TITLES = {
    "R1": "blocked operator",
    "R2": "command not allowed",
    "R3": "prefix must match whole words",
    "R4": "command word must be a plain name",
    "R5": "no smuggling",
    "R6": "cannot be parsed safely",
    "R7": "hardening",
    "R8": "control character",
    "R9": "parser agreement",
}


def _shown(text: str, limit: int = 120) -> str:
    text = escape_controls(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _q(text: str, limit: int = 120) -> str:
    """``text`` quoted for a reason: repr escapes every non-printable character."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


class PolicyDecision(BaseModel):
    """What `BashToolPolicy.check` decided, and why.

    ``reason`` is written for both the model and a human: the rule, the simple
    command and token at fault, and what would be allowed instead. Every control
    character in ``reason``, ``command`` and ``token`` is escaped. ``commands``
    holds the argv of every simple command found (unescaped; for matching
    remembered decisions). Truthiness is ``allowed``, so ``if policy.check(c):``
    does what it reads as.
    """

    model_config = ConfigDict(frozen=True)

    allowed: bool
    reason: str
    rule: str | None = None
    command: str | None = None
    token: str | None = None
    commands: tuple[tuple[str, ...], ...] = ()

    def __bool__(self) -> bool:
        return self.allowed


class _Blocked(NamedTuple):
    rule: str | None
    detail: str
    command: str | None = None
    token: str | None = None



class Decision(str, Enum):
    """What happens to a command: it runs (``ALLOW``), runs once a human confirms it
    (``CONFIRM``: allowed, but not every simple command matches
    ``no_confirmation_prefixes``, or it writes a file, defines a function, or a spec
    says it starts another program), or never runs (``BLOCK``)."""

    ALLOW = "allow"
    CONFIRM = "confirm"
    BLOCK = "block"


class Rule(str, Enum):
    """The rule of docs/policy.md that blocked a command. The value is the string
    `PolicyDecision.rule` carries (``Rule.R7 == "R7"``).

    R6 covers every refusal to parse (syntax errors, NUL, too long, too deep, too slow,
    a parser crash, an internal error: fail closed), R9 the re-lexer's disagreements
    with tree-sitter, R7 both the hardening table and the program specs (the reason
    names which: ``[spec 'git']``). ``EMPTY`` is the one refusal no rule of docs/policy.md
    names: a command with nothing to run (`PolicyDecision.rule` is None for it, as it
    always was)."""

    R1 = "R1"
    R2 = "R2"
    R3 = "R3"
    R4 = "R4"
    R5 = "R5"
    R6 = "R6"
    R7 = "R7"
    R8 = "R8"
    R9 = "R9"
    EMPTY = "empty"

    @property
    def meaning(self) -> str:
        """The rule's name as reasons write it ("hardening", "no smuggling")."""
        return _RULE_TITLES.get(self.value, "nothing to run")


@dataclass(frozen=True)
class Evaluation:
    """Everything `BashToolPolicy.evaluate` decided about one command, once.

    ``check``, ``needs_confirmation`` and ``rule_subjects`` are views of this value:
    ``check(c) == evaluate(c).policy_decision``, ``needs_confirmation(c) ==
    evaluate(c).needs_confirmation``, ``rule_subjects(c) == evaluate(c).subjects``.

    - ``decision``: allow, confirm or block;
    - ``rule``: the rule that blocked it (None unless ``decision`` is ``BLOCK``);
    - ``reason``: for the model and a human, control characters escaped (the same text
      as ``check``'s);
    - ``prefixes``: the ``allowed_command_prefixes`` entries that matched its simple
      commands, in order of first use (``("*",)`` under the wildcard; empty when it
      is blocked or runs no program);
    - ``subjects``: the simple commands a remembered rule must cover to approve it,
      or ``()`` when no rule may (blocked, a function definition, a heredoc, or a
      redirection other than a descriptor duplication or ``/dev/null``);
    - ``commands``: the argv of every simple command found; ``command`` and
      ``token``: the simple command and the token at fault when blocked.

    A frozen dataclass, not a pydantic model: it is built on every uncached check
    (the path `bench/bash.py` holds to 20 µs for a one-liner) from values this module
    made itself, so there is nothing to validate; `PolicyDecision` stays the pydantic
    model callers already use, built once here with the evaluation.
    """

    decision: Decision
    rule: Rule | None
    reason: str
    prefixes: tuple[str, ...]
    subjects: tuple[tuple[str, ...], ...]
    commands: tuple[tuple[str, ...], ...]
    command: str | None
    token: str | None
    policy_decision: PolicyDecision = field(repr=False, compare=False)
    """What `check` returns for the command (the same facts, in the contract's shape)."""
    script: ParsedScript | None = field(default=None, repr=False, compare=False)
    """The parse decided on (None when the command was not a string, or on an internal
    error)."""

    @property
    def allowed(self) -> bool:
        """Whether the command may run (at once, or once a human confirms it)."""
        return self.decision is not Decision.BLOCK

    @property
    def needs_confirmation(self) -> bool:
        """Whether a human must confirm the command first (True when it is blocked,
        as `BashToolPolicy.needs_confirmation` has always answered)."""
        return self.decision is not Decision.ALLOW


_new = object.__new__


def _evaluation(
    decision: Decision,
    rule: Rule | None,
    reason: str,
    prefixes: tuple[str, ...],
    subjects: tuple[tuple[str, ...], ...],
    commands: tuple[tuple[str, ...], ...],
    command: str | None,
    token: str | None,
    policy_decision: PolicyDecision,
    script: ParsedScript | None = None,
) -> Evaluation:
    """``Evaluation(...)`` for the policy's hot path: a frozen dataclass's ``__init__``
    sets each of its ten fields through ``object.__setattr__`` (1.6 µs, a twelfth of an
    uncached check of ``git status``); this fills the new instance's ``__dict__`` at once
    (0.7 µs). Same value, same checks left to the caller: every argument is already
    of its type here."""
    evaluation: Evaluation = _new(Evaluation)
    evaluation.__dict__.update(
        decision=decision, rule=rule, reason=reason, prefixes=prefixes, subjects=subjects,
        commands=commands, command=command, token=token, policy_decision=policy_decision,
        script=script)  # fmt: skip
    return evaluation
