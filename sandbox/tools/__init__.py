"""The tool model: ADK-shaped `BaseTool`, `FunctionTool`, `ToolContext`, `ToolConfirmation`."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.tools.base import BaseTool, ToolArgumentError
    from sandbox.tools.context import EventActions, ToolConfirmation, ToolContext
    from sandbox.tools.function import FunctionTool

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.tools.base": (
            "BaseTool",
            "ToolArgumentError",
        ),
        "sandbox.tools.context": (
            "EventActions",
            "ToolConfirmation",
            "ToolContext",
        ),
        "sandbox.tools.function": ("FunctionTool",),
    },
)

__all__ = [
    "BaseTool",
    "EventActions",
    "FunctionTool",
    "ToolArgumentError",
    "ToolConfirmation",
    "ToolContext",
]
