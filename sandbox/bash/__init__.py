"""The bash sandbox: a policy decided on the tree-sitter-bash parse tree, a process layer
that kills the whole tree, and `ExecuteBashTool` tying them to the gate."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.bash.policy.evaluate import BashToolPolicy, PolicyDecision
    from sandbox.bash.policy.hardening import DEFAULT_HARDENING, HardeningRule
    from sandbox.bash.run.doctor import detect_protections
    from sandbox.bash.run.process import Limits, ProcessResult, run_bash
    from sandbox.bash.syntax.parse import escape_controls
    from sandbox.bash.tool import ExecuteBashTool

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.bash.policy.hardening": (
            "DEFAULT_HARDENING",
            "HardeningRule",
        ),
        "sandbox.bash.syntax.parse": ("escape_controls",),
        "sandbox.bash.policy.evaluate": (
            "BashToolPolicy",
            "PolicyDecision",
        ),
        "sandbox.bash.run.doctor": ("detect_protections",),
        "sandbox.bash.run.process": (
            "Limits",
            "ProcessResult",
            "run_bash",
        ),
        "sandbox.bash.tool": ("ExecuteBashTool",),
    },
)

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
