"""`sandbox mcp`: serve `execute_bash` and your gated tools to an MCP client.

Over stdio (the host starts the command) or Streamable HTTP (``--http HOST:PORT``, with a
bearer token). Startup errors go to stderr, worded for whoever edits the host's
configuration: a host shows the server's stderr in its log, and otherwise only says
"Connection closed".
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

TOKEN_ENV = "SANDBOX_MCP_TOKEN"

DESCRIPTION = """\
Serve tools over MCP on stdin/stdout (or Streamable HTTP with --http): execute_bash under
a policy, and gated tools from your own module or file. Every call passes the approval gate. A call that needs approval
asks the MCP client's user with an elicitation form (approve yes/no, reason) when the
client supports elicitation; otherwise the --approvals channel answers; with neither,
the call is refused at once. Declined, cancelled, denied or unanswered within
--approval-timeout: the tool does not run, and the client is told why. While a call
waits, the server sends notifications/progress to clients that gave a progressToken."""

EPILOG = """\
examples:
  sandbox mcp --policy readonly --workspace ~/project
  sandbox mcp --policy python-dev --tools ~/agent/mytools.py:TOOLS --store approvals.db
  sandbox mcp --tools ops.tools:wipe --approvals queue --store approvals.db
      (a client without elicitation: answer with `sandbox approvals approve ID` or on
       the page of `sandbox approvals serve --store approvals.db`)
  sandbox mcp --policy readonly --http 127.0.0.1:8931
      (Streamable HTTP at http://127.0.0.1:8931/mcp; the bearer token is printed on
       stderr, or give it in $SANDBOX_MCP_TOKEN)

  --policy takes a policy's name (shipped: readonly, git-readonly, python-dev; or
  NAME.toml in a directory of $SANDBOX_POLICY_PATH; never a file of the current
  directory) or a TOML file's path (./mine.toml). --tools takes path/to/file.py:ATTR (MCP hosts do not pass PYTHONPATH) or
  module:ATTR; ATTR names a BaseTool/FunctionTool, a function (served ungated), or a
  list of them.

  --approval-timeout defaults to 45 s: the TypeScript SDK's client gives up on a call
  after 60 s, so an answer and the tool's run fit inside its wait. Raise it for clients
  that wait longer.

