"""`sandbox mcp`: serve `execute_bash` and your gated tools to an MCP client over stdio."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

DESCRIPTION = """\
Serve tools over MCP on stdin/stdout: execute_bash under a policy file, and gated tools
from your own module. Every call passes the approval gate. A call that needs approval
asks the MCP client's user with an elicitation form (approve yes/no, reason) when the
client supports elicitation; otherwise the --approvals channel answers; with neither,
the call is refused at once. Declined, cancelled, denied or unanswered within
--approval-timeout: the tool does not run, and the client is told why."""

EPILOG = """\
examples:
  sandbox mcp --policy policies/readonly.toml --workspace ~/project
  sandbox mcp --policy policies/python-dev.toml --tools mytools:TOOLS --store approvals.db
  sandbox mcp --tools ops.tools:wipe --approvals queue --store approvals.db
      (a client without elicitation: answer with `sandbox approvals approve ID` or on
       the page of `sandbox approvals serve --store approvals.db`)

  --tools module:attr names a BaseTool/FunctionTool, a function (served ungated), or a
  list of them; the module is imported from the current directory or PYTHONPATH.

client configuration (e.g. Claude Desktop's mcpServers):
  {"command": "sandbox", "args": ["mcp", "--policy", "/abs/policy.toml",
                                   "--workspace", "/abs/project"]}"""


def register(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp", help="serve execute_bash and gated tools over MCP (stdio)",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mcp.add_argument("--policy", metavar="FILE",
                     help="bash policy (TOML) for execute_bash; without it, only --tools "
                          "are served")
    mcp.add_argument("--workspace", metavar="DIR", default=".",
                     help="working directory of execute_bash (default: the current one)")
    mcp.add_argument("--tools", metavar="MODULE:ATTR", nargs="+", default=[],
                     help="your tools: a BaseTool/FunctionTool, a function or a list of them")
    mcp.add_argument("--store", metavar="FILE",
                     help="SQLite approval store (requests, grants, journal); default: in "
                          "memory")
    mcp.add_argument("--audit", metavar="FILE", help="append the hash-chained audit log here")
    mcp.add_argument("--approvals", choices=("none", "queue", "deny"), default="none",
                     help="channel for clients that cannot elicit: 'queue' waits for an "
                          "answer recorded in --store (web page, `sandbox approvals`), "
                          "'deny' refuses with a reason, 'none' (default) refuses and says "
                          "how to enable one")
    mcp.add_argument("--no-elicitation", action="store_true",
                     help="never ask the client; always use --approvals")
    mcp.add_argument("--approval-timeout", metavar="SECONDS", type=float, default=120.0,
                     help="how long a call waits for an answer before it is recorded as "
                          "timed out and not run (default: 120)")
    mcp.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        gate = build_gate(args)
    except (ImportError, ValueError, OSError, TypeError, AttributeError) as exc:
        print(f"sandbox mcp: {exc}", file=sys.stderr)
        return 2
    import anyio

    from ..integrations.mcp import serve_stdio

    anyio.run(serve_stdio, gate)
    return 0


def build_gate(args: argparse.Namespace) -> Any:
    """The `GatedToolServer` the command line describes (errors name the bad option)."""
    from ..approval.store import open_store
    from ..audit import AuditLog
    from ..errors import ConfigurationError
    from ..integrations.mcp import GatedToolServer

    tools = []
    if args.policy:
        tools.append(_bash_tool(args.policy, args.workspace))
    for spec in args.tools:
        tools.extend(load_tools(spec))
    if not tools:
        raise ConfigurationError("nothing to serve: pass --policy FILE and/or --tools MODULE:ATTR")
    if args.approvals == "queue" and not args.store:
        raise ConfigurationError(
            "--approvals queue needs --store FILE: the answer is recorded there by the web "
            "page or `sandbox approvals`, which must open the same file")
    store = open_store(args.store or None)
    provider: Any = None
    if args.approvals == "queue":
        from ..approval.queue import QueueConfirmationProvider

        provider = QueueConfirmationProvider(store, timeout=args.approval_timeout)
    elif args.approvals == "deny":
        from ..approval.providers import AutoDeny

        provider = AutoDeny("this MCP server refuses every call that needs approval "
                            "(--approvals deny)")
    return GatedToolServer(tools, provider=provider, elicitation=not args.no_elicitation,
                           approval_timeout=args.approval_timeout, store=store,
                           audit=AuditLog(args.audit))


def _bash_tool(policy_path: str, workspace: str) -> Any:
    from ..bash.policy import BashToolPolicy
    from ..bash.tool import ExecuteBashTool
    from ..errors import ConfigurationError

    root = Path(workspace).expanduser()
    if not root.is_dir():
        raise ConfigurationError(f"--workspace {workspace!r} is not a directory")
    return ExecuteBashTool(workspace=root.resolve(), policy=BashToolPolicy.from_toml(policy_path))


def load_tools(spec: str) -> list[Any]:
    """``module:attr`` → our tools; functions become (ungated) `FunctionTool`s."""
    from ..errors import ConfigurationError
    from ..tools.base import BaseTool
    from ..tools.function import FunctionTool

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"--tools {spec!r}: write it as module:attribute, e.g. "
                                 "mytools:TOOLS")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    module = importlib.import_module(module_name)
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigurationError(
                f"--tools {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    tools: list[Any] = []
    for item in items:
        if isinstance(item, BaseTool):
            tools.append(item)
        elif inspect.isfunction(item) or inspect.ismethod(item) or inspect.isbuiltin(item):
            tools.append(FunctionTool(item))
        else:
            raise ConfigurationError(
                f"--tools {spec!r}: {item!r} is neither a tool nor a function; give a "
                "BaseTool, a FunctionTool(fn, require_confirmation=...), a function, or a "
                "list of them")
    return tools
