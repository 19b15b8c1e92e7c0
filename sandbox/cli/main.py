"""The `sandbox` command line (also `python -m sandbox`).

Each group of commands lives in its own module under `sandbox.cli` and exposes
``register(subparsers)``; this file only wires them together, so a command's optional
dependencies (starlette, mcp, google-adk) are imported only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

DEBUG_ENV = "SANDBOX_DEBUG"

# (module under sandbox.cli) — each registers one or more subcommands.
COMMAND_MODULES = ("demo", "bash", "approvals", "audit", "mcp")

EPILOG = """examples:
  sandbox demo                                   run the embedded demo
  sandbox check --policy readonly -- 'ls -la | wc -l'
  sandbox run --policy readonly -- ls -la
  sandbox doctor                                 protections active on this machine
  sandbox approvals serve --store approvals.db   web page for pending approvals
  sandbox audit verify audit.jsonl               check the hash chain
  sandbox mcp --policy readonly                  serve execute_bash to an MCP client (stdio)
"""


from sandbox.errors import SandboxError  # noqa: E402  (after the constants it documents)


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
            module = importlib.import_module(f"sandbox.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sandbox.cli.{name}":
                continue  # that command group is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, list(sys.argv[1:] if argv is None else argv), extra)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    words = list(sys.argv[1:] if argv is None else argv)
    shown = words[:2] if words[:1] in (["approvals"], ["audit"]) else words[:1]
    command = " ".join(["sandbox", *(w for w in shown if not w.startswith("-"))])
    try:
        code = int(handler(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader left (`sandbox approvals list | head -5`): stop quietly, as a
        # program killed by SIGPIPE does, and keep Python from reporting it at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _reported() as exc:
        # Each command explains its own errors; this catches what slipped through, so a
        # user sees one sentence, never a traceback.
        if os.environ.get(DEBUG_ENV):
            import traceback

            traceback.print_exc()
        print(f"{command}: {_sentence(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            import traceback

            traceback.print_exc()
        print(f"{command}: internal error ({type(exc).__name__}: {exc}); this is a bug in "
              f"sandbox, please report it (set {DEBUG_ENV}=1 to see where it happened)",
              file=sys.stderr)
        return 70


def _unrecognized(parser: argparse.ArgumentParser, words: list[str], extra: list[str]) -> None:
    """Exit with the usage of the subcommand that was given ``extra``, suggesting the
    option meant (`check --polcy` gets `check`'s usage and "did you mean --policy?")."""
    import difflib

    target = parser
    for word in words:
        if word == "--":
            break
        subparsers = [a for a in target._actions
                      if isinstance(a, argparse._SubParsersAction)]
        if subparsers and word in subparsers[0].choices:
            target = subparsers[0].choices[word]
    options = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for word in extra:
        name = word.split("=", 1)[0]
        close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
        if name.startswith("-") and close:
            hints.append(f"did you mean {close[0]}?")
    message = f"unrecognized arguments: {' '.join(extra)}"
    target.error(message + (" (" + "; ".join(hints) + ")" if hints else ""))


def _reported() -> tuple[type[BaseException], ...]:
    """The errors `main` reports in one sentence. sqlite3.Error only once sqlite3 was
    imported (by the command that raised it): importing it here would cost every
    command that never opens a store."""
    sqlite3 = sys.modules.get("sqlite3")
    return (SandboxError, OSError) + ((sqlite3.Error,) if sqlite3 is not None else ())


def _sentence(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {exc.filename!r}" if exc.filename else ""
        return f"cannot use{where}: {exc.strerror}"
    return str(exc) or type(exc).__name__


if __name__ == "__main__":
    raise SystemExit(main())
