"""Every exception a user of `sandbox` can catch, in one hierarchy.

Each message names what was wrong and what to do instead.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of every error raised by this library."""


class ConfigurationError(SandboxError, ValueError):
    """A tool, policy, provider or store was configured with an invalid value."""


class PolicyFileError(ConfigurationError):
    """A policy file (TOML) could not be loaded: names the file, field and value."""


class UnknownToolError(SandboxError, LookupError):
    """A call named a tool the runner does not have."""


class UnknownConfirmationError(SandboxError, LookupError):
    """A confirmation id that the store has never issued."""


class UnknownCallError(SandboxError, LookupError):
    """A call id that the store does not know."""


class DuplicateCallError(SandboxError, ValueError):
    """A call id was reused for a different tool or different arguments."""


class ConfirmationStateError(SandboxError):
    """A confirmation can no longer be answered (already decided, expired, in doubt)."""


class ConfirmationTimedOutError(ConfirmationStateError):
    """A confirmation expired, or its wait ran out, before an answer: it was recorded as
    timed out (never as denied or approved) and can no longer be answered."""


class ApprovalUnavailableError(SandboxError):
    """A call needs a human's approval and no channel can reach one (raised by a
    provider): the call is refused at once, with this message, and never run."""


class StoreError(SandboxError):
    """The approval store could not be opened or is from an incompatible version."""


class AuditError(SandboxError):
    """The audit log could not be written or failed verification."""


class RuleError(SandboxError, ValueError):
    """A remembered-decision rule could not be made as asked (it would cover more, or
    other, than the call a human approved)."""


class UnknownRuleError(SandboxError, LookupError):
    """A rule id the approval store does not know."""
