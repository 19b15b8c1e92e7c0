"""Checks of the source a walk makes once the tree is walked (`_SourceChecks`, a base of
`sandbox.bash.syntax.walk._Walk`): every ``$(``/``${``/backtick and every line join of
the source is one the tree accounts for, and which bytes lie in quoted data."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from sandbox.bash.syntax.model import Finding


class _SourceChecks:
    """The source-level half of `_Walk` (its base): what it needs of the walk's state."""

    data: bytes
    ascii: bool
    findings: list[Finding]
    expansions: list[int]
    claimed: set[int]
    data_ranges: list[tuple[int, int, bool]]
    literal_ranges: list[tuple[int, int]]

    def offset(self, byte: int) -> int:
        if self.ascii:
            return byte
        return len(self.data[:byte].decode("utf-8", "replace"))

    def in_literal(self) -> Callable[[int], bool]:
        """Whether a byte lies in a literal range (single quotes, ``$'…'``, a comment,
        a quoted here-document), by binary search over the merged ranges: the checks
        below ask once per ``$(`` or line join, and a crafted command has thousands
        of both (a linear scan each made a 60 KB command take seconds)."""
        merged: list[list[int]] = []
        for start, end in sorted(self.literal_ranges):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        starts = [m[0] for m in merged]

        def contains(pos: int) -> bool:
            i = bisect.bisect_right(starts, pos) - 1
            return i >= 0 and pos < merged[i][1]

        return contains

    def data_flags(self, positions: list[int]) -> dict[int, bool]:
        """Whether bash reads the byte at each of ``positions`` (sorted) as quoted text, in one sweep (ranges nest or are
        disjoint, being spans of tree nodes): linear instead of positions times ranges."""
        ranges = sorted(self.data_ranges, key=lambda r: (r[0], -r[1]))
        out: dict[int, bool] = {}
        stack: list[tuple[int, int, bool]] = []
        i = 0
        for pos in positions:
            while i < len(ranges) and ranges[i][0] <= pos:
                while stack and stack[-1][1] <= ranges[i][0]:
                    stack.pop()
                stack.append(ranges[i])
                i += 1
            while stack and stack[-1][1] <= pos:
                stack.pop()
            out[pos] = bool(stack) and stack[-1][2]
        return out

    def check_expansions(self) -> None:
        """Every "$(", "${", "$[" and backtick must be one tree-sitter parsed."""
        data = self.data
        literal = self.in_literal()
        for pos in self.expansions:
            if pos in self.claimed:
                continue
            slashes = 0
            while pos - slashes > 0 and data[pos - slashes - 1] == 0x5C:  # backslash
                slashes += 1
            if slashes % 2:
                continue
            if literal(pos):
                continue
            token = "`" if data[pos] == 0x60 else data[pos : pos + 2].decode()
            what = "a backtick substitution" if token == "`" else f"an expansion {token!r}"
            self.findings.append(
                Finding(
                    "R6",
                    f"{what} that tree-sitter-bash does not parse here but bash runs "
                    "(write $(...) outside here-documents, or quote the here-document "
                    "delimiter: <<'EOF')",
                    token,
                    self.offset(pos),
                )
            )
            return

    def check_line_continuations(self, joins: list[int]) -> None:
        """bash removes backslash-newline before it splits words; tree-sitter-bash
        reads it as a blank. They agree only where a blank is next to it anyway:
        ``ls\\<newline>blk`` runs lsblk, and ``"$\\<newline>(id)"`` runs id."""
        data = self.data
        literal = self.in_literal()
        quoted = self.data_flags(sorted(joins))
        for pos in joins:
            if literal(pos):
                continue  # single quotes, $'...', comments, quoted here-documents
            prev = data[pos - 1 : pos]
            nxt = data[pos + 2 : pos + 3]
            if quoted[pos]:
                joined = prev == b"$"  # in double quotes only "$" + "(" matters
            else:
                # a blank escaped by a backslash is part of the word before it
                # (``p\ \<newline>a`` is the one word "p a" to bash)
                escaped_blank = prev in (b" ", b"\t") and _odd_backslashes(data, pos - 1)
                joined = (escaped_blank or prev not in (b"", b" ", b"\t", b"\n")) and nxt not in (
                    b"",
                    b" ",
                    b"\t",
                    b"\n",
                )
            if joined:
                self.findings.append(
                    Finding(
                        "R6",
                        "a backslash-newline joins two words or operators, which bash "
                        "reads as one and tree-sitter-bash as two; put a blank before "
                        "the backslash",
                        "\\\n",
                        self.offset(pos),
                    )
                )
                return


def _odd_backslashes(data: bytes, end: int) -> bool:
    """Whether an odd run of backslashes ends just before ``end`` (escaping data[end])."""
    k = end
    while k > 0 and data[k - 1] == 0x5C:
        k -= 1
    return (end - k) % 2 == 1


