"""The tool model: ADK-shaped `BaseTool`, `FunctionTool`, `ToolContext`, `ToolConfirmation`."""

from sandbox.tools.base import BaseTool, ToolArgumentError
from sandbox.tools.context import EventActions, ToolConfirmation, ToolContext
from sandbox.tools.function import FunctionTool

__all__ = [
    "BaseTool",
    "EventActions",
    "FunctionTool",
    "ToolArgumentError",
    "ToolConfirmation",
    "ToolContext",
]
