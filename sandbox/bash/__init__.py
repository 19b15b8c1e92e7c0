"""The bash sandbox: a policy decided on the tree-sitter-bash parse tree."""

from .hardening import DEFAULT_HARDENING, HardeningRule
from .parse import escape_controls
from .policy import BashToolPolicy, PolicyDecision

__all__ = [
    "DEFAULT_HARDENING",
    "BashToolPolicy",
    "HardeningRule",
    "PolicyDecision",
    "escape_controls",
]
