"""One gated call as the gate's parts pass it along, and a request it parked.

`Call` is built once per call (arguments validated, serialised once, digested once) and
read by every part after that; nothing recomputes a signature or a digest. `Asked` is a
request this runner has just parked: what the gate reads of it, without building the
`ConfirmationRequest` model unless a provider, a rule or the audit needs one.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from sandbox.approval.models import ConfirmationRequest
from sandbox.approval.store.records import built_request, dt, new_id
from sandbox.tools.base import BaseTool


def new_call_id() -> str:
    """A call id for a call made without one: 96 random bits (`store.records.new_id`)."""
    return new_id("call")


class Call:
    """A call under way: its tool, id, validated arguments, their canonical JSON and
    digest, the session it belongs to, and whether this call writes an audit trail."""

    __slots__ = ("args", "args_json", "audited", "call_id", "digest", "name", "session_id",
                 "tool")

    def __init__(self, tool: BaseTool, call_id: str, args: dict[str, Any], args_json: str,
                 digest: str, session_id: str | None, audited: bool) -> None:
        self.tool = tool
        self.name = tool.name
        self.call_id = call_id
        self.args = args
        self.args_json = args_json
        self.digest = digest
        self.session_id = session_id
        self.audited = audited

    def edited(self, args: dict[str, Any], args_json: str, digest: str) -> Call:
        """The same call with a human's edited arguments."""
        return Call(self.tool, self.call_id, args, args_json, digest, self.session_id,
                    self.audited)


class Asked:
    """A request this runner has just parked. Its arguments are the ones that run; the
    model shown to providers is parsed from the stored JSON, so whatever is done to the
    request shown cannot reach them."""

    __slots__ = ("_public", "args", "args_json", "call_id", "created", "details", "digest",
                 "edited_from", "expires", "hint", "id", "kind", "payload", "session_id",
                 "tool")

    status = "pending"

    def __init__(self, rid: str, created: float, call: Call, hint: str, payload: Any,
                 kind: str, expires: float | None, details: dict[str, Any] | None,
                 edited_from: str | None) -> None:
        self.id = rid
        self.created = created
        self.call_id = call.call_id
        self.tool = call.name
        self.args = call.args
        self.args_json = call.args_json
        self.digest = call.digest
        self.session_id = call.session_id
        self.hint = hint
        self.payload = payload
        self.kind = kind
        self.expires = expires
        self.details = details
        self.edited_from = edited_from
        self._public: ConfirmationRequest | None = None

    @property
    def expires_at(self) -> datetime | None:
        return dt(self.expires)

    def public(self) -> ConfirmationRequest:
        if self._public is None:
            self._public = built_request(
                self.id, self.created, call_id=self.call_id, tool=self.tool,
                args=json.loads(self.args_json), digest=self.digest, hint=self.hint,
                payload=self.payload, kind=self.kind, expires_at=self.expires,
                details=self.details, edited_from=self.edited_from,
                session_id=self.session_id)
        return self._public


#: A request as the gate handles it: parked by this runner, or read back from the store.
Request = ConfirmationRequest | Asked


def public(req: Request) -> ConfirmationRequest:
    return req.public() if isinstance(req, Asked) else req


def expired(req: Request) -> bool:
    expires = req.expires if isinstance(req, Asked) else (
        None if req.expires_at is None else req.expires_at.timestamp())
    return expires is not None and time.time() > expires
