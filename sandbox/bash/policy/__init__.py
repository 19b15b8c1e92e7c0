"""Deciding: a command's evaluation under a `BashToolPolicy` (`evaluate`: the policy's
fields and views; `rules`: the rules applied to one parse; `matching`: prefixes and the
hardening table matched; `decision`: `Evaluation` and `PolicyDecision`; `values`: field
checks; `files`: policy files), the hardening rules (`hardening`) and the sed/awk
analyzers (`analyzers`), per-program option specs (`specs`). Reads bash through
`sandbox.bash.syntax`; knows nothing of processes."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.bash.policy.decision import Decision, Evaluation, Rule
    from sandbox.bash.policy.evaluate import BashToolPolicy, PolicyDecision

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.bash.policy.evaluate": (
            "BashToolPolicy",
            "PolicyDecision",
        ),
        "sandbox.bash.policy.decision": (
            "Decision",
            "Evaluation",
            "Rule",
        ),
    },
)

__all__ = ["BashToolPolicy", "Decision", "Evaluation", "PolicyDecision", "Rule"]
