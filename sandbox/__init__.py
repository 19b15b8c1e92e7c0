"""sandbox: make risky agent tools safe.

A bash sandbox (`ExecuteBashTool` under a `BashToolPolicy`), a human-in-the-loop gate
(`ToolRunner` with `require_confirmation` and pluggable `ConfirmationProvider`s), and a
durable store of approvals. Names and shapes follow Google ADK's tools.
"""

from .approval import (
    ApprovalStore,
    AutoApprove,
    AutoDeny,
    CallbackConfirmationProvider,
    CallRecord,
    ConfirmationProvider,
    ConfirmationRequest,
    Decision,
    ToolRunner,
    args_digest,
)
from .audit import AuditLog, redact_secrets, verify_audit
from .bash import (
    BashToolPolicy,
    ExecuteBashTool,
    HardeningRule,
    PolicyDecision,
    detect_protections,
    run_bash,
)
from .errors import (
    ConfigurationError,
    ConfirmationStateError,
    DuplicateCallError,
    PolicyFileError,
    SandboxError,
    StoreError,
    UnknownCallError,
    UnknownConfirmationError,
    UnknownToolError,
)
from .tools import (
    BaseTool,
    EventActions,
    FunctionTool,
    ToolArgumentError,
    ToolConfirmation,
    ToolContext,
)

__version__ = "0.1.0"

__all__ = [
    "ApprovalStore",
    "AuditLog",
    "AutoApprove",
    "AutoDeny",
    "BaseTool",
    "BashToolPolicy",
    "CallRecord",
    "CallbackConfirmationProvider",
    "ConfigurationError",
    "ConfirmationProvider",
    "ConfirmationRequest",
    "ConfirmationStateError",
    "Decision",
    "DuplicateCallError",
    "EventActions",
    "ExecuteBashTool",
    "FunctionTool",
    "HardeningRule",
    "PolicyDecision",
    "PolicyFileError",
    "SandboxError",
    "StoreError",
    "ToolArgumentError",
    "ToolConfirmation",
    "ToolContext",
    "ToolRunner",
    "UnknownCallError",
    "UnknownConfirmationError",
    "UnknownToolError",
    "args_digest",
    "detect_protections",
    "redact_secrets",
    "run_bash",
    "verify_audit",
]
