"""`sandbox approvals ...`: serve the page, list, approve, deny, edit, and manage rules.

Answers given here are recorded with `ApprovalStore.submit_answer` (channel ``cli``,
identity ``$USER``); the process that holds the tool applies them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.errors import (
    ConfigurationError,
    ConfirmationStateError,
    ConfirmationTimedOutError,
    RuleError,
    StoreError,
    UnknownConfirmationError,
    UnknownRuleError,
)

if TYPE_CHECKING:
    from sandbox.approval.models import ConfirmationRequest, Decision, Remember, RulePattern
    from sandbox.approval.rules import Rule
    from sandbox.approval.store import ApprovalStore

# The approval machinery (pydantic models, the store) is imported by the handlers that
# use it, not here: `sandbox --help` and every other command import this module to
# register its subcommands.

STORE_ENV = "SANDBOX_STORE"
DEFAULT_STORE = "approvals.db"

_FMT = argparse.RawDescriptionHelpFormatter


def register(sub: Any) -> None:
    approvals = sub.add_parser(
        "approvals", help="answer pending approvals; serve the approvals page; rules",
        description="Answer confirmation requests waiting in an approval store (the SQLite "
                    f"file a ToolRunner uses). The store is --store FILE, or ${STORE_ENV}, "
                    f"or ./{DEFAULT_STORE}.",
        epilog="examples:\n"
               "  sandbox approvals serve --store approvals.db\n"
               "  sandbox approvals list\n"
               "  sandbox approvals approve cf_0123abcd\n"
               "  sandbox approvals deny cf_0123abcd --reason 'use the staging database'\n"
               "  sandbox approvals rules\n"
               "  sandbox approvals rules revoke rule_0123abcd",
        formatter_class=_FMT,
    )
    actions = approvals.add_subparsers(dest="approvals_action", metavar="ACTION")

    serve = _action(actions, "serve", "serve the approvals page (127.0.0.1 by default)",
                    "sandbox approvals serve --store approvals.db --port 8765\n"
                    "  sandbox approvals serve --store new.db --create",
                    json_flag=False)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1; anything else exposes "
                            "the page to other machines)")
    serve.add_argument("--port", type=int, default=8765, help="port (0 picks a free one)")
    serve.add_argument("--create", action="store_true",
                       help="create the store file if it does not exist (without it, a "
                            "missing store is an error, as for the other actions)")
    serve.add_argument("--identity", default=None,
                       help="who answers from the page, recorded with each decision "
                            "(default $USER)")
    serve.set_defaults(handler=_serve)

    listing = _action(actions, "list", "list pending approvals",
                      "sandbox approvals list --json")
    listing.set_defaults(handler=_list)

    approve = _action(actions, "approve", "approve a pending request",
                      "sandbox approvals approve cf_0123abcd\n"
                      "  sandbox approvals approve cf_0123abcd --scope always --prefix 'git log'")
    approve.add_argument("id", help="the confirmation id (see `sandbox approvals list`)")
    approve.add_argument("--scope", choices=("once", "session", "always"), default="once",
                         help="once (default); session or always also save a rule")
    approve.add_argument("--prefix", action="append", default=None, metavar="WORDS",
                         help="with --scope: cover every command starting with these words "
                              "(must be the first words of one of the call's commands; "
                              "repeat for several). Without it a rule covers each command "
                              "exactly")
    approve.add_argument("--tool-wide", action="store_true",
                         help="with --scope, for a tool that does not take commands: every "
                              "call of the tool, not just these arguments")
    approve.set_defaults(handler=_approve)

    deny = _action(actions, "deny", "deny a pending request, with a reason the model sees",
                   "sandbox approvals deny cf_0123abcd --reason 'not on production'")
    deny.add_argument("id", help="the confirmation id")
    deny.add_argument("--reason", required=True, help="why (the model is told)")
    deny.set_defaults(handler=_deny)

    edit = _action(actions, "edit", "approve the call with edited arguments (validated, and "
                                    "the policy's hard refusals checked again; then it runs "
                                    "once, not asked again)",
                   "sandbox approvals edit cf_0123abcd --command 'ls -la build'\n"
                   "  sandbox approvals edit cf_0123abcd --args '{\"scope\": \"dry-run\"}'")
    edit.add_argument("id", help="the confirmation id")
    group = edit.add_mutually_exclusive_group(required=True)
    group.add_argument("--command", help="the new command line (for command tools)")
    group.add_argument("--args", help="the new arguments, a JSON object")
    edit.set_defaults(handler=_edit)

    rules = _action(actions, "rules", "list remembered decisions, or revoke one",
                    "sandbox approvals rules --all\n  sandbox approvals rules revoke rule_0123abcd")
    rules.add_argument("--all", action="store_true",
                       help="include revoked and expired rules")
    rules_actions = rules.add_subparsers(dest="rules_action", metavar="revoke")
    revoke = _action(rules_actions, "revoke", "revoke a rule (it stops matching at once)",
                     "sandbox approvals rules revoke rule_0123abcd")
    revoke.add_argument("rule_id", help="the rule id (see `sandbox approvals rules`)")
    revoke.set_defaults(handler=_revoke)
    rules.set_defaults(handler=_rules)

    approvals.set_defaults(handler=lambda args: approvals.print_help() or 2)


def _action(actions: Any, name: str, help_text: str, example: str, *,
            json_flag: bool = True) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=help_text, description=help_text[:1].upper() + help_text[1:] + ".",
        epilog=f"example:\n  {example}", formatter_class=_FMT)
    parser.add_argument("--store", default=None, metavar="FILE|URL",
                        help="approval store: a SQLite file or a postgresql:// URL "
                             f"(default ${STORE_ENV} or ./{DEFAULT_STORE})")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


# -- handlers ----------------------------------------------------------------------------

def _open_store(args: argparse.Namespace, *, create: bool = False) -> ApprovalStore:
    from sandbox.approval.store import open_store

    ref = args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE
    if "://" in ref:  # postgresql://: the server says whether it exists
        try:
            return open_store(ref)
        except StoreError as exc:
            raise _Exit(2, str(exc)) from None
    path = Path(ref)
    parent = path.parent
    if not parent.is_dir():
        fix = (f"make it first (mkdir -p {parent})" if create else
               "pass --store with the file your ToolRunner(store_path=...) writes, or set "
               f"${STORE_ENV}; to start an empty store there, mkdir -p {parent} and run "
               "`sandbox approvals serve --create`")
        raise _Exit(2, f"no approval store at {path}: the directory {parent} does not "
                       f"exist; {fix}")
    if not create and not path.exists():
        hint = (" (or add --create to start an empty one)"
                if getattr(args, "create", None) is not None else "")
        raise _Exit(2, f"no approval store at {path}; pass --store FILE or set "
                       f"${STORE_ENV}{hint}")
    if path.is_dir():
        raise _Exit(2, f"{path} is a directory, not an approval store; pass --store FILE")
    try:
        return open_store(path)
    except StoreError as exc:
        raise _Exit(2, f"{exc} (is --store the SQLite file your ToolRunner uses?)") from None


class _Exit(Exception):
    def __init__(self, code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def _run(args: argparse.Namespace, fn: Any) -> int:
    try:
        result: dict[str, Any] = fn()
    except _Exit as exc:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "error": exc.message, **exc.extra}))
        else:
            print(f"sandbox approvals: {exc.message}", file=sys.stderr)
        return exc.code
    if getattr(args, "json", False):
        result.pop("text", None)
        print(json.dumps({"ok": True, **result}, default=str))
    else:
        print(result.pop("text"))
    return 0


def _who() -> str:
    import getpass

    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _serve(args: argparse.Namespace) -> int:
    try:
        from sandbox.approval.channels.web.server import ApprovalServer, is_loopback
    except ModuleNotFoundError as exc:
        print(f"sandbox approvals serve needs the web extra ({exc.name} is missing): "
              "pip install 'sandbox[web]'", file=sys.stderr)
        return 2
    from sandbox.approval.store.capabilities import location
    try:
        store = _open_store(args, create=args.create)
    except _Exit as exc:
        print(f"sandbox approvals serve: {exc.message}", file=sys.stderr)
        return exc.code
    try:
        server = ApprovalServer(store, host=args.host, port=args.port, identity=args.identity)
    except ConfigurationError as exc:
        print(f"sandbox approvals serve: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        print(f"WARNING: listening on {args.host}: other machines can reach this page; "
              "anyone with the token can approve calls", file=sys.stderr)
    print(f"Approvals page for {location(store) or 'the store'}: "
          f"{server.url}", flush=True)
    print("The token in that address is required on every request; keep it private. "
          "Ctrl-C stops.", flush=True)
    server.serve_forever()
    return 0


def _list(args: argparse.Namespace) -> int:
    def go() -> dict[str, Any]:
        with _open_store(args) as store:
            pending = store.pending()
            answered = {r.id for r in store.answered_requests()}
        items = [_request_json(r, r.id in answered) for r in pending]
        if not pending:
            return {"requests": items, "text": "no pending approvals"}
        text = "\n\n".join(_request_text(r, r.id in answered) for r in pending)
        return {"requests": items, "text": text}
    return _run(args, go)


def _submit(args: argparse.Namespace, build: Any) -> int:
    def go() -> dict[str, Any]:
        with _open_store(args) as store:
            try:
                req = store.get_request(args.id)
                decision: Decision = build(req)
                store.submit_answer(args.id, decision.model_dump(mode="json", exclude_none=True),
                                    decided_by=_who(), channel="cli")
            except UnknownConfirmationError as exc:
                raise _Exit(2, str(exc)) from None
            except ConfirmationTimedOutError as exc:
                raise _Exit(1, f"timed out: {exc}", status="timed_out") from None
            except ConfirmationStateError as exc:
                raise _Exit(1, str(exc), status="already_answered") from None
            except (ConfigurationError, RuleError, ValueError) as exc:
                raise _Exit(2, str(exc)) from None
        return {"id": args.id, "outcome": decision.outcome, "scope": decision.scope,
                "decided_by": _who(),
                "text": f"{decision.outcome} recorded for {args.id} (by {_who()}, channel "
                        "cli); the process holding the tool applies it"}
    return _run(args, go)


def _approve(args: argparse.Namespace) -> int:
    from sandbox.approval.models import Decision

    def build(req: ConfirmationRequest) -> Decision:
        if args.scope == "once":
            if args.prefix or args.tool_wide:
                raise ValueError("--prefix and --tool-wide go with --scope session or always")
            return Decision.approve(decided_by=_who(), channel="cli")
        remember = _remember(req, args.prefix, args.tool_wide)
        return Decision.approve(scope=args.scope, remember=remember, decided_by=_who(),
                                channel="cli")
    return _submit(args, build)


def _remember(req: ConfirmationRequest, prefixes: list[str] | None,
              tool_wide: bool) -> Remember | None:
    from sandbox.approval.display import rule_subjects_of
    from sandbox.approval.models import Remember, RulePattern
    from sandbox.approval.rules import check_patterns

    subjects = rule_subjects_of(req)
    if tool_wide:
        if subjects is not None:
            raise ValueError(f"{req.tool} runs commands; use --prefix WORDS, not --tool-wide")
        return Remember(tool_wide=True)
    if not prefixes:
        return None
    if subjects is None:
        raise ValueError(f"{req.tool} does not take commands; --prefix does not apply")
    chosen = [tuple(shlex.split(p)) for p in prefixes]
    patterns: list[RulePattern] = []
    for argv in subjects:
        fits = [w for w in chosen if w and tuple(argv[: len(w)]) == w]
        if fits:
            words = max(fits, key=len)
            patterns.append(RulePattern(words=words, prefix=len(words) < len(argv)))
        else:
            patterns.append(RulePattern(words=tuple(argv)))
    for words in chosen:
        if not any(p.words == words for p in patterns):
            raise ValueError(f"--prefix {shlex.join(words)!r} is not the first words of any "
                             "command of this call")
    check_patterns(patterns, subjects)
    return Remember(patterns=tuple(dict.fromkeys(patterns)))


def _deny(args: argparse.Namespace) -> int:
    from sandbox.approval.models import Decision

    return _submit(args, lambda req: Decision.deny(args.reason, decided_by=_who(),
                                                   channel="cli"))


def _edit(args: argparse.Namespace) -> int:
    from sandbox.approval.models import Decision

    def build(req: ConfirmationRequest) -> Decision:
        if args.command is not None:
            if not isinstance(req.args.get("command"), str):
                raise ValueError(f"{req.tool} takes no command; use --args JSON")
            return Decision.edit({**req.args, "command": args.command}, decided_by=_who(),
                                 channel="cli")
        try:
            new = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--args is not JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(new, dict):
            raise ValueError("--args must be a JSON object")
        return Decision.edit(new, decided_by=_who(), channel="cli")
    return _submit(args, build)


def _rules(args: argparse.Namespace) -> int:
    from sandbox.approval.rules import RuleBook

    def go() -> dict[str, Any]:
        with _open_store(args) as store:
            rules = RuleBook(store).rules(include_inactive=args.all)
        text = "\n".join(_rule_text(r) for r in rules) or "no rules"
        return {"rules": [_rule_json(r) for r in rules], "text": text}
    return _run(args, go)


def _revoke(args: argparse.Namespace) -> int:
    from sandbox.approval.rules import RuleBook

    def go() -> dict[str, Any]:
        with _open_store(args) as store:
            try:
                rule = RuleBook(store).revoke(args.rule_id, by=_who())
            except UnknownRuleError as exc:
                raise _Exit(2, str(exc)) from None
        return {"rule": _rule_json(rule), "text": f"revoked {rule.id}: {rule.describe()}"}
    return _run(args, go)


# -- presentation ----------------------------------------------------------------------

def _request_json(req: ConfirmationRequest, answered: bool) -> dict[str, Any]:
    from sandbox.approval.display import render_args, rule_subjects_of, visible_details
    from sandbox.approval.explain import explain

    return {
        "id": req.id, "call_id": req.call_id, "tool": req.tool, "args": req.args,
        "args_shown": render_args(req.args), "hint": req.hint, "kind": req.kind,
        "explain": explain(req).as_dict(),
        "details": visible_details(req), "rule_subjects": rule_subjects_of(req),
        "created_at": req.created_at.isoformat(),
        "expires_at": req.expires_at.isoformat() if req.expires_at else None,
        "answered": answered,
    }


def _request_text(req: ConfirmationRequest, answered: bool) -> str:
    from sandbox.approval.display import escape_text, render_args, visible_details
    from sandbox.approval.explain import explain

    lines = [f"{req.id}  {escape_text(req.tool)}" + ("  [answered, not applied yet]"
                                                    if answered else "")]
    lines.append("  " + render_args(req.args).replace("\n", "\n  "))
    said = explain(req)
    lines.append(f"  what: {escape_text(said.what)}")
    lines.append(f"  why asked: {escape_text(said.why)}")
    lines.append(f"  asked by: {escape_text(said.who)}")
    for key, value in visible_details(req).items():
        if key in ("commands", "workspace", "policy") and "policy" in req.details:
            continue  # said in "what" and "why asked"
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        lines.append(f"  {escape_text(str(key))}: {escape_text(text)}")
    lines.append("  answers: " + escape_text("; ".join(
        f"{answer}: {does}" for answer, does in said.answers
        if answer in ("approve once", "deny"))))
    if req.expires_at:
        lines.append(f"  expires: {req.expires_at.isoformat()}")
    return "\n".join(lines)


def _rule_json(rule: Rule) -> dict[str, Any]:
    data = rule.model_dump(mode="json")
    data["state"] = rule.state
    data["describe"] = rule.describe()
    return data


def _rule_text(rule: Rule) -> str:
    from sandbox.approval.display import escape_text

    where = "session " + (rule.session_id or "") if rule.scope == "session" else "always"
    return (f"{rule.id}  [{rule.state}] {escape_text(rule.describe())}  ({where}; expires "
            f"{rule.expires_at.isoformat(timespec='seconds')}; used {rule.uses}x; by "
            f"{escape_text(rule.created_by or '?')} via {rule.channel or '?'})")
