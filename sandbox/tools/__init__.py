"""The tool model: ADK-shaped `BaseTool`, `FunctionTool`, `ToolContext`, `ToolConfirmation`."""

from .base import BaseTool, ToolArgumentError
from .context import EventActions, ToolConfirmation, ToolContext
from .function import FunctionTool

__all__ = [
    "BaseTool",
    "EventActions",
    "FunctionTool",
    "ToolArgumentError",
    "ToolConfirmation",
    "ToolContext",
]
