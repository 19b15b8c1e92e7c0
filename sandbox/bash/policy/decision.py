"""What a policy decided: `PolicyDecision`, and the reasons' shared wording."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from sandbox.bash.syntax.model import escape_controls

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

