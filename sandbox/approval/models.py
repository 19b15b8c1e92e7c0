"""Data that crosses the gate's boundary: requests to a human, and their decisions."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from datetime import datetime
from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]
from json.encoder import encode_basestring as _encode_basestring
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.errors import ConfigurationError
from sandbox.text import escape_surrogates, lone_surrogate, not_text_message, printable

RequestKind = Literal["static", "predicate", "tool", "edit"]
RequestStatus = Literal[
    "pending", "approved", "denied", "edited", "timed_out", "error", "cancelled"
]
Outcome = Literal["approve", "deny", "edit"]
Scope = Literal["once", "session", "always"]
RuleScope = Literal["session", "always"]
RuleKind = Literal["command", "args", "tool"]

# Every model here defers building its validator (pydantic's schema work, ~10 ms a model)
# to its first use (`defer_build`): a process that never makes a rule or a request
# (`sandbox check`, a call needing no confirmation) never pays for it. Fields,
# validation and serialisation are those declared, built or not.


# One encoder for every call (what `json.dumps` with these options builds each time).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
# The C encoder `_CANONICAL.encode` makes on every call, made once: the same code and
# output, without the circular-reference bookkeeping (a cycle ends in RecursionError,
# and `_CANONICAL` then names it).
_C_CANONICAL = None if _c_make_encoder is None else _c_make_encoder(
    None, _CANONICAL.default, _encode_basestring, None, ":", ",", True, False, False)


def canonical_json(value: Any) -> str:
    """The one serialisation of arguments that digests, grants and the store agree on."""
    try:
        if _C_CANONICAL is not None:
            try:
                return escape_surrogates("".join(_C_CANONICAL(value, 0)))
            except RecursionError:
                pass
        return escape_surrogates(_CANONICAL.encode(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"tool arguments must be JSON values (str, number, bool, null, list, object): {exc}"
        ) from None


def args_digest(tool: str, args: dict[str, Any]) -> str:
    """SHA-256 over the tool name and its canonical arguments: what a grant is bound to."""
    return digest_of(tool, canonical_json(args))


def digest_of(tool: str, args_json: str) -> str:
    """`args_digest` from arguments already serialised by `canonical_json`."""
    return hashlib.sha256(f"{tool}\x00{args_json}".encode()).hexdigest()


class ConfirmationRequest(BaseModel):
    """One question to a human: may this exact call run?"""

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    hint: str = ""
    payload: Any | None = None
    digest: str
    kind: RequestKind = "static"
    created_at: datetime
    expires_at: datetime | None = None
    status: RequestStatus = "pending"
    edited_from: str | None = None
    session_id: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    """Facts a human should see beside the arguments (a bash policy decision, say)."""


class RulePattern(BaseModel):
    """One parsed simple command a remembered rule covers: its argv words.

    ``prefix=False`` (the default) matches exactly these words; ``prefix=True`` also
    matches commands that go on with more words. Saving ``curl https://a`` never allows
    ``curl`` alone: a shorter or open-ended rule is only made when a human chose it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    words: tuple[str, ...] = Field(min_length=1)
    prefix: bool = False


class Remember(BaseModel):
    """What an approval with scope ``session`` or ``always`` saves as a rule.

    ``patterns``: for a tool whose calls are commands (`BaseTool.rule_subjects`), one
    pattern per parsed simple command; None saves each command exactly as it was asked.
    ``tool_wide``: for other tools, every call of the tool (only when chosen
    explicitly); otherwise the rule is the tool plus these exact arguments.
    ``ttl``: seconds until the rule expires; None takes the default for its scope.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    patterns: tuple[RulePattern, ...] | None = None
    tool_wide: bool = False
    ttl: float | None = Field(default=None, gt=0)


class Decision(BaseModel):
    """A provider's answer. Build it with `Decision.approve()`, `.deny(reason)`, `.edit(args)`."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    outcome: Outcome
    reason: str | None = None
    args: dict[str, Any] | None = None
    payload: Any | None = None
    scope: Scope = "once"
    decided_by: str | None = None
    channel: str | None = None
    remember: Remember | None = None
    """With scope session/always: what the rule covers (None = exactly this call)."""

    @field_validator("reason", "decided_by", "channel")
    @classmethod
    def _prose(cls, value: str | None) -> str | None:
        # A human's words are kept, with what no store can hold shown escaped.
        return None if value is None else printable(value)

    @model_validator(mode="after")
    def _check(self) -> Decision:
        found = lone_surrogate(self.args, "args")
        if found:
            raise ValueError(not_text_message("the edited arguments", found))
        if self.outcome == "edit" and self.args is None:
            raise ValueError("an 'edit' decision needs args: Decision.edit({...})")
        if self.outcome != "edit" and self.args is not None:
            raise ValueError("only an 'edit' decision carries args; use Decision.edit(args)")
        if self.remember is not None and (self.outcome != "approve" or self.scope == "once"):
            raise ValueError(
                "remember goes with an approval of scope 'session' or 'always': "
                "Decision.approve(scope='always', remember=Remember(...))"
            )
        return self

    @classmethod
    def approve(
        cls, *, payload: Any | None = None, scope: Scope = "once", decided_by: str | None = None,
        channel: str | None = None, remember: Remember | None = None,
    ) -> Decision:
        return cls(outcome="approve", payload=payload, scope=scope, decided_by=decided_by,
                   channel=channel, remember=remember)

    @classmethod
    def deny(
        cls, reason: str = "", *, decided_by: str | None = None, channel: str | None = None
    ) -> Decision:
        return cls(outcome="deny", reason=reason, decided_by=decided_by, channel=channel)

    @classmethod
    def edit(
        cls, args: dict[str, Any], *, reason: str | None = None, decided_by: str | None = None,
        channel: str | None = None,
    ) -> Decision:
        return cls(outcome="edit", args=args, reason=reason, decided_by=decided_by,
                   channel=channel)


class Rule(BaseModel):
    """One remembered decision, as stored and listed."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    tool: str
    kind: RuleKind
    words: tuple[str, ...] | None = None
    prefix: bool = False
    args: dict[str, Any] | None = None
    digest: str | None = None
    scope: RuleScope
    session_id: str | None = None
    created_at: datetime
    expires_at: datetime
    created_by: str | None = None
    channel: str | None = None
    request_id: str | None = None
    revoked_at: datetime | None = None
    revoked_by: str | None = None
    uses: int = 0
    last_used_at: datetime | None = None

    def active(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return self.revoked_at is None and self.expires_at.timestamp() > now

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.active() else "expired"

    def covers(self, argv: Sequence[str]) -> bool:
        """Whether this command rule covers one parsed simple command."""
        if self.kind != "command" or self.words is None:
            return False
        n = len(self.words)
        if self.prefix:
            return tuple(argv[:n]) == self.words
        return tuple(argv) == self.words

    def describe(self) -> str:
        """One line for a human (words are JSON-quoted, so controls show escaped)."""
        if self.kind == "command" and self.words is not None:
            shown = " ".join(_word(w) for w in self.words)
            return f"{self.tool}: {shown}" + (" …(and any further words)" if self.prefix
                                              else " (exactly)")
        if self.kind == "tool":
            return f"{self.tool}: every call"
        return f"{self.tool}: {json.dumps(self.args, sort_keys=True)}"


def _word(word: str) -> str:
    plain = word and all(c.isalnum() or c in "-_./:=@%+,~" for c in word)
    return word if plain else json.dumps(word)
