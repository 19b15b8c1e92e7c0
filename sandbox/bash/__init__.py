"""The bash sandbox: a policy decided on the tree-sitter-bash parse tree, a process layer
that kills the whole tree, and `ExecuteBashTool` tying them to the gate."""

from sandbox.bash.hardening import DEFAULT_HARDENING, HardeningRule
from sandbox.bash.parse import escape_controls
from sandbox.bash.policy import BashToolPolicy, PolicyDecision
from sandbox.bash.process import Limits, ProcessResult, detect_protections, run_bash
from sandbox.bash.tool import ExecuteBashTool

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
