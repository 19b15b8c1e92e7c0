"""The question a runner asks when a command wants a name nobody listed.

With ``network = "allowlist"`` and ``ask_for_unlisted_domains = true``, a connection
the egress proxy holds for an unlisted name becomes a call of this tool, named
``network``, with args ``{"host", "port", "command"}``, through the runner's own gate:
the same provider, store, audit, channels and remembered rules as any other call. It
is not one of the runner's tools (a model cannot call it), and it runs nothing: its
"run" is the human's yes, which lets that one connection through.

A remembered answer ("for this session", "always") covers the name and port, whatever
command asks next (`rule_subjects`); the command is shown to the human, not matched.
"""

from __future__ import annotations

from typing import Any

from sandbox.tools.base import BaseTool, ToolArgumentError
from sandbox.tools.context import ToolContext

__all__ = ["NETWORK_TOOL", "NetworkAccessTool"]

NETWORK_TOOL = "network"


class NetworkAccessTool(BaseTool):
    """``network``: may a command connect to host:port? (see the module)"""

    def __init__(self) -> None:
        super().__init__(
            name=NETWORK_TOOL,
            description="A command run in the bash sandbox wants to connect to a host that "
            "the policy's allowed_domains does not list.",
        )

    def parameters_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "host": {"type": "string"},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "command": {"type": "string"},
            },
            "required": ["host", "port", "command"],
        }

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        args = super().validate_args(args)
        host, port, command = args.get("host"), args.get("port"), args.get("command")
        if set(args) != {"host", "port", "command"}:
            raise ToolArgumentError("network takes exactly host, port and command")
        # The proxy asks with the name already checked and normalised; this only
        # bounds what a human is shown.
        if (not isinstance(host, str) or not 0 < len(host) <= 255
                or any(c.isspace() or not c.isprintable() for c in host)):  # fmt: skip
            raise ToolArgumentError("network: host must be a host name or IP literal")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ToolArgumentError("network: port must be an integer from 1 to 65535")
        if not isinstance(command, str):
            raise ToolArgumentError("network: command must be a string")
        return {"host": host, "port": port, "command": command}

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        return (f"A command wants to connect to {args['host']}:{args['port']}, which the "
                "policy's allowed_domains does not list. Approving lets this connection "
                "through; denying refuses it (the command sees a 403).")  # fmt: skip

    def describe(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"destination": f"{args['host']}:{args['port']}", "command": args["command"]}

    def render_args(self, args: dict[str, Any]) -> str | None:
        return f"connect to {args['host']}:{args['port']}"

    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        return ((args["host"], str(args["port"])),)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        return {"allowed": True, "destination": f"{args['host']}:{args['port']}"}
