"""The human-in-the-loop gate: runner, providers, store, and the data between them."""

from .console import ConsoleConfirmationProvider
from .models import (
    ConfirmationRequest,
    Decision,
    Remember,
    RulePattern,
    args_digest,
    canonical_json,
)
from .providers import (
    AutoApprove,
    AutoDeny,
    CallbackConfirmationProvider,
    ConfirmationProvider,
    to_decision,
)
from .queue import QueueConfirmationProvider
from .rules import Rule, RuleBook
from .runner import ToolRunner
from .store import (
    ApprovalStore,
    CallRecord,
    MemoryApprovalStore,
    SQLiteApprovalStore,
    StoreProtocol,
    open_store,
)
from .web import WebConfirmationProvider

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
