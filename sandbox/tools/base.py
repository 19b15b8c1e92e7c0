"""`BaseTool`: the interface every tool implements, shaped like ADK's `BaseTool`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from sandbox.tools.context import ToolContext


def confirmation_hint_text(name: str) -> str:
    """ADK's hint for a tool whose ``require_confirmation`` asks (its exact words)."""
    return (f"Please approve or reject the tool call {name}() by responding with a "
            "FunctionResponse with an expected ToolConfirmation payload.")


class ToolArgumentError(ValueError):
    """Arguments a model sent do not fit the tool's declaration.

    `message` is meant for the model: it names the argument and what was expected.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BaseTool(ABC):
    """A capability an agent can call.

    Subclasses implement `run_async`. The gate (`ToolRunner`) also uses three hooks, each
    with a safe default:

    - `validate_args(args)` returns the arguments normalised, or raises
      `ToolArgumentError`; the runner never calls `run_async` with arguments that failed.
    - `precheck(args)` returns an error dict when the call must be refused outright
      (a blocked bash command): such a call never reaches a human.
    - `check_require_confirmation(args, tool_context)`, ADK's public hook: whether a
      human must approve this call (called with the raw arguments, as ADK calls it).
    - `confirmation_needed(args)` returns a hint when a human must approve first.
    - `render_args(args)` shows the arguments to a human (an approval card, a prompt).
    - `describe(args)` returns extra facts a human should see when asked to approve.
    - `rule_subjects(args)` returns the parsed commands a remembered approval must cover.
    """

    def __init__(
        self,
        *,
        name: str,
        description: str,
        is_long_running: bool = False,
        custom_metadata: dict[str, Any] | None = None,
    ) -> None:
        if not name or not name.replace("_", "a").replace("-", "a").isalnum():
            raise ValueError(
                f"tool name {name!r} is not usable: use letters, digits, '_' or '-' "
                "(function-calling APIs reject anything else)"
            )
        self.name = name
        self.description = description
        self.is_long_running = is_long_running
        self.custom_metadata = custom_metadata

    def parameters_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments object. Override in subclasses."""
        return {"type": "object", "properties": {}}

    def declaration(self) -> dict[str, Any]:
        """The function declaration a model sees: name, description, JSON-schema parameters."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters_schema(),
        }

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolArgumentError(
                f"arguments to {self.name} must be a JSON object, got {type(args).__name__}"
            )
        return args

    async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
        return None

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        """Return a hint when a human must confirm this call before it runs, else None.

        This is the static/predicate gate; a tool may also ask from inside `run_async`
        through `tool_context.request_confirmation`.
        """
        return None

    async def check_require_confirmation(
        self, args: dict[str, Any], tool_context: ToolContext
    ) -> bool:
        """Whether this call needs a human's confirmation (ADK's hook; default: no).

        Override it in a subclass; the gate calls it with the call's arguments and
        context before the tool runs.
        """
        return False

    async def confirmation_hint(
        self, args: dict[str, Any], tool_context: ToolContext
    ) -> str | None:
        """The gate's question: the hint to show when a human must confirm, else None.

        The tool's own `confirmation_needed` hint first, then ADK's
        `check_require_confirmation` with ADK's hint text.
        """
        hint = await self.confirmation_needed(args)
        if hint is None and await self.check_require_confirmation(args, tool_context):
            hint = confirmation_hint_text(self.name)
        return hint

    def describe(self, args: dict[str, Any]) -> dict[str, Any]:
        return {}

    def render_args(self, args: dict[str, Any]) -> str | None:
        """The arguments as a human should read them when asked to approve, or None for
        the default (the arguments as JSON). A command-running tool shows the command."""
        return None

    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        """The parsed commands a remembered rule must cover for this call, or None.

        A command-running tool returns the argv of every simple command in the call
        (so a rule approving ``git log`` does not approve ``git log; rm -rf ~``); an
        empty tuple means nothing could be parsed and no rule may approve the call. The
        default, None, makes rules match on the tool and its exact arguments.
        """
        return None

    @abstractmethod
    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Run the tool. Return a dict (anything else is wrapped as `{"result": ...}`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
