"""R9: decide only where tree-sitter-bash reads token boundaries as bash does.

tree-sitter-bash is a grammar for editors; bash's own lexer (``parse.y``,
``read_token``) differs from it in corners an attacker can aim at: an ANSI-C string
that tree-sitter ends at a later ``\\'``, a ``#`` inside a word read as a comment, an
``=~`` outside ``[[ ]]`` whose "regex" swallows ``;``, a process substitution inside
``${…}`` left as text. Each of those hides a command from a policy that trusts the tree.

This module does not trust the tree's token boundaries. It walks every leaf of the
tree in source order and re-derives, from the rules of bash's manual (QUOTING,
Comments, Definitions: metacharacters and control operators, Parameter Expansion),
what bash's lexer would read starting at the same byte, and requires the two to end
at the same byte:

- the bytes between two leaves are blanks (or line continuations) and nothing else;
- a word leaf holds no unquoted metacharacter, quote, backquote or ``$``-expansion
  that bash would act on, and does not start a comment;
- a ``'…'``, ``$'…'``, ``"…"``, ``${…}`` or backquoted span ends where bash's
  quoting rules end it, and every substitution bash would perform inside it is one
  the tree parsed (so its commands were checked);
- an operator leaf is the longest operator bash reads at that byte (``;`` then ``;``
  is ``;;``); a reserved word stands alone as a word;
- a comment starts where a word could start and runs to the end of the line;
- a ``regex`` exists only inside ``[[ ]]`` and holds no blank, ``;``, ``&``,
  ``|``, ``<``, ``>`` or parenthesis (bash's regex-word rules are subtle: refuse).

Where any of these fails, the command is refused under R9, naming the construct and
the byte. A divergence then cannot hide a command: a byte bash treats as syntax is
either syntax in the tree too, or the command is refused.

Here-document bodies are checked by `sandbox.bash.syntax.parse` (delimiters, backquotes,
substitutions) and skipped here, as are the insides of arithmetic, whose operators
differ from the shell's.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from tree_sitter import Node

__all__ = ["Disagreement", "check_agreement"]


class Disagreement(NamedTuple):
    """Where tree-sitter-bash and bash read the source differently."""

    construct: str
    byte: int


_BLANKS = frozenset(b" \t\n")
# Bytes that end a word for bash (its "metacharacters") and blanks.
_META = frozenset(b" \t\n;&|<>()")
# What may follow "$" for bash to expand it.
_EXPANDS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789@*#?$!-{([")
# bash's operators, longest first so the first match is the longest (read_token).
_OPERATORS = (
    b";;&", b"<<<", b"<<-", b"&>>", b";;", b";&", b"&&", b"||", b"|&", b"<<", b"<&", b"<>",
    b">>", b">&", b">|", b"&>", b"<(", b">(", b";", b"&", b"|", b"<", b">", b"(", b")",
)  # fmt: skip
# Anonymous leaves that open a structure whose end is checked with the structure.
_OPENERS = frozenset({"$(", "`", "${", "$((", "((", "$[", '"', '$"', "<(", ">(", "$"})
# Nodes bash reads as (part of) one word: no blank may separate their children.
_ONE_WORD = frozenset({"simple_expansion", "concatenation"})
_ARITHMETIC = frozenset({"arithmetic_expansion", "c_style_for_statement"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# Named children of a redirection that are not a word bash would pass as an argument.
_NOT_TARGET = frozenset({
    "file_descriptor", "heredoc_start", "heredoc_body", "heredoc_end",
    # what tree-sitter hangs after a here-document's first line
    "pipeline", "list", "command", "redirected_statement", "file_redirect",
    "heredoc_redirect", "herestring_redirect", "subshell", "compound_statement",
})  # fmt: skip
# Nodes that are one whole word for bash where their parent lists words.
_WORDISH = frozenset({
    "word", "concatenation", "string", "raw_string", "ansi_c_string", "translated_string",
    "simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
    "number", "process_substitution", "extglob_pattern",
})  # fmt: skip
# Parents whose word children bash reads as separate words (tokens).
_WORD_LISTS = frozenset({
    "command", "command_name", "file_redirect", "herestring_redirect", "for_statement",
    "select_statement", "declaration_command", "unset_command", "test_command",
    "binary_expression", "unary_expression", "parenthesized_expression",
    "case_statement", "case_item", "array", "variable_assignment",
})  # fmt: skip
_RESERVED = frozenset({
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until",
    "do", "done", "in", "function", "time", "coproc", "{", "}", "!", "[[", "]]",
})  # fmt: skip


class _Found(Exception):
    def __init__(self, construct: str, byte: int) -> None:
        super().__init__(construct)
        self.found = Disagreement(construct, byte)


def check_agreement(root: Node, data: bytes) -> Disagreement | None:
    """The first place where bash would read ``data`` differently from ``root``."""
    checker = _Checker(data)
    try:
        checker.node(root, arithmetic=False, test=False)
        checker.gap(len(data))
        checker.heredoc_order()
    except _Found as found:
        return found.found
    except RecursionError:
        return Disagreement("nesting too deep to compare with bash's reading", 0)
    return None


class _Checker:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0  # end of the last byte accounted for
        # (operator byte, body byte) of every here-document, in tree order
        self.heredocs: list[tuple[int, int]] = []

    # -- helpers ------------------------------------------------------------------------

    def fail(self, construct: str, byte: int) -> None:
        raise _Found(construct, byte)

    def gap(self, end: int) -> None:
        """The bytes from the last leaf to ``end`` must be blanks or line joins."""
        data = self.data
        i = self.pos
        while i < end:
            b = data[i]
            if b in _BLANKS:
                i += 1
            elif b == 0x5C and i + 1 < end and data[i + 1] == 0x0A:
                i += 2
            else:
                self.fail("text the parser skipped over", i)
        if end > self.pos and self.pos > 0 and _ends_escaped(data, self.pos):
            self.fail("a backslash before a blank joins two words for bash", self.pos - 1)
        self.pos = max(self.pos, end)

    def word_start(self, byte: int) -> bool:
        """Whether bash could begin a new word (and so a comment) at ``byte``."""
        if byte == 0:
            return True
        prev = self.data[byte - 1]
        return prev in _META and not _ends_escaped(self.data, byte)

    # -- the walk -----------------------------------------------------------------------

    def node(self, node: Node, *, arithmetic: bool, test: bool) -> None:
        kind = node.type
        if (not arithmetic and kind in _WORDISH and node.parent is not None
                and node.parent.type in _WORD_LISTS):
            self.word_end(node, test=test)
        if node.child_count == 0:
            self.leaf(node, kind, arithmetic=arithmetic, test=test)
            return
        if kind == "heredoc_body":
            self.gap(node.start_byte)
            self.heredoc_substitutions(node)
            self.pos = node.end_byte
            return
        if kind in ("string", "translated_string"):
            self.gap(node.start_byte)
            self.double_quoted(node)
            return
        if kind == "expansion":
            self.gap(node.start_byte)
            self.expansion(node, quoted=False)
            return
        if kind == "command_substitution" and self.data[node.start_byte] == 0x60:
            self.gap(node.start_byte)
            self.backquoted(node)
        if test and kind == "concatenation" and self.data[node.start_byte : node.end_byte] == b"]]":
            self.fail("']]' read as a word inside [[ ]] (bash ends the test there)", node.start_byte)
        if kind in _REDIRECTS:
            self.redirect_targets(node, kind)
        if kind == "heredoc_redirect":
            body = next((c for c in node.children if c.type == "heredoc_body"), None)
            if body is not None:
                self.heredocs.append((node.start_byte, body.start_byte))
        if kind in _ONE_WORD:
            children = node.children
            for before, after in itertools.pairwise(children):
                if before.end_byte != after.start_byte:
                    self.fail("a blank inside what the parser read as one word", before.end_byte)
        if kind in _ARITHMETIC or (kind == "compound_statement" and _starts_arith(node)):
            arithmetic = True
        elif kind == "test_command":
            test = True
        for child in node.children:
            self.node(child, arithmetic=arithmetic, test=test)

    def heredoc_substitutions(self, body: Node) -> None:
        """An expanding here-document body is text, but each command substitution in it
        is a script bash parses when it expands the body: compared like one written on
        the command line (``$(a =~ |& x)`` there hid x as a regex)."""
        stack = list(reversed(body.children))
        while stack:
            child = stack.pop()
            if child.type == "command_substitution":
                inner = _Checker(self.data)
                inner.pos = child.start_byte
                inner.node(child, arithmetic=False, test=False)
                inner.gap(child.end_byte)
                inner.heredoc_order()
            else:
                stack.extend(reversed(child.children))

    def heredoc_order(self) -> None:
        """bash reads the bodies of the here-documents of one line in the order their
        operators appear; tree-sitter can hand a later body to an earlier operator,
        and then an expanding body (``$(x)``) looks like a quoted one."""
        by_operator = sorted(self.heredocs)
        bodies = [body for _, body in by_operator]
        for (operator, body), following in zip(by_operator, bodies[1:], strict=False):
            if following < body:
                self.fail("here-document bodies in another order than their operators",
                          operator)

    def heredoc_start(self, start: int, end: int) -> None:
        """A here-document's delimiter is one whole word for bash: its quotes close
        inside it (``<<'EOF<newline>'`` is a delimiter with a newline in it, and
        the command line goes on after it), and an operator or blank ends it. A line
        continuation in it is removed by bash before the word is read (``<<EOF\\``
        at the end of a line is the unquoted delimiter EOF: an expanding body), so
        one anywhere in it is refused."""
        data = self.data
        continued = data.find(b"\\\n", start, end)
        if continued >= 0:
            self.fail("a here-document delimiter with a line continuation, which bash "
                      "removes", continued)  # fmt: skip
        i = start
        while i < end:
            b = data[i]
            if b == 0x5C:
                i += 2
                continue
            if b in (0x27, 0x22):
                close = _quoted_end(data, i + 1, b, end) if b == 0x22 else (
                    data.find(b"'", i + 1, end) + 1 or -1)
                if close <= 0:
                    self.fail("a here-document delimiter whose quote bash ends elsewhere", i)
                i = close
                continue
            if b in _META or b == 0x60 or b == 0x24:
                self.fail("a here-document delimiter bash reads differently", i)
            i += 1
        if i != end or (end < len(data) and data[end] not in _META):
            self.fail("a here-document delimiter bash reads differently", end)

    def word_end(self, node: Node, *, test: bool) -> None:
        """A whole word ends where bash ends it: at a blank, an operator or the end of
        the input (``a <<<$'x'\\&`` is one here-string word for bash, two words for
        tree-sitter); a word of digits just before ``<`` or ``>`` is a file descriptor
        for bash, and ``{name}`` there names one."""
        data = self.data
        end = node.end_byte
        i = end
        while data.startswith(b"\\\n", i):
            i += 2
        if i >= len(data):
            return
        after = data[i]
        if after in b"<>":
            text = data[node.start_byte : end].lstrip(b" \t\n")
            if text.isdigit() or (
                text[:1] == b"{" and text[-1:] == b"}" and text[1:-1].replace(b"_", b"a").isalnum()
            ):
                self.fail(
                    "a word glued to a redirection (bash reads it as the redirection's "
                    "file descriptor)", node.start_byte)
            return
        if after in _META or (after == 0x60 and _in_backquotes(node, data)):
            return
        if after in b"[]" and test:
            return  # a test's bracket or ']]' glued to a word: named where it is read
        self.fail("one word for bash that the parser read as two (no blank between them)", end)

    def redirect_targets(self, node: Node, kind: str) -> None:
        """bash passes the words after a redirection's target to the command as
        arguments (``git log >/dev/null --output=x`` runs ``git log --output=x``);
        tree-sitter-bash hangs them on the redirection, out of every argv check."""
        targets = [c for c in node.named_children if c.type not in _NOT_TARGET]
        if kind == "file_redirect" and targets:
            op = next((c for c in node.children if not c.is_named), None)
            text = self.data[targets[0].start_byte : targets[0].end_byte].lstrip(b" \t\n")
            closes = op is not None and op.type in ("<&-", ">&-")
            if closes or (op is not None and op.type in ("<&", ">&") and text[:1] == b"-"
                          and len(text) > 1):
                self.fail(
                    "'-' after '<&' or '>&' closes the descriptor for bash, and the rest "
                    "of the word is an argument", targets[0].start_byte)
        first_extra = 0 if kind == "heredoc_redirect" else 1
        if len(targets) > first_extra:
            self.fail(
                "a word after a redirection's target (bash passes it to the command as an "
                "argument; put redirections after the last argument)",
                targets[first_extra].start_byte,
            )

    def leaf(self, node: Node, kind: str, *, arithmetic: bool, test: bool) -> None:
        start, end = node.start_byte, node.end_byte
        data = self.data
        text = data[start:end]
        # tree-sitter folds the blanks before some tokens into the token.
        lead = len(text) - len(text.lstrip(b" \t\n"))
        if lead and node.is_named is False:
            start += lead
            text = text[lead:]
        if start < self.pos:
            if end <= self.pos:
                return  # inside a span already checked as a whole (a quoted string)
            self.fail("overlapping tokens", start)
        self.gap(start)
        if kind == "comment":
            if not self.word_start(start):
                self.fail("'#' inside a word (bash reads a word, not a comment)", start)
            newline = data.find(b"\n", start)
            if newline != -1 and newline < end:
                self.fail("a comment running past the end of its line", newline)
            if end < len(data) and data[end] != 0x0A:
                self.fail("a comment ending before the end of its line", end)
        elif kind == "raw_string":
            close = data.find(b"'", start + 1)
            if close + 1 != end:
                self.fail("a single-quoted string that bash ends elsewhere", start)
        elif kind == "ansi_c_string":
            if _quoted_end(data, start + 2, 0x27) != end:
                self.fail("an ANSI-C $'...' string that bash ends elsewhere", start)
        elif kind == "heredoc_body":
            pass  # a quoted here-document's body: data, checked by the parse module
        elif kind == "regex":
            self.regex(node, start, end, test=test)
        elif node.is_named:
            self.word(kind, start, end, arithmetic=arithmetic, test=test)
        else:
            if kind in ("[", "]") and node.parent is not None and node.parent.type == "test_command":
                self.bracket(kind, start, end)
            self.token(kind, start, end, arithmetic=arithmetic, test=test)
        self.pos = end

    def word(self, kind: str, start: int, end: int, *, arithmetic: bool, test: bool) -> None:
        data = self.data
        if start >= end:
            return  # an empty leaf (whitespace-only input): no text to disagree on
        if kind == "heredoc_start":
            self.heredoc_start(start, end)
            return
        if kind == "heredoc_end":
            return  # the end line: checked by the parse module
        if test and data[start:end] == b"]]":
            self.fail("']]' read as a word inside [[ ]] (bash ends the test there)", start)
        if data[start] == 0x23 and self.word_start(start) and not arithmetic:
            self.fail("a word starting with '#' (bash reads a comment)", start)
        i = start
        while i < end:
            b = data[i]
            if b == 0x5C:  # backslash quotes the next byte
                i += 2
                continue
            if b in (0x27, 0x22, 0x60):
                self.fail("a quote or backquote inside a word that the parser read as text", i)
            if b == 0x24 and i + 1 < len(data) and data[i + 1] in _EXPANDS and not arithmetic:
                self.fail("an expansion inside a word that the parser read as text", i)
            if b in _META:
                if kind == "extglob_pattern" and b in b"|()":
                    i += 1
                    continue
                if arithmetic and b not in _BLANKS and b != 0x3B:
                    i += 1
                    continue
                if test and b in b"()<>":
                    self.fail("an operator inside a word in [[ ]]", i)
                self.fail(f"{chr(b)!r} inside a word (bash ends the word there)", i)
            i += 1
        if end > start and _ends_escaped(data, end) and end < len(data) and data[end] in _BLANKS:
            self.fail("a backslash before a blank joins two words for bash", end - 1)

    def bracket(self, kind: str, start: int, end: int) -> None:
        """``[ … ]``: bash runs the ``[`` builtin only when ``[`` and ``]`` are words of
        their own; ``[b]`` is a glob, which runs a program named ``b`` if the directory
        holds such a file."""
        data = self.data
        after = data[end] if end < len(data) else 0x20
        if not self.word_start(start) or after not in _META:
            self.fail(f"{kind!r} glued to other text (bash reads a glob word, not a test)", start)

    def token(self, kind: str, start: int, end: int, *, arithmetic: bool, test: bool) -> None:
        data = self.data
        text = data[start:end]
        if kind in _OPENERS or arithmetic:
            return
        if kind in _RESERVED or text[:1].isalpha():
            after = data[end] if end < len(data) else 0x20
            if not self.word_start(start):
                self.fail(f"the reserved word {kind!r} inside a word", start)
            if after not in _META:
                self.fail(f"the reserved word {kind!r} glued to more text", end)
            return
        if test and text in (b"|", b"&", b";", b"|&", b";;", b"&>", b">>", b"<<", b"<<<"):
            self.fail(f"{text.decode()!r} inside [[ ]], which bash does not accept there", start)
        if text in (b"<&-", b">&-") and data.startswith(text, start):
            return  # bash reads '<&' then '-': the same redirection
        if text and text[0] in _META:
            read = next((op for op in _OPERATORS if data.startswith(op, start)), b"")
            if read != text:
                shown = read.decode() if read else "no operator"
                self.fail(f"{text.decode()!r} where bash reads {shown!r}", start)

    def regex(self, node: Node, start: int, end: int, *, test: bool) -> None:
        if not test:
            self.fail("'=~' or '==' outside [[ ]] (bash reads plain words)", start)
        data = self.data
        i = start
        while i < end:
            b = data[i]
            if b == 0x5C:
                i += 2
                continue
            if b in _META or b in (0x60,):
                self.fail("a [[ =~ ]] regex with blanks, operators or parentheses", i)
            if b in (0x27, 0x22) or (b == 0x24 and i + 1 < end and data[i + 1] in _EXPANDS):
                self.fail("quotes or expansions inside a [[ =~ ]] regex", i)
            i += 1

    # -- spans checked as a whole --------------------------------------------------------

    def double_quoted(self, node: Node) -> None:
        """``"…"`` or ``$"…"``: bash's end, and every substitution in it parsed."""
        data = self.data
        start = node.start_byte
        i = start + (2 if data[start] == 0x24 else 1)
        subs: dict[int, Node] = {
            c.start_byte: c for c in node.named_children if c.type != "string_content"
        }
        for child in node.named_children:
            if child.type in ("expansion", "command_substitution", "arithmetic_expansion"):
                # tree-sitter folds blanks before some of these into the node
                lead = data[child.start_byte : child.end_byte]
                subs[child.start_byte + len(lead) - len(lead.lstrip(b" \t\n"))] = child
        end = node.end_byte
        while i < end:
            b = data[i]
            if b == 0x5C:
                i += 2
                continue
            if b == 0x22:
                if i + 1 != end:
                    self.fail('a double-quoted string that bash ends elsewhere', i)
                self.pos = end
                return
            if b == 0x60 or (b == 0x24 and i + 1 < end and data[i + 1] in b"({["):
                found = subs.get(i)
                if found is None:
                    self.fail("a substitution inside double quotes that the parser read as text", i)
                    return
                self.inner(found)
                i = found.end_byte
                continue
            if b == 0x24 and i + 1 < end and data[i + 1] in _EXPANDS:
                # $name, $1, $@ …: a parameter, nothing bash would run.
                i += 2
                continue
            i += 1
        self.fail("a double-quoted string that bash does not end here", start)

    def inner(self, child: Node) -> None:
        """Check a substitution found inside a quoted span."""
        self.pos = child.start_byte
        if child.type == "expansion":
            self.expansion(child, quoted=True)
        elif child.type == "command_substitution":
            if self.data[child.start_byte] == 0x60:
                self.backquoted(child)
            for grand in child.children:
                self.node(grand, arithmetic=False, test=False)
        elif child.type in ("arithmetic_expansion", "simple_expansion"):
            for grand in child.children:
                self.node(grand, arithmetic=True, test=False)
        self.pos = child.end_byte

    def expansion(self, node: Node, *, quoted: bool) -> None:
        """``${…}``: bash's end (nested braces, quotes, substitutions), and no
        substitution in it that the tree left as text (``${x:-<(cmd)}``)."""
        data = self.data
        start, end = node.start_byte, node.end_byte
        start += len(data[start:end]) - len(data[start:end].lstrip(b" \t\n"))
        subs: dict[int, Node] = {}
        for c in _descendants_named(node):
            if c.type in ("command_substitution", "expansion", "arithmetic_expansion",
                          "process_substitution"):
                text = data[c.start_byte : c.end_byte]
                subs.setdefault(c.start_byte + len(text) - len(text.lstrip(b" \t\n")), c)
        i = start + 2
        depth = 0
        while i < end:
            b = data[i]
            if b == 0x5C:
                i += 2
                continue
            if b == 0x27 and not quoted:
                close = data.find(b"'", i + 1)
                if close < 0 or close >= end:
                    self.fail("a quote inside ${...} that bash ends elsewhere", i)
                i = close + 1
                continue
            if b == 0x22:
                j = _quoted_end(data, i + 1, 0x22, end)
                if j < 0:
                    self.fail("a double quote inside ${...} that bash ends elsewhere", i)
                if any(i < s < j for s in subs):
                    self.fail("a substitution inside quotes inside ${...}", i)
                if _has_substitution(data, i + 1, j - 1):
                    self.fail("a substitution inside quotes inside ${...}", i)
                i = j
                continue
            if (b in (0x3C, 0x3E) and i + 1 < end and data[i + 1] == 0x28):
                self.fail("a process substitution inside ${...}", i)
            if b == 0x60 or (b == 0x24 and i + 1 < end and data[i + 1] in b"({["):
                child = subs.get(i)
                if child is None or child.type == "process_substitution":
                    self.fail("a substitution inside ${...} that the parser read as text", i)
                    return
                saved = self.pos
                self.inner(child)
                self.pos = saved
                i = child.end_byte
                continue
            if b == 0x7B:
                depth += 1
            elif b == 0x7D:
                if depth == 0:
                    if i + 1 != end:
                        self.fail("a ${...} expansion that bash ends elsewhere", i)
                    self.pos = end
                    return
                depth -= 1
            i += 1
        self.fail("a ${...} expansion that bash does not end here", start)

    def backquoted(self, node: Node) -> None:
        """`` `…` ``: bash ends it at the next backquote not escaped by a backslash."""
        data = self.data
        start = node.start_byte
        i = start + 1
        while i < len(data):
            b = data[i]
            if b == 0x5C:
                if i + 1 < len(data) and data[i + 1] == 0x0A:
                    # bash joins the lines even inside quotes within `…`
                    self.fail("a line continuation inside a backquoted command", i)
                i += 2
                continue
            if b == 0x60:
                break
            i += 1
        if i + 1 != node.end_byte:
            self.fail("a backquoted command that bash ends elsewhere", start)


def _in_backquotes(node: Node, data: bytes) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type == "command_substitution" and data[parent.start_byte] == 0x60:
            return True
        parent = parent.parent
    return False


def _starts_arith(node: Node) -> bool:
    first = node.children[0] if node.child_count else None
    return first is not None and first.type == "(("


def _descendants_named(node: Node) -> list[Node]:
    out: list[Node] = []
    stack = list(reversed(node.named_children))
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(n.named_children))
    return out


def _ends_escaped(data: bytes, end: int) -> bool:
    """Whether the byte before ``end`` is a backslash that quotes what follows."""
    n = 0
    i = end - 1
    while i >= 0 and data[i] == 0x5C:
        n += 1
        i -= 1
    return n % 2 == 1


def _quoted_end(data: bytes, i: int, quote: int, limit: int | None = None) -> int:
    """The end (exclusive) of a quoted span whose content starts at ``i``, where a
    backslash escapes the next byte and the first other ``quote`` byte ends it (the
    rule of ``$'…'``, and of ``"…"`` when it holds no substitution); -1 when it does
    not end before ``limit``."""
    n = len(data) if limit is None else limit
    while i < n:
        b = data[i]
        if b == 0x5C:
            i += 2
            continue
        if b == quote:
            return i + 1
        i += 1
    return -1


def _has_substitution(data: bytes, start: int, end: int) -> bool:
    i = start
    while i < end:
        b = data[i]
        if b == 0x5C:
            i += 2
            continue
        if b == 0x60 or (b == 0x24 and i + 1 < end and data[i + 1] in b"({["):
            return True
        i += 1
    return False
