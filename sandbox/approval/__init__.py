"""The human-in-the-loop gate: runner, providers, store, and the data between them."""

from .models import ConfirmationRequest, Decision, args_digest, canonical_json
from .providers import (
    AutoApprove,
    AutoDeny,
    CallbackConfirmationProvider,
    ConfirmationProvider,
    to_decision,
)
from .runner import ToolRunner
from .store import ApprovalStore, CallRecord

__all__ = [
    "ApprovalStore",
    "AutoApprove",
    "AutoDeny",
    "CallRecord",
    "CallbackConfirmationProvider",
    "ConfirmationProvider",
    "ConfirmationRequest",
    "Decision",
    "ToolRunner",
    "args_digest",
    "canonical_json",
    "to_decision",
]
