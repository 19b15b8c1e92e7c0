"""sandbox: make risky agent tools safe.

A bash sandbox (`ExecuteBashTool` under a `BashToolPolicy`), a human-in-the-loop gate
(`ToolRunner` with `require_confirmation` and pluggable `ConfirmationProvider`s), and a
durable store of approvals. Names and shapes follow Google ADK's tools.
"""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.approval import (
        ApprovalStore,
        AutoApprove,
        AutoDeny,
        CallbackConfirmationProvider,
        CallRecord,
        ConfirmationProvider,
        ConfirmationRequest,
        ConsoleConfirmationProvider,
        Decision,
        MemoryApprovalStore,
        QueueConfirmationProvider,
        Remember,
        Rule,
        RuleBook,
        RulePattern,
        ToolRunner,
        WebConfirmationProvider,
        args_digest,
    )
    from sandbox.audit import AuditLog, redact_secrets, verify_audit
    from sandbox.bash import (
        BashToolPolicy,
        ExecuteBashTool,
        HardeningRule,
        PolicyDecision,
        detect_protections,
        run_bash,
    )
    from sandbox.errors import (
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
    from sandbox.tools import (
        BaseTool,
        EventActions,
        FunctionTool,
        ToolArgumentError,
        ToolConfirmation,
        ToolContext,
    )

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.approval": (
            "ApprovalStore",
            "AutoApprove",
            "AutoDeny",
            "CallbackConfirmationProvider",
            "CallRecord",
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
            "ToolRunner",
            "WebConfirmationProvider",
            "args_digest",
        ),
        "sandbox.audit": (
            "AuditLog",
            "redact_secrets",
            "verify_audit",
        ),
        "sandbox.bash": (
            "BashToolPolicy",
            "ExecuteBashTool",
            "HardeningRule",
            "PolicyDecision",
            "detect_protections",
            "run_bash",
        ),
        "sandbox.errors": (
            "AuditError",
            "ConfigurationError",
            "ConfirmationStateError",
            "ConfirmationTimedOutError",
            "DuplicateCallError",
            "PolicyFileError",
            "RuleError",
            "SandboxError",
            "StoreError",
            "UnknownCallError",
            "UnknownConfirmationError",
            "UnknownRuleError",
            "UnknownToolError",
        ),
        "sandbox.tools": (
            "BaseTool",
            "EventActions",
            "FunctionTool",
            "ToolArgumentError",
            "ToolConfirmation",
            "ToolContext",
        ),
    },
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
    "MemoryApprovalStore",
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
