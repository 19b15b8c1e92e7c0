"""The `sandbox` command line (also `python -m sandbox`): `main` wires the commands, one
module per group (`bash`, `approvals`, `audit`, `demo`, `mcp`)."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.cli.main import main

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.cli.main": ("main",),
    },
)

__all__ = ["main"]
