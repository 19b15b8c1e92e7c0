"""The bash sandbox: a policy decided on the tree-sitter-bash parse tree, a process layer
that kills the whole tree, and `ExecuteBashTool` tying them to the gate."""

from .hardening import DEFAULT_HARDENING, HardeningRule
from .parse import escape_controls
from .policy import BashToolPolicy, PolicyDecision
from .process import Limits, ProcessResult, detect_protections, run_bash
from .tool import ExecuteBashTool

__all__ = [
    "DEFAULT_HARDENING",
    "BashToolPolicy",
    "ExecuteBashTool",
    "HardeningRule",
    "Limits",
    "PolicyDecision",
    "ProcessResult",
    "detect_protections",
    "escape_controls",
    "run_bash",
]
