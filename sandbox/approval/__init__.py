"""The human-in-the-loop gate: runner, providers, store, and the data between them.

What the gate promises (single-use grants, exactly once, explicit timeouts, narrow
rules) and one call step by step: docs/approvals.md."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.approval.channels.console import ConsoleConfirmationProvider
    from sandbox.approval.channels.queue import QueueConfirmationProvider
    from sandbox.approval.channels.web import WebConfirmationProvider
    from sandbox.approval.models import (
        ConfirmationRequest,
        Decision,
        Remember,
        RulePattern,
        args_digest,
        canonical_json,
    )
    from sandbox.approval.providers import (
        AutoApprove,
        AutoDeny,
        CallbackConfirmationProvider,
        ConfirmationProvider,
        to_decision,
    )
    from sandbox.approval.rules import Rule, RuleBook
    from sandbox.approval.runner import ToolRunner
    from sandbox.approval.store import (
        ApprovalStore,
        CallRecord,
        MemoryApprovalStore,
        SQLiteApprovalStore,
        StoreProtocol,
        open_store,
    )

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.approval.channels.console": ("ConsoleConfirmationProvider",),
        "sandbox.approval.models": (
            "ConfirmationRequest",
            "Decision",
            "Remember",
            "RulePattern",
            "args_digest",
            "canonical_json",
        ),
        "sandbox.approval.providers": (
            "AutoApprove",
            "AutoDeny",
            "CallbackConfirmationProvider",
            "ConfirmationProvider",
            "to_decision",
        ),
        "sandbox.approval.channels.queue": ("QueueConfirmationProvider",),
        "sandbox.approval.rules": (
            "Rule",
            "RuleBook",
        ),
        "sandbox.approval.runner": ("ToolRunner",),
        "sandbox.approval.store": (
            "ApprovalStore",
            "CallRecord",
            "MemoryApprovalStore",
            "SQLiteApprovalStore",
            "StoreProtocol",
            "open_store",
        ),
        "sandbox.approval.channels.web": ("WebConfirmationProvider",),
    },
)


__all__ = [
    "ApprovalStore",
    "AutoApprove",
    "AutoDeny",
    "CallRecord",
    "CallbackConfirmationProvider",
    "ConfirmationProvider",
    "ConfirmationRequest",
    "ConsoleConfirmationProvider",
    "Decision",
    "MemoryApprovalStore",
    "QueueConfirmationProvider",
    "Remember",
    "Rule",
    "RuleBook",
    "RulePattern",
    "SQLiteApprovalStore",
    "StoreProtocol",
    "ToolRunner",
    "WebConfirmationProvider",
    "args_digest",
    "canonical_json",
    "open_store",
    "to_decision",
]
