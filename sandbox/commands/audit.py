"""`sandbox audit verify FILE`: check the hash chain of an audit log."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..audit import verify_audit


def register(sub: Any) -> None:
    audit = sub.add_parser(
        "audit", help="inspect audit logs",
        description="Inspect the JSON-lines audit log written by ToolRunner(audit_path=...).",
        epilog="example:\n  sandbox audit verify audit.jsonl --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    audit_sub = audit.add_subparsers(dest="audit_command", metavar="ACTION")
    verify = audit_sub.add_parser(
        "verify", help="find a changed, inserted or deleted record",
        epilog="example:\n  sandbox audit verify audit.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("path", help="the audit log (JSON lines)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.set_defaults(handler=_verify)
    audit.set_defaults(handler=lambda args: audit.print_help() or 2)


def _verify(args: argparse.Namespace) -> int:
    try:
        result = verify_audit(args.path)
    except FileNotFoundError:
        print(f"sandbox audit verify: no such file {args.path!r}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandbox audit verify: cannot read {args.path!r}: {exc.strerror}",
              file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"ok": result.ok, "records": result.records,
                          "problem": result.problem, "line": result.line}))
    elif result.ok:
        print(f"OK: {result.records} records, hash chain intact")
    else:
        print(f"TAMPERED at line {result.line}: {result.problem} "
              f"({result.records} records verified before it)")
    return 0 if result.ok else 1
