"""Remembered decisions: "approve this for the session" and "always approve this".

A rule approves future calls on a human's behalf, so it is narrow, visible and
temporary:

- For a tool whose calls are commands (`BaseTool.rule_subjects` returns the argv of
  every parsed simple command), a rule covers argv word patterns: exactly
  ``curl https://a``, or, only when a human chose it, every command starting with
  ``git log``. A compound command is approved only when *every* simple command in it
  is covered, so ``git log; rm -rf ~`` is not approved by a ``git log`` rule.
- For other tools, a rule is the tool plus exact canonical arguments, or the whole
  tool when a human explicitly chose that.
- Every rule has a scope (``session``: this runner's session only; ``always``), an
  expiry, and can be listed and revoked (``sandbox approvals rules``); a revoked or
  expired rule stops matching at once, in every process sharing the store.

Rules live in the approval store (a table in SQLite or PostgreSQL; `Rule` objects in a
`MemoryApprovalStore`), read and written only through the store Protocol's rule
operations (`add_rules`, `active_rules`, `mark_rules_used`, `get_rule`, `list_rules`,
`revoke_rule`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sandbox.approval.models import (
    ConfirmationRequest,
    Decision,
    Remember,
    Rule,
    RuleKind,
    RulePattern,
    RuleScope,
    args_digest,
)
from sandbox.approval.store import ApprovalStore, new_id
from sandbox.errors import ConfigurationError, RuleError, UnknownRuleError

__all__ = ["Rule", "RuleBook", "RuleKind", "RuleScope", "check_patterns", "patterns_for"]

#: Default lifetimes. A session rule also dies with its session; the expiry bounds a
#: session that never ends. An "always" rule is "always, for the next 30 days".
SESSION_TTL = 24 * 3600.0
ALWAYS_TTL = 30 * 24 * 3600.0
MAX_TTL = 366 * 24 * 3600.0




def patterns_for(subjects: Sequence[Sequence[str]]) -> tuple[RulePattern, ...]:
    """The narrowest patterns covering these commands: each one exactly, no duplicates."""
    seen: dict[tuple[str, ...], None] = {}
    for argv in subjects:
        if argv:
            seen.setdefault(tuple(argv), None)
    return tuple(RulePattern(words=w) for w in seen)


def check_patterns(patterns: Sequence[RulePattern], subjects: Sequence[Sequence[str]]) -> None:
    """Refuse patterns that do not fit the commands the human was asked about.

    Every pattern must be a word prefix of one of the commands (a human may narrow the
    words kept, never add other words), and every command must be covered (saving a
    rule that would not even approve this call is a mistake, not a choice).
    """
    if not subjects or any(len(argv) == 0 for argv in subjects):
        raise RuleError("this call has no parsed commands to remember; approve it once")
    for pattern in patterns:
        if not any(tuple(argv[: len(pattern.words)]) == pattern.words for argv in subjects):
            raise RuleError(
                f"rule words {list(pattern.words)} are not a prefix of any command in this "
                "call; a rule may keep the first words of a command, nothing else"
            )
        if not pattern.prefix and not any(tuple(argv) == pattern.words for argv in subjects):
            raise RuleError(
                f"rule words {list(pattern.words)} are shorter than the command; mark the "
                "pattern prefix=True to cover every command starting with them"
            )
    for argv in subjects:
        if not any(_covers(p, argv) for p in patterns):
            raise RuleError(
                f"command {list(argv)} of this call is not covered by the rule; every "
                "command of a compound call needs a pattern"
            )


def _covers(pattern: RulePattern, argv: Sequence[str]) -> bool:
    n = len(pattern.words)
    return tuple(argv[:n]) == pattern.words if pattern.prefix else tuple(argv) == pattern.words


class RuleBook:
    """The rules table of one `ApprovalStore`: add, match, list, revoke."""

    def __init__(self, store: ApprovalStore, *, session_ttl: float = SESSION_TTL,
                 always_ttl: float = ALWAYS_TTL) -> None:
        for name, value in (("session_ttl", session_ttl), ("always_ttl", always_ttl)):
            if not 0 < value <= MAX_TTL:
                raise ConfigurationError(
                    f"{name} must be between 0 and {MAX_TTL:g} seconds, got {value!r}"
                )
        self.store = store
        self.session_ttl = session_ttl
        self.always_ttl = always_ttl

    # -- making rules ----------------------------------------------------------------

    def from_decision(
        self, request: ConfirmationRequest, decision: Decision, *,
        subjects: Sequence[Sequence[str]] | None, session_id: str | None,
    ) -> list[Rule]:
        """The rules an approval with scope session/always asks for (saved here).

        ``subjects`` are the request's parsed commands (None for a tool that is not
        command-shaped). Raises `RuleError` when the decision asks for a rule that does
        not fit the request; nothing is saved then.
        """
        if decision.outcome != "approve" or decision.scope == "once":
            return []
        scope: RuleScope = decision.scope
        if scope == "session" and not session_id:
            raise RuleError("a session rule needs a session id")
        spec = decision.remember or Remember()
        ttl = spec.ttl if spec.ttl is not None else (
            self.session_ttl if scope == "session" else self.always_ttl)
        if ttl > MAX_TTL:
            raise RuleError(f"a rule lives at most {MAX_TTL:g} seconds, asked for {ttl:g}")
        common: dict[str, Any] = dict(
            tool=request.tool, scope=scope, session_id=session_id if scope == "session" else None,
            ttl=ttl, created_by=decision.decided_by, channel=decision.channel,
            request_id=request.id,
        )
        if subjects is not None:
            if spec.tool_wide:
                raise RuleError(
                    f"{request.tool} runs commands: a rule covers command words, not every "
                    "call of the tool; choose a prefix of words instead"
                )
            patterns = spec.patterns if spec.patterns is not None else patterns_for(subjects)
            check_patterns(patterns, subjects)
            return self._add_many([
                dict(common, kind="command", words=p.words, prefix=p.prefix) for p in patterns
            ])
        if spec.patterns is not None:
            raise RuleError(f"{request.tool} does not take commands; a rule for it is its exact "
                            "arguments, or tool_wide=True for every call")
        if spec.tool_wide:
            return self._add_many([dict(common, kind="tool")])
        return self._add_many([dict(common, kind="args", args=request.args,
                                    digest=args_digest(request.tool, request.args))])

    def add(self, *, tool: str, kind: RuleKind, scope: RuleScope, ttl: float,
            words: Sequence[str] | None = None, prefix: bool = False,
            args: dict[str, Any] | None = None, session_id: str | None = None,
            created_by: str | None = None, channel: str | None = None,
            request_id: str | None = None) -> Rule:
        """Save one rule directly (for set-up code; humans make rules by approving)."""
        digest = args_digest(tool, args) if kind == "args" and args is not None else None
        return self._add_many([dict(
            tool=tool, kind=kind, scope=scope, ttl=ttl, words=words, prefix=prefix, args=args,
            digest=digest, session_id=session_id, created_by=created_by, channel=channel,
            request_id=request_id)])[0]

    def _add_many(self, specs: list[dict[str, Any]]) -> list[Rule]:
        now = time.time()
        rules: list[Rule] = []
        for spec in specs:  # every rule is checked before any is saved: all or none
            kind = spec["kind"]
            words = spec.get("words")
            if kind == "command" and not words:
                raise RuleError("a command rule needs at least one word")
            if kind == "args" and spec.get("args") is None:
                raise RuleError("an arguments rule needs the arguments")
            if spec["scope"] == "session" and not spec.get("session_id"):
                raise RuleError("a session rule needs a session id")
            if not 0 < spec["ttl"] <= MAX_TTL:
                raise RuleError(f"a rule's ttl must be in (0, {MAX_TTL:g}] seconds")
            rules.append(Rule(
                id=new_id("rule"), tool=spec["tool"], kind=kind,
                words=None if words is None else tuple(words),
                prefix=bool(spec.get("prefix")), args=spec.get("args"),
                digest=spec.get("digest"), scope=spec["scope"],
                session_id=spec.get("session_id"), created_at=_utc(now),
                expires_at=_utc(now + spec["ttl"]), created_by=spec.get("created_by"),
                channel=spec.get("channel"), request_id=spec.get("request_id"),
            ))
        self.store.add_rules(rules)
        return [self.get(rule.id) for rule in rules]

    # -- using rules -----------------------------------------------------------------

    def match(self, tool: str, args: dict[str, Any], *,
              subjects: Sequence[Sequence[str]] | None,
              session_id: str | None, record: bool = True) -> list[Rule] | None:
        """The active rules that together approve this call, or None.

        ``record=False`` only looks (`ToolRunner.would_ask`): the rules' use is not
        counted.

        Commands: every parsed simple command must be covered by some rule (an empty
        parse is never covered). Other tools: a rule for these exact arguments, or a
        tool-wide rule.
        """
        now = time.time()
        rules = self.store.active_rules(tool, session_id, now)
        if not rules:  # the common case: nothing remembered for this tool
            return None
        used: list[Rule] = []
        if subjects is not None:
            if not subjects:
                return None
            for argv in subjects:
                rule = next((r for r in rules if r.covers(argv)), None)
                if rule is None or not argv:
                    return None
                if rule not in used:
                    used.append(rule)
        else:
            digest = args_digest(tool, args)
            rule = next((r for r in rules if r.kind == "args" and r.digest == digest), None) \
                or next((r for r in rules if r.kind == "tool"), None)
            if rule is None:
                return None
            used.append(rule)
        if record:
            self.store.mark_rules_used([rule.id for rule in used], now)
        return used

    # -- seeing and revoking -------------------------------------------------------------

    def get(self, rule_id: str) -> Rule:
        rule = self.store.get_rule(rule_id)
        if rule is None:
            raise UnknownRuleError(
                f"unknown rule id {rule_id!r}; list the rules with `sandbox approvals rules`")
        return rule

    def rules(self, *, include_inactive: bool = False, tool: str | None = None) -> list[Rule]:
        """Rules, oldest first: active ones, or with ``include_inactive`` all of them."""
        return self.store.list_rules(include_inactive=include_inactive, tool=tool,
                                     now=time.time())

    def revoke(self, rule_id: str, *, by: str | None = None) -> Rule:
        """Stop a rule from matching, from now on and in every process."""
        exists = self.store.revoke_rule(rule_id, by, time.time())
        if not exists:
            raise UnknownRuleError(
                f"unknown rule id {rule_id!r}; list the rules with `sandbox approvals rules`")
        return self.get(rule_id)



def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)
