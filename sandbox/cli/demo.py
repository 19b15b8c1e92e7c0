"""`sandbox demo`: run the embedded demo."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="run the embedded demo (no network, no account)",
        description="Gate a risky function with a confirmation predicate, answer it by "
                    "callback, defer one to SQLite and approve it from another process, and "
                    "run a sandboxed bash command.",
        epilog="example:\n  sandbox demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from sandbox.demo import main

    return main()
