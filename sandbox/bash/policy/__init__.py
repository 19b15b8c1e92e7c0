"""Deciding: a command's evaluation under a `BashToolPolicy` (`evaluate`), the hardening
rules and the sed/awk analyzers (`hardening`), per-program option specs (`specs`) and
policy files (`files`). Reads bash through `sandbox.bash.syntax`; knows nothing of
processes."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.bash.policy.evaluate import BashToolPolicy, PolicyDecision

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.bash.policy.evaluate": (
            "BashToolPolicy",
            "PolicyDecision",
        ),
    },
)

__all__ = ["BashToolPolicy", "PolicyDecision"]
