"""`sandbox audit verify FILE [--store REF]`: check the hash chain of an audit log, and
with a store, its head against the one anchored there."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


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
        epilog="example:\n  sandbox audit verify audit.jsonl --store approvals.db",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument("path", help="the audit log (JSON lines)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.add_argument("--store", default=None, metavar="REF",
                        help="the approval store the log is anchored in (a SQLite file or "
                             "a postgresql:// URL): "
                             "also detects records cut off the end of the log")
    verify.set_defaults(handler=_verify)
    audit.set_defaults(handler=lambda args: audit.print_help() or 2)


def _verify(args: argparse.Namespace) -> int:
    from sandbox.audit import verify_audit

    store = None
    if args.store is not None:
        from sandbox.approval.store import open_store
        from sandbox.errors import StoreError

        if "://" not in args.store and not os.path.exists(args.store):
            print(f"sandbox audit verify: no approval store at {args.store!r}")
            return 2
        try:
            store = open_store(args.store)
        except StoreError as exc:
            print(f"sandbox audit verify: {exc}")
            return 2
    try:
        result = verify_audit(args.path, anchor=store)
    except FileNotFoundError:
        print(f"sandbox audit verify: no such file {args.path!r}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sandbox audit verify: cannot read {args.path!r}: {exc.strerror}",
              file=sys.stderr)
        return 2
    finally:
        if store is not None:
            store.close()
    if args.json:
        print(json.dumps({"ok": result.ok, "records": result.records,
                          "problem": result.problem, "line": result.line,
                          "anchored": result.anchored, "note": result.note}))
    elif result.ok:
        print(f"OK: {result.records} records, hash chain intact"
              + (", head matches the store's anchor" if result.anchored else ""))
        if result.note:
            print(f"note: {result.note}")
    else:
        print(f"TAMPERED at line {result.line}: {result.problem} "
              f"({result.records} records verified before it)")
    return 0 if result.ok else 1
