"""The outcome of a gated call: one typed value from the gate's first step to the boundary.

Every part of the gate hands back an `Outcome`: the tool ran (`Ran`), an earlier call
with this id is answered from its record (`Replayed`), the call waits for a human
(`Awaiting`), or the gate ended it without running the tool (`Denied`, `Blocked`,
`NotRun`). It becomes the contract's dict (`to_dict`) where it leaves the gate: the
return value of `ToolRunner.call`/`resume`/`answer`/`park` and the adapters' results;
the store records the dict form of an outcome that ends a call (`journal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """The ``status`` of a result the gate made instead of the tool."""

    AWAITING = "awaiting_confirmation"
    BLOCKED = "blocked"
    DENIED = "denied"
    ERROR = "error"
    IN_DOUBT = "in_doubt"
    REFUSED = "refused"
    REJECTED = "rejected"
    RUNNING = "running"
    TIMED_OUT = "timed_out"


class Outcome:
    """What became of one gated call. `to_dict` is the contract's dict (ADK's shapes):
    the tool's own result when it ran, else ``{"status": ..., ...}``."""

    __slots__ = ()

    @property
    def status(self) -> str | None:
        """The gate's status, or None when the dict is the tool's own result."""
        raise NotImplementedError

    @property
    def error(self) -> str | None:
        """The gate's error text, when it ended the call without running it."""
        return None

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(slots=True)  # not frozen: made on every call, and frozen is slower
class Ran(Outcome):
    """The tool ran in this call. ``value`` is what it returned; ``result`` the
    contract's dict of it (a dict as it is, anything else as ``{"result": value}``),
    which is what the store recorded."""

    result: dict[str, Any]
    value: Any

    @property
    def status(self) -> str | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return self.result


@dataclass(frozen=True, slots=True)
class Replayed(Outcome):
    """The call id was used before: its recorded result (in state ``state``), never a
    second run. The dict is marked ``"replayed": True``."""

    result: dict[str, Any]
    state: str

    @property
    def status(self) -> str | None:
        if self.state == "done":
            return None
        status = self.result.get("status")
        return status if isinstance(status, str) else None

    @property
    def error(self) -> str | None:
        error = self.result.get("error") if self.state != "done" else None
        return error if isinstance(error, str) else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.result, "replayed": True}


@dataclass(frozen=True, slots=True)
class Awaiting(Outcome):
    """The call waits for a human: answer it with ``ToolRunner.resume(confirmation_id)``."""

    confirmation_id: str
    call_id: str
    tool: str
    hint: str
    message: str | None = None

    @property
    def status(self) -> str | None:
        return Status.AWAITING.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": Status.AWAITING.value,
            "confirmation_id": self.confirmation_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "hint": self.hint,
            "message": self.message or (
                "Waiting for a human to confirm this call "
                f"(confirmation id {self.confirmation_id})."),
        }


@dataclass(frozen=True, slots=True)
class NotRun(Outcome):
    """The gate ended the call without running the tool (or cannot run it again), or
    the tool raised (``status`` error)."""

    code: Status
    message: str
    call_id: str | None = None

    @property
    def status(self) -> str | None:
        return self.code.value

    @property
    def error(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"status": self.code.value, "error": self.message}
        if self.call_id is not None:
            result["call_id"] = self.call_id
        return result


@dataclass(frozen=True, slots=True)
class Denied(Outcome):
    """A human (or a provider) denied the call, with a reason for the model."""

    reason: str

    @property
    def status(self) -> str | None:
        return Status.DENIED.value

    @property
    def error(self) -> str:
        return f"The user denied this call: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"status": Status.DENIED.value, "error": self.error, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Blocked(Outcome):
    """The tool's own hard refusal (a blocked bash command): ``details`` is what its
    `precheck` returned (the error, the rule, the reason)."""

    details: dict[str, Any]

    @property
    def status(self) -> str | None:
        status = self.to_dict().get("status")
        return status if isinstance(status, str) else None

    @property
    def error(self) -> str | None:
        error = self.details.get("error")
        return str(error) if error else None

    def to_dict(self) -> dict[str, Any]:
        return {"status": Status.BLOCKED.value, **self.details}
