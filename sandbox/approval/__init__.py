"""The human-in-the-loop gate: runner, providers, store, and the data between them."""

from sandbox.approval.console import ConsoleConfirmationProvider
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
from sandbox.approval.queue import QueueConfirmationProvider
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
from sandbox.approval.web import WebConfirmationProvider

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
