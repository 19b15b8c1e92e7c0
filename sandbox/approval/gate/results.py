"""What the gate returns when the tool did not run (or has not yet): typed outcomes, each
with the dict ADK and the contract expect (`to_dict`). A tool's own result is returned
as the tool gave it (a non-dict wrapped as ``{"result": ...}``)."""

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


@dataclass(frozen=True)
class Awaiting:
    """The call waits for a human: answer it with ``ToolRunner.resume(confirmation_id)``."""

    confirmation_id: str
    call_id: str
    tool: str
    hint: str
    message: str | None = None

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


@dataclass(frozen=True)
class NotRun:
    """The gate ended the call without running the tool (or cannot run it again)."""

    status: Status
    error: str
    call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"status": self.status.value, "error": self.error}
        if self.call_id is not None:
            result["call_id"] = self.call_id
        return result


@dataclass(frozen=True)
class Denied:
    """A human (or a provider) denied the call, with a reason for the model."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"status": Status.DENIED.value,
                "error": f"The user denied this call: {self.reason}", "reason": self.reason}
