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
    ConsoleConfirmationProvider,
    Decision,
    QueueConfirmationProvider,
    Remember,
    Rule,
    RuleBook,
    RulePattern,
    ToolRunner,
    WebConfirmationProvider,
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
    AuditError,
    ConfigurationError,
    ConfirmationStateError,
    ConfirmationTimedOutError,
    DuplicateCallError,
    PolicyFileError,
    RuleError,
    SandboxError,
    StoreError,
    UnknownCallError,
    UnknownConfirmationError,
    UnknownRuleError,
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
    "AuditError",
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
    "ConfirmationTimedOutError",
    "ConsoleConfirmationProvider",
    "Decision",
    "DuplicateCallError",
    "EventActions",
    "ExecuteBashTool",
    "FunctionTool",
    "HardeningRule",
    "PolicyDecision",
    "PolicyFileError",
    "QueueConfirmationProvider",
    "Remember",
    "Rule",
    "RuleBook",
    "RuleError",
    "RulePattern",
    "SandboxError",
    "StoreError",
    "ToolArgumentError",
    "ToolConfirmation",
    "ToolContext",
    "ToolRunner",
    "UnknownCallError",
    "UnknownConfirmationError",
    "UnknownRuleError",
    "UnknownToolError",
    "WebConfirmationProvider",
    "args_digest",
    "detect_protections",
    "redact_secrets",
    "run_bash",
    "verify_audit",
]