client configuration (e.g. Claude Desktop's mcpServers):
  {"command": "/abs/path/.venv/bin/sandbox",
   "args": ["mcp", "--policy", "readonly", "--workspace", "/abs/project"]}"""


def register(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp", help="serve execute_bash and gated tools over MCP (stdio or HTTP)",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mcp.add_argument("--policy", metavar="NAME|FILE",
                     help="bash policy for execute_bash: a shipped name (readonly, "
                          "git-readonly, python-dev) or a TOML file; without it, only "
                          "--tools are served")
    mcp.add_argument("--workspace", metavar="DIR", default=".",
                     help="working directory of execute_bash (default: the current one)")
    mcp.add_argument("--tools", metavar="FILE.py:ATTR", nargs="+", default=[],
                     help="your tools, from a file (path/to/tools.py:TOOLS) or a module "
                          "(package.module:TOOLS): a BaseTool/FunctionTool, a function or a "
                          "list of them")
    mcp.add_argument("--store", metavar="FILE|URL",
                     help="approval store (requests, grants, journal): a SQLite file or a "
                          "postgresql:// URL (the postgres extra); default: in memory")
    mcp.add_argument("--audit", metavar="FILE", help="append the hash-chained audit log here")
    mcp.add_argument("--approvals", choices=("none", "queue", "deny"), default="none",
                     help="channel for clients that cannot elicit: 'queue' waits for an "
                          "answer recorded in --store (web page, `sandbox approvals`), "
                          "'deny' refuses with a reason, 'none' (default) refuses and says "
                          "how to enable one")
    mcp.add_argument("--no-elicitation", action="store_true",
                     help="never ask the client; always use --approvals")
    mcp.add_argument("--approval-timeout", metavar="SECONDS", type=float, default=45.0,
                     help="how long a call waits for an answer before it is recorded as "
                          "timed out and not run (default: 45, inside the 60 s after which "
                          "the TypeScript SDK's client gives up)")
    mcp.add_argument("--progress-interval", metavar="SECONDS", type=float, default=5.0,
                     help="seconds between progress notifications while a call waits for "
                          "approval (default: 5)")
    mcp.add_argument("--http", metavar="HOST:PORT",
                     help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio; "
                          "loopback addresses only unless --allow-remote")
    mcp.add_argument("--token", metavar="TOKEN",
                     help=f"bearer token for --http (default: ${TOKEN_ENV}, else a new "
                          "random one, printed on stderr)")
    mcp.add_argument("--allow-remote", action="store_true",
                     help="let --http listen on a non-loopback address (anyone who can "
                          "reach it and holds the token can call the tools)")
    mcp.set_defaults(handler=_run)


def _fail(message: str) -> int:
    print(f"sandbox mcp: cannot start: {message}\n"
          "  (check the command and args your MCP host runs; `sandbox mcp --help` shows "
          "the options)", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    from sandbox.errors import SandboxError

    try:
        http = _http_address(args) if args.http else None
        gate = build_gate(args)
    except _ToolsImportError as exc:
        return _fail(str(exc))
    except (SandboxError, ImportError, ValueError, OSError, TypeError, AttributeError) as exc:
        return _fail(str(exc) or type(exc).__name__)
    import anyio

    if http is None:
        from sandbox.integrations.mcp import serve_stdio

        anyio.run(serve_stdio, gate)
        return 0
    from sandbox.integrations.mcp import serve_http

    host, port = http
    token = args.token or os.environ.get(TOKEN_ENV) or ""
    generated = not token
    if generated:
        import secrets

        token = secrets.token_urlsafe(32)

    def ready(url: str) -> None:
        print(f"sandbox mcp: serving Streamable HTTP at {url}", file=sys.stderr, flush=True)
        if generated:
            print(f"sandbox mcp: bearer token (send 'Authorization: Bearer <token>'): "
                  f"{token}", file=sys.stderr, flush=True)

    try:
        anyio.run(lambda: serve_http(gate, host=host, port=port, token=token, ready=ready))
    except SandboxError as exc:
        return _fail(str(exc))
    except ImportError as exc:
        return _fail(f"--http needs uvicorn ({exc}); install it with pip install "
                     "'sandbox[mcp]'")
    return 0


def _http_address(args: argparse.Namespace) -> tuple[str, int]:
    from sandbox.errors import ConfigurationError

    host, sep, port_text = str(args.http).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigurationError(f"--http {args.http!r}: write HOST:PORT, e.g. "
                                 "--http 127.0.0.1:8931")
    if args.token is not None and len(args.token) < 16:
        raise ConfigurationError("--token must be at least 16 characters")
    if not args.allow_remote and not _is_loopback(host):
        raise ConfigurationError(
            f"--http {args.http!r} would listen on a non-loopback address, reachable from "
            "other machines; use 127.0.0.1 (or ::1), or add --allow-remote if that is "
            "really meant")
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_gate(args: argparse.Namespace) -> Any:
    """The `GatedToolServer` the command line describes (errors name the bad option)."""
    from sandbox.approval.store import open_store
    from sandbox.audit import AuditLog
    from sandbox.errors import ConfigurationError

    tools = []
    if args.approval_timeout is None or not args.approval_timeout > 0:
        raise ConfigurationError("--approval-timeout must be a positive number of seconds")
    if not args.progress_interval > 0:
        raise ConfigurationError("--progress-interval must be a positive number of seconds")
    if args.policy:
        tools.append(_bash_tool(args.policy, args.workspace))
    for spec in args.tools:
        tools.extend(load_tools(spec))
    if not tools:
        raise ConfigurationError("nothing to serve: pass --policy NAME|FILE and/or "
                                 "--tools FILE.py:ATTR")
    if args.approvals == "queue" and not args.store:
        raise ConfigurationError(
            "--approvals queue needs --store FILE: the answer is recorded there by the web "
            "page or `sandbox approvals`, which must open the same file")
    store = _open_store(args.store) if args.store else open_store()
    provider: Any = None
    if args.approvals == "queue":
        from sandbox.approval.channels.queue import QueueConfirmationProvider

        provider = QueueConfirmationProvider(store, timeout=args.approval_timeout)
    elif args.approvals == "deny":
        from sandbox.approval.providers import AutoDeny

        provider = AutoDeny("this MCP server refuses every call that needs approval "
                            "(--approvals deny)")
    # The MCP SDK last (hundreds of ms to import): the bash tool, built above, has started its
    # spawner and probes meanwhile (sandbox/bash/run/warm.py).
    from sandbox.integrations.mcp import GatedToolServer

    return GatedToolServer(tools, provider=provider, elicitation=not args.no_elicitation,
                           approval_timeout=args.approval_timeout, store=store,
                           audit=AuditLog(args.audit) if args.audit else AuditLog(),
                           progress_interval=args.progress_interval)


def _open_store(path: str) -> Any:
    import sqlite3

    from sandbox.approval.store import open_store
    from sandbox.errors import ConfigurationError, StoreError

    try:
        return open_store(path)
    except sqlite3.DatabaseError as exc:
        raise ConfigurationError(f"--store {path!r} is not an approval store (SQLite): "
                                 f"{exc}") from None
    except StoreError as exc:
        raise ConfigurationError(f"--store: {exc}") from None


def _bash_tool(policy_ref: str, workspace: str) -> Any:
    from sandbox import policies
    from sandbox.bash.policy.evaluate import BashToolPolicy
    from sandbox.bash.tool import ExecuteBashTool
    from sandbox.errors import ConfigurationError

    root = Path(workspace).expanduser()
    if not root.is_dir():
        raise ConfigurationError(f"--workspace {workspace!r} is not a directory (relative "
                                 f"paths are read from {os.getcwd()}); give an absolute path")
    policy = BashToolPolicy.from_toml(policies.resolve(policy_ref))
    warning = policies.banner(policy_ref, policy)
    if warning:  # the host shows the server's stderr in its log
        print("sandbox mcp: " + warning.replace("\n", "\nsandbox mcp: "), file=sys.stderr,
              flush=True)
    return ExecuteBashTool(workspace=root.resolve(), policy=policy)


class _ToolsImportError(Exception):
    """The user's tools file or module failed while it was imported."""


def load_tools(spec: str) -> list[Any]:
    """``path/to/file.py:attr`` or ``module:attr`` → our tools; functions become
    (ungated) `FunctionTool`s."""
    from sandbox.errors import ConfigurationError

    source, sep, attr = spec.rpartition(":")
    if not sep or not source or not attr:
        raise ConfigurationError(f"--tools {spec!r}: write it as path/to/file.py:ATTR or "
                                 "module:ATTR, e.g. ./mytools.py:TOOLS")
    if source.endswith(".py") or os.sep in source:
        module = _import_file(spec, source)
        where = source
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            # Last, not first: a file of the current directory (a repository the agent
            # works in) must not stand in for a module imported later (uvicorn, a
            # stdlib module loaded lazily); it only supplies the module asked for.
            sys.path.append(str(Path.cwd()))
        try:
            module = importlib.import_module(source)
        except ModuleNotFoundError as exc:
            if exc.name and source.split(".")[0] == exc.name.split(".")[0]:
                raise ConfigurationError(
                    f"--tools {spec!r}: no module {source!r} (looked in {os.getcwd()} and "
                    "PYTHONPATH); MCP hosts usually start servers without PYTHONPATH, so "
                    "give the file instead: --tools /abs/path/to/file.py:" + attr) from None
            raise _ToolsImportError(_import_failure(spec, exc)) from None
        except Exception as exc:
            raise _ToolsImportError(_import_failure(spec, exc)) from None
        where = f"module {source!r}"
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigurationError(
                f"--tools {spec!r}: {where} has no attribute {attr!r}") from None
    import inspect

    from sandbox.tools.base import BaseTool
    from sandbox.tools.function import FunctionTool

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


def _import_file(spec: str, source: str) -> Any:
    import hashlib
    import importlib.util

    from sandbox.errors import ConfigurationError

    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigurationError(
            f"--tools {spec!r}: no file {source!r} (relative paths are read from "
            f"{os.getcwd()}); give an absolute path")
    path = path.resolve()
    # The file's own folder first, so it can import its neighbours, as `python file.py`.
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"sandbox_mcp_tools_{path.stem}_{digest}"  # two tools.py files never collide
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigurationError(f"--tools {spec!r}: {source!r} cannot be imported as "
                                 "Python (does it end in .py?)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _ToolsImportError(_import_failure(spec, exc)) from None
    return module


def _import_failure(spec: str, exc: BaseException) -> str:
    """One readable paragraph for an exception raised by the user's tools code."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    ours = str(Path(__file__).resolve().parent.parent)
    user = [f for f in frames if not f.filename.startswith(ours)
            and "importlib" not in f.filename]
    where = f" at {user[-1].filename}:{user[-1].lineno}" if user else ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" at {exc.filename}:{exc.lineno}"
    return (f"--tools {spec!r}: importing it raised {type(exc).__name__}: {exc}{where}; "
            "fix that code (run `python FILE.py` to see the full error)")
