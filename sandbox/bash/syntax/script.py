"""A command parsed and walked in this process (`_parse_tree`): the tree, the walk, the
checks for control characters, line continuations and R9 agreement."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from tree_sitter import Node

from sandbox.bash.syntax.agreement import Disagreement
from sandbox.bash.syntax.grammar import (
    _Cut,
    _parse_bounded,
)
from sandbox.bash.syntax.model import (
    Finding,
    Operator,
    ParsedScript,
    Redirect,
    SimpleCommand,
    _control_positions,
    escape_controls,
)
from sandbox.bash.syntax.walk import _Walk

_CONTINUATION = re.compile(rb"\\+\n")


def _line_continuations(data: bytes) -> list[int]:
    """Offsets of the backslash of every backslash-newline that bash removes
    (an odd run of backslashes before the newline)."""
    if b"\\\n" not in data:
        return []
    return [m.end() - 2 for m in _CONTINUATION.finditer(data) if (m.end() - m.start()) % 2 == 0]


def _first_error(root: Node) -> Node:
    """The first ERROR or MISSING node under ``root`` (which has one)."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            return node
        stack.extend(reversed([c for c in node.children if c.has_error]))
    return root



def _slow_message(max_seconds: float) -> str:
    return (
        f"the command took longer than {max_seconds:g} s to parse (tree-sitter-bash "
        "recovers from some syntax errors very slowly); fix its syntax or shorten it"
    )


def _parse_tree(
    source: str,
    data: bytes,
    max_depth: int,
    agreement: Callable[[Node, bytes], Disagreement | None],
    max_seconds: float = 1.0,
    root: Node | None = None,
) -> ParsedScript:
    """Parse ``data`` here (within ``max_seconds``; or take ``root``, its tree) and walk
    the tree; R9 is asked of ``agreement``."""
    def early(rule: str, message: str, token: str | None = None, at: int = 0) -> ParsedScript:
        return ParsedScript(source, (), (), (), (), (), (Finding(rule, message, token, at),), 0)

    if root is None:
        try:
            root = _parse_bounded(data, max_seconds)
        except _Cut:
            return early("R6", _slow_message(max_seconds))
    controls = _control_positions(source)
    if root.has_error:
        # Fail closed without walking a tree that is partly guesswork.
        if controls:
            return early("R8", _control_message(source[controls[0]]), None, controls[0])
        bad = _first_error(root)
        snippet = data[bad.start_byte : bad.start_byte + 40].decode("utf-8", "replace")
        at = len(data[: bad.start_byte].decode("utf-8", "replace"))
        if bad.is_missing:
            return early("R6", f"bash syntax error: missing {bad.type!r}", bad.type, at)
        return early("R6", f"bash syntax error near {snippet!r}", snippet, at)
    joins = _line_continuations(data)
    walk = _Walk(source, data, max_depth, bool(controls or joins), bool(joins))
    walk.run(root)
    if walk.expansions:
        walk.check_expansions()
    if joins:
        walk.check_line_continuations(joins)
    if controls:
        if walk.ascii:
            bytes_at = controls
        else:  # byte offsets of the (sorted) character offsets, in one pass
            bytes_at, done, size = [], 0, 0
            for pos in controls:
                size += len(source[done:pos].encode("utf-8"))
                done = pos
                bytes_at.append(size)
        quoted = walk.data_flags(bytes_at)
        for pos, byte in zip(controls, bytes_at, strict=True):
            if not quoted[byte]:
                ch = source[pos]
                walk.findings.append(Finding("R8", _control_message(ch), escape_controls(ch), pos))
                break
    if not any(f.rule in ("R6", "R8") for f in walk.findings):
        disagreement = agreement(root, data)
        if disagreement is not None:
            at = len(data[: disagreement.byte].decode("utf-8", "replace"))
            token = data[disagreement.byte : disagreement.byte + 24].decode("utf-8", "replace")
            walk.findings.append(Finding(
                "R9",
                f"tree-sitter-bash and bash read this differently: {disagreement.construct} "
                f"at offset {at}; write it more plainly (quote the text, split the command)",
                token,
                at,
            ))
    return ParsedScript(
        source,
        _in_order(walk.commands),
        _in_order(walk.operators),
        tuple(walk.assignments),
        tuple(walk.functions),
        _in_order(walk.redirects),
        tuple(sorted(walk.findings, key=_by_rule_then_offset))
        if len(walk.findings) > 1
        else tuple(walk.findings),
        walk.depth,
    )


_Located = TypeVar("_Located", SimpleCommand, Operator, Redirect)


def _in_order(items: list[_Located]) -> tuple[_Located, ...]:
    if len(items) > 1:
        items.sort(key=_by_offset)
    return tuple(items)


def _by_offset(item: SimpleCommand | Operator | Redirect) -> int:
    return item.offset


def _by_rule_then_offset(finding: Finding) -> tuple[int, int]:
    # R8 before R6 before R2: the most basic reason first.
    return ({"R8": 0, "R6": 1, "R9": 1}.get(finding.rule, 2), finding.offset)


def _control_message(ch: str) -> str:
    return (
        f"control character {escape_controls(ch)} outside quotes: bash, this parser and "
        "a terminal showing the command read it differently"
    )


