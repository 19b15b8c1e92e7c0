"""Data that crosses the gate's boundary: requests to a human, and their decisions."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ConfigurationError

RequestKind = Literal["static", "predicate", "tool", "edit"]
RequestStatus = Literal["pending", "approved", "denied", "timed_out", "error", "cancelled"]
Outcome = Literal["approve", "deny", "edit"]
Scope = Literal["once", "session", "always"]


def canonical_json(value: Any) -> str:
    """The one serialisation of arguments that digests, grants and the store agree on."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"tool arguments must be JSON values (str, number, bool, null, list, object): {exc}"
        ) from None


def args_digest(tool: str, args: dict[str, Any]) -> str:
    """SHA-256 over the tool name and its canonical arguments: what a grant is bound to."""
    return hashlib.sha256(f"{tool}\x00{canonical_json(args)}".encode()).hexdigest()


class ConfirmationRequest(BaseModel):
    """One question to a human: may this exact call run?"""

    model_config = ConfigDict(frozen=True)

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


class Decision(BaseModel):
    """A provider's answer. Build it with `Decision.approve()`, `.deny(reason)`, `.edit(args)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: Outcome
    reason: str | None = None
    args: dict[str, Any] | None = None
    payload: Any | None = None
    scope: Scope = "once"
    decided_by: str | None = None
    channel: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Decision:
        if self.outcome == "edit" and self.args is None:
            raise ValueError("an 'edit' decision needs args: Decision.edit({...})")
        if self.outcome != "edit" and self.args is not None:
            raise ValueError("only an 'edit' decision carries args; use Decision.edit(args)")
        return self

    @classmethod
    def approve(
        cls, *, payload: Any | None = None, scope: Scope = "once", decided_by: str | None = None,
        channel: str | None = None,
    ) -> Decision:
        return cls(outcome="approve", payload=payload, scope=scope, decided_by=decided_by,
                   channel=channel)

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
