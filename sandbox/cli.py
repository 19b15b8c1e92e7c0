"""The `sandbox` command line (also `python -m sandbox`).

Each group of commands lives in its own module under `sandbox.commands` and exposes
``register(subparsers)``; this file only wires them together, so a command's optional
dependencies (starlette, mcp, google-adk) are imported only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# (module under sandbox.commands) — each registers one or more subcommands.
COMMAND_MODULES = ("demo", "bash", "approvals", "audit", "mcp")

EPILOG = """examples:
  sandbox demo                                   run the embedded demo
  sandbox check --policy policies/readonly.toml -- 'ls -la | wc -l'
  sandbox run --policy policies/readonly.toml -- ls -la
  sandbox doctor                                 protections active on this machine
  sandbox approvals serve --store approvals.db   web page for pending approvals
  sandbox audit verify audit.jsonl               check the hash chain
  sandbox mcp --policy policies/readonly.toml    serve execute_bash to an MCP client (stdio)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbox",
        description="Make risky agent tools safe: bash sandbox, approvals, audit.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"sandbox.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sandbox.commands.{name}":
                continue  # that command group is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
