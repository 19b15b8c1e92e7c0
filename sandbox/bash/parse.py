"""Parse bash source with tree-sitter-bash into the facts a policy decides on.

The result is deliberately small: every simple command (argv words after quote
removal, or a marker that bash would expand the word), every operator that bash
treats as syntax, every variable assignment, function name and redirection
target, and *findings*: places where the source cannot be decided on safely
(a parse error, a construct tree-sitter-bash reads differently from bash, a
control character outside quotes, arithmetic that can run commands).

tree-sitter-bash is not bash. Where the two are known to disagree this module
reports a finding instead of trusting the tree:

- a carriage return, vertical tab or form feed is whitespace to tree-sitter and
  a word character to bash (``ls\\r\\nid`` runs ``id``);
- backticks inside an unquoted here-document body, and backslash escapes inside
  backticks, are re-parsed by bash but left as text by tree-sitter;
- a here-document whose end tree-sitter places elsewhere than bash does;
- any leaf that still holds an unescaped ``$(``, ``${``, ``$[`` or backtick,
  which means tree-sitter failed to see an expansion bash will perform.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

__all__ = [
    "Assignment",
    "Finding",
    "Operator",
    "ParsedScript",
    "Redirect",
    "SimpleCommand",
    "Word",
    "escape_controls",
    "parse",
    "parse_prefix",
    "scan_word",
]

_LANGUAGE = Language(tree_sitter_bash.language())
# tree-sitter's Parser keeps per-parse state and must not be shared between
# threads; one per thread avoids both a lock and re-creating it per call.
_PARSERS = threading.local()


def _parser() -> Parser:
    parser: Parser | None = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = Parser(_LANGUAGE)
        _PARSERS.parser = parser
    return parser


# ---------------------------------------------------------------------------
# The model


@dataclass(frozen=True, slots=True)
class Word:
    """One bash word as written (``text``) and as the program receives it.

    ``value`` is the word after quote removal when bash performs no expansion on
    it, else None. ``prefix`` is the literal text bash produces before the first
    expansion (equal to ``value`` for a literal word): a word whose prefix is
    ``src/`` cannot become an option whatever the expansion yields. ``plain`` is
    True when the word has no quoting, escaping, expansion, glob or brace at all.
    """

    text: str
    value: str | None
    prefix: str
    plain: bool

    @property
    def shown(self) -> str:
        """The value when known, else the source text."""
        return self.text if self.value is None else self.value


@dataclass(frozen=True, slots=True)
class Assignment:
    """``name=value`` as a leading assignment, a statement or a declaration argument."""

    name: str
    text: str


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """A simple command: ``words[0]`` is the command word (absent for
    assignment-only and redirection-only commands).

    ``kind`` is ``"command"``, ``"declaration"`` (declare/export/local/readonly/
    typeset), ``"unset"``, ``"test"`` (``[ ... ]``) or ``"assignment"``.
    """

    kind: str
    words: tuple[Word, ...]
    assignments: tuple[Assignment, ...]
    text: str
    offset: int

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(w.shown for w in self.words)


@dataclass(frozen=True, slots=True)
class Operator:
    """An operator bash treats as syntax. ``texts`` are the spellings it is
    known by: a newline separator is also ``;`` and a backtick substitution
    is also ``$(``, so blocking either spelling blocks both."""

    kind: str
    text: str
    texts: tuple[str, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Redirect:
    operator: str
    target: Word | None
    offset: int


@dataclass(frozen=True, slots=True)
class Finding:
    """A place the source cannot be decided on safely. ``rule`` is the POLICY.md
    rule it falls under (R2 hidden command, R6 parse, R8 control character)."""

    rule: str
    message: str
    token: str | None
    offset: int


@dataclass(frozen=True, slots=True)
class ParsedScript:
    source: str
    commands: tuple[SimpleCommand, ...]
    operators: tuple[Operator, ...]
    assignments: tuple[Assignment, ...]
    functions: tuple[str, ...]
    redirects: tuple[Redirect, ...]
    findings: tuple[Finding, ...]
    depth: int


# ---------------------------------------------------------------------------
# Control characters (R8)

_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _is_control(ch: str) -> bool:
    if ch < " ":
        return ch not in "\t\n"
    if ch < "\x7f":
        return False
    return ch == "\x7f" or unicodedata.category(ch) in _CONTROL_CATEGORIES


def _control_positions(source: str) -> list[int]:
    if source.isascii():
        return [m.start() for m in _ASCII_CONTROL.finditer(source)]
    return [i for i, ch in enumerate(source) if _is_control(ch)]


def escape_controls(text: str) -> str:
    r"""``text`` with every control, format and line-separator character escaped
    (``\r``, ``\x1b``, ``\u202e``), so a terminal shows what will run."""
    if text.isascii() and not _ASCII_CONTROL.search(text):
        return text
    out = []
    for ch in text:
        if _is_control(ch):
            code = ord(ch)
            named = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f", "\x00": "\\0"}.get(ch)
            out.append(named or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
        else:
            out.append(ch)
    return "".join(out)


# ---------------------------------------------------------------------------
# Words: quote removal, and whether bash would expand anything

# Characters that make a command word anything but a plain literal.
_NOT_PLAIN = re.compile(r"""[\\'"$`*?\[\]{}~()<>|&;!# \t\n]""")
_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
# What may follow "$" for bash to expand it: a name, a special parameter, "{", "(", "[".
_EXPANDS_AFTER_DOLLAR = frozenset(_NAME_START | set("0123456789@*#?$!-{(["))
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_ANSI_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
    "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


class _Dynamic(Exception):
    """Raised inside the word scanner at the first thing bash would expand."""


def _ansi_c(text: str, i: int, out: list[str]) -> int:
    """Decode ``$'...'`` content starting after the opening quote; return the
    index after the closing quote. Bash cuts the string at a NUL escape."""
    n = len(text)
    cut = False
    while i < n:
        ch = text[i]
        if ch == "'":
            return i + 1
        if ch != "\\":
            if not cut:
                out.append(ch)
            i += 1
            continue
        if i + 1 >= n:
            raise _Dynamic
        esc = text[i + 1]
        i += 2
        decoded: str
        if esc in _ANSI_SIMPLE:
            decoded = _ANSI_SIMPLE[esc]
        elif esc in "01234567":
            j = i
            while j < n and j < i + 2 and text[j] in "01234567":
                j += 1
            decoded = chr(int(esc + text[i:j], 8) & 0xFF)
            i = j
        elif esc in "xuU":
            limit = {"x": 2, "u": 4, "U": 8}[esc]
            j = i
            while j < n and j < i + limit and text[j] in "0123456789abcdefABCDEF":
                j += 1
            if j == i:
                decoded = "\\" + esc
            else:
                code = int(text[i:j], 16)
                if code > 0x10FFFF:
                    raise _Dynamic
                decoded = chr(code)
            i = j
        elif esc == "c":
            if i >= n:
                raise _Dynamic
            decoded = chr(ord(text[i]) & 0x1F)
            i += 1
        else:
            decoded = "\\" + esc
        if decoded == "\x00":
            cut = True
        elif not cut:
            out.append(decoded)
    raise _Dynamic  # unterminated


def _double_quoted(text: str, i: int, out: list[str]) -> int:
    """Quote-remove ``"..."`` content starting after the opening quote."""
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            return i + 1
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "\n":
                i += 2
                continue
            if nxt in '$`"\\':
                out.append(nxt)
                i += 2
                continue
            out.append(ch)
            i += 1
            continue
        if ch == "`" or (ch == "$" and i + 1 < n and text[i + 1] in _EXPANDS_AFTER_DOLLAR):
            raise _Dynamic
        out.append(ch)
        i += 1
    raise _Dynamic  # unterminated


def _brace_expands(text: str, i: int) -> bool:
    """Whether the unquoted ``{`` at ``i`` starts a brace expansion (``{a,b}``,
    ``{1..3}``); ``{}`` and ``{x}`` stay literal."""
    depth = 0
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "'\"":
            return True  # quoted parts inside braces: too subtle, treat as expanding
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                inner = text[i + 1 : j]
                return "," in inner or ".." in inner
        j += 1
    return False


def scan_word(text: str) -> Word:
    """Interpret one bash word's source text the way bash does before running it:
    quote removal, ANSI-C decoding, and detection of anything it would expand
    (parameters, substitutions, arithmetic, globs, braces, a leading tilde)."""
    if text and not _NOT_PLAIN.search(text):
        return Word(text, text, text, True)
    out: list[str] = []
    n = len(text)
    i = 0
    assignment = _ASSIGNMENT_WORD.match(text)
    try:
        while i < n:
            ch = text[i]
            if ch == "\\":
                if i + 1 >= n:
                    out.append("\\")
                    i += 1
                elif text[i + 1] == "\n":
                    i += 2
                else:
                    out.append(text[i + 1])
                    i += 2
            elif ch == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise _Dynamic
                out.append(text[i + 1 : end])
                i = end + 1
            elif ch == '"':
                i = _double_quoted(text, i + 1, out)
            elif ch == "$":
                nxt = text[i + 1] if i + 1 < n else ""
                if nxt == "'":
                    i = _ansi_c(text, i + 2, out)
                elif nxt == '"':
                    i = _double_quoted(text, i + 2, out)
                elif nxt and nxt in _EXPANDS_AFTER_DOLLAR:
                    raise _Dynamic
                else:
                    out.append("$")
                    i += 1
            elif ch in "`*?[(":
                raise _Dynamic
            elif ch == "{" and _brace_expands(text, i):
                raise _Dynamic
            elif ch == "~" and (i == 0 or (assignment is not None and text[i - 1] in "=:")):
                raise _Dynamic
            elif ch in "<>" and i + 1 < n and text[i + 1] == "(":
                raise _Dynamic
            else:
                out.append(ch)
                i += 1
    except _Dynamic:
        return Word(text, None, "".join(out), False)
    value = "".join(out)
    return Word(text, value, value, False)


# ---------------------------------------------------------------------------
# Node classes

_STATEMENTS = frozenset({
    "command", "redirected_statement", "pipeline", "list", "subshell",
    "compound_statement", "if_statement", "for_statement", "c_style_for_statement",
    "while_statement", "case_statement", "function_definition", "negated_command",
    "test_command", "declaration_command", "unset_command", "variable_assignment",
    "variable_assignments",
})  # fmt: skip
# Nodes whose children are statements separated by ";", "&" or newlines.
_STATEMENT_CONTAINERS = frozenset({
    "program", "compound_statement", "subshell", "do_group", "if_statement",
    "elif_clause", "else_clause", "case_item", "while_statement",
    "command_substitution", "process_substitution",
})  # fmt: skip
_SEPARATOR_TOKENS = frozenset({";", "&", ";;", ";&", ";;&"})
# Operator tokens inside these are arithmetic or [[ ]] operators, not shell syntax.
_EXPRESSIONS = frozenset({
    "binary_expression", "unary_expression", "ternary_expression",
    "postfix_expression", "parenthesized_expression",
})  # fmt: skip
_REDIRECT_TOKENS = frozenset({
    ">", ">>", "<", "&>", "&>>", "<&", ">&", ">|", "<&-", ">&-", "<>",
})  # fmt: skip
# Leaves that hold text bash may still expand; tree-sitter leaving "$(" in one
# means it did not see a substitution that bash will run.
_SCANNED_LEAVES = frozenset(
    {"word", "string_content", "heredoc_content", "regex", "extglob_pattern"}
)
_HIDDEN_EXPANSION = re.compile(r"(\\*)(`|\$[({\[])")
# Leaves whose text is data to bash: control characters in them are not syntax.
_DATA_LEAVES = frozenset({"string_content", "raw_string", "ansi_c_string", "heredoc_content"})
_ARITH_TEST_OPERATORS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KNOWN = frozenset({
    "program", "redirected_statement", "for_statement", "c_style_for_statement",
    "variable_assignment", "unary_expression", "binary_expression",
    "postfix_expression", "parenthesized_expression", "ternary_expression",
    "while_statement", "do_group", "if_statement", "elif_clause", "else_clause",
    "case_statement", "case_item", "function_definition", "compound_statement",
    "subshell", "pipeline", "list", "negated_command", "test_command",
    "declaration_command", "unset_command", "command", "command_name",
    "variable_assignments", "subscript", "file_redirect", "heredoc_redirect",
    "heredoc_body", "herestring_redirect", "arithmetic_expansion",
    "brace_expression", "concatenation", "string", "translated_string", "array",
    "number", "simple_expansion", "expansion", "command_substitution",
    "process_substitution", "word", "string_content", "raw_string",
    "ansi_c_string", "regex", "comment", "variable_name", "special_variable_name",
    "heredoc_start", "heredoc_content", "heredoc_end", "file_descriptor",
    "test_operator", "extglob_pattern",
})  # fmt: skip

# Context bits carried down the walk.
_ARITH = 1  # inside an arithmetic context: only number literals are safe
_TEST = 2  # inside [[ ]]
# Inside double quotes or an expanding here-document body. There a single quote
# is an ordinary character, even within ${x:-'...'}, so what tree-sitter calls a
# raw_string is expanded by bash: "${x:-'$(id)'}" runs id.
_DQUOTE = 4


def _operator_for(token: str, parent: str, first: bool) -> tuple[str, tuple[str, ...]] | None:
    """The kind and spellings of anonymous token ``token`` under ``parent``,
    or None when bash does not treat it as shell syntax there."""
    if parent in _EXPRESSIONS:
        return None
    if token in _SEPARATOR_TOKENS:
        if token == "&":
            return "background", ("&",)
        if token == ";":
            return "separator", (";", "\n")
        return "case_terminator", (token,)
    if token in ("&&", "||"):
        return ("and" if token == "&&" else "or"), (token,)
    if token in ("|", "|&"):
        return None if parent == "case_item" else ("pipe", (token,))
    if token in _REDIRECT_TOKENS:
        return "redirect", (token,)
    if token in ("<<", "<<-"):
        return "heredoc", (token,)
    if token == "<<<":
        return "herestring", (token,)
    if token == "$(":
        return "command_substitution", ("$(", "`")
    if token in ("`", "``", "$`"):
        if parent == "command_substitution" and first:
            return "command_substitution", ("`", "$(")
        return None
    if token in ("<(", ">("):
        return "process_substitution", (token,)
    if token in ("$((", "$["):
        return "arithmetic", (token,)
    if token == "((":
        return "arithmetic", ("((",)
    if token == "${":
        return "expansion", ("${",)
    if token == "$":
        return "expansion", ("$",)
    if token == "(" and parent == "subshell":
        return "subshell", ("(",)
    if token == "{" and parent == "compound_statement":
        return "group", ("{",)
    if token == "[[":
        return "test", ("[[",)
    if token == "!" and parent == "negated_command":
        return "negation", ("!",)
    return None


def _heredoc_delimiter(text: str) -> tuple[str, bool]:
    """Bash's delimiter for ``<<word``: quote removal only, and whether any part
    was quoted (which makes the body literal)."""
    quoted = any(c in text for c in "'\"\\")
    if not quoted:
        return text, False
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif ch == "'":
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            out.append(text[i + 1 : end])
            i = end + 1
        elif ch == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                if text[j] == "\\" and j + 1 < len(text) and text[j + 1] in '$`"\\':
                    j += 1
                out.append(text[j])
                j += 1
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out), True


# ---------------------------------------------------------------------------
# The walk


class _Walk:
    """One iterative pass over a tree; collects the ParsedScript fields."""

    def __init__(self, source: str, data: bytes, max_depth: int) -> None:
        self.source = source
        self.data = data
        self.ascii = len(data) == len(source)
        self.max_depth = max_depth
        self.commands: list[SimpleCommand] = []
        self.operators: list[Operator] = []
        self.assignments: list[Assignment] = []
        self.functions: list[str] = []
        self.redirects: list[Redirect] = []
        self.findings: list[Finding] = []
        self.data_ranges: list[tuple[int, int]] = []
        self.depth = 0

    def text(self, node: Node) -> str:
        if self.ascii:
            return self.source[node.start_byte : node.end_byte]
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def span(self, start: int, end: int) -> str:
        if self.ascii:
            return self.source[start:end]
        return self.data[start:end].decode("utf-8", "replace")

    def offset(self, byte: int) -> int:
        if self.ascii:
            return byte
        return len(self.data[:byte].decode("utf-8", "replace"))

    def find(self, rule: str, message: str, node: Node, token: str | None = None) -> None:
        self.findings.append(Finding(rule, message, token, self.offset(node.start_byte)))

    def words(self, nodes: list[Node]) -> tuple[Word, ...]:
        """Words of ``nodes``; adjacent nodes with no blank between them are one
        bash word (tree-sitter splits ``$"x"`` and ``a<(b)``)."""
        out: list[Word] = []
        start = end = -1
        for node in nodes:
            if node.start_byte == end:
                end = node.end_byte
                continue
            if start >= 0:
                out.append(scan_word(self.span(start, end)))
            start, end = node.start_byte, node.end_byte
        if start >= 0:
            out.append(scan_word(self.span(start, end)))
        return tuple(out)

    # -- statements ------------------------------------------------------

    def command(self, node: Node) -> None:
        assignments: list[Assignment] = []
        parts: list[Node] = []
        seen_name = False
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment" and not seen_name:
                assignments.append(self.assignment(child))
            elif kind == "command_name":
                seen_name = True
                parts.append(child)
            elif kind in ("file_redirect", "herestring_redirect", "heredoc_redirect", "comment"):
                continue
            elif seen_name:
                parts.append(child)
        self.commands.append(
            SimpleCommand(
                "command",
                self.words(parts),
                tuple(assignments),
                self.text(node),
                self.offset(node.start_byte),
            )
        )

    def builtin(self, node: Node, kind: str) -> None:
        children = node.children
        head = children[0].type if children else ""
        args = [c for c in children[1:] if c.type not in ("file_redirect", "herestring_redirect")]
        for child in args:
            if child.type == "variable_assignment":
                self.assignment(child)
        words = (Word(head, head, head, True), *self.words(args))
        self.commands.append(
            SimpleCommand(kind, words, (), self.text(node), self.offset(node.start_byte))
        )

    def test_builtin(self, node: Node) -> None:
        inner = node.children[1:-1]
        words = (Word("[", "[", "[", True), *self.words(list(inner)), Word("]", "]", "]", True))
        self.commands.append(
            SimpleCommand("test", words, (), self.text(node), self.offset(node.start_byte))
        )

    def assignment(self, node: Node) -> Assignment:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        if name_node is not None and name_node.type == "subscript":
            base = name_node.child_by_field_name("name")
            name = self.text(base) if base is not None else name
        result = Assignment(name, self.text(node))
        self.assignments.append(result)
        return result

    def assignment_only(self, node: Node, parts: list[Node]) -> None:
        assignments = tuple(self.assignment(p) for p in parts if p.type == "variable_assignment")
        self.commands.append(
            SimpleCommand(
                "assignment", (), assignments, self.text(node), self.offset(node.start_byte)
            )
        )

    # -- here-documents ----------------------------------------------------

    def heredoc(self, node: Node) -> bool:
        """Check a here-document; return whether its body expands."""
        start = end = body = None
        dash = False
        for child in node.children:
            kind = child.type
            if kind == "heredoc_start":
                start = child
            elif kind == "heredoc_end":
                end = child
            elif kind == "heredoc_body":
                body = child
            elif kind == "<<-":
                dash = True
        if start is None or end is None:
            self.find("R6", "here-document without a recognised end line", node, "<<")
            return False
        delimiter, quoted = _heredoc_delimiter(self.text(start))
        if self.text(end) != delimiter:
            self.find(
                "R6",
                f"here-document ends at {self.text(end)!r} but bash ends it at {delimiter!r}",
                end,
                self.text(end),
            )
        if body is not None:
            lines = self.text(body).split("\n")
            if any((line.lstrip("\t") if dash else line) == delimiter for line in lines):
                self.find(
                    "R6",
                    f"here-document body holds the delimiter line {delimiter!r}: "
                    "bash ends the document there",
                    body,
                    delimiter,
                )
            if quoted or body.child_count == 0:
                self.data_ranges.append((body.start_byte, body.end_byte))
            if not quoted and body.child_count == 0:
                self.scan_leaf(body, self.text(body))
        return not quoted

    def scan_leaf(self, node: Node, text: str) -> None:
        for match in _HIDDEN_EXPANSION.finditer(text):
            if len(match.group(1)) % 2 == 0:
                token = match.group(2)
                what = "a backtick substitution" if token == "`" else f"an expansion '{token}'"
                self.find(
                    "R6",
                    f"{what} that tree-sitter-bash does not parse here but bash runs "
                    "(write $(...) outside here-documents, or quote the here-document "
                    "delimiter: <<'EOF')",
                    node,
                    token,
                )
                return

    # -- the walk ----------------------------------------------------------

    def run(self, root: Node) -> None:
        stack: list[tuple[Node, str, int, int]] = [(root, "", 1, 0)]
        push = stack.append
        while stack:
            node, parent, depth, ctx = stack.pop()
            if depth > self.depth:
                self.depth = depth
                if depth > self.max_depth:
                    self.find(
                        "R6",
                        f"nesting deeper than {self.max_depth} levels",
                        node,
                    )
                    return
            kind = node.type
            if node.is_error:
                snippet = self.text(node)[:40]
                self.find("R6", f"bash syntax error near {snippet!r}", node, snippet)
                continue
            if node.is_missing:
                self.find("R6", f"bash syntax error: missing {kind!r}", node, kind)
                continue
            if kind not in _KNOWN:
                self.find("R6", f"unsupported construct {kind!r}", node, kind)
                continue
            children = node.children
            if not children:
                self.leaf(node, kind, parent, ctx)
                continue
            child_ctx = ctx
            skip: Node | None = None
            if ctx & _ARITH and kind not in _EXPRESSIONS:
                self.arith_operand(node)
            if kind == "command":
                self.command(node)
            elif kind == "declaration_command":
                self.builtin(node, "declaration")
            elif kind == "unset_command":
                self.builtin(node, "unset")
            elif kind == "variable_assignment":
                # In `for ((i=0; ...))` it is arithmetic, checked as such.
                if not ctx & _ARITH and parent not in (
                    "command",
                    "declaration_command",
                    "variable_assignments",
                    "c_style_for_statement",
                ):
                    self.assignment_only(node, [node])
            elif kind == "variable_assignments":
                self.assignment_only(node, list(children))
            elif kind == "function_definition":
                name = node.child_by_field_name("name")
                self.functions.append(self.text(name) if name is not None else "")
            elif kind == "test_command":
                if children[0].type == "[":
                    self.test_builtin(node)
                else:
                    child_ctx |= _TEST
            elif kind == "compound_statement" and children[0].type == "((":
                child_ctx |= _ARITH
            elif kind == "arithmetic_expansion":
                child_ctx |= _ARITH
            elif kind in ("string", "translated_string", "heredoc_body"):
                child_ctx |= _DQUOTE
            elif kind == "command_substitution" or kind == "process_substitution":
                # A substitution starts a new quoting context.
                child_ctx &= ~_DQUOTE
            if kind == "command_substitution":
                if children[0].type in ("`", "$`"):
                    inner = self.text(node)[1:-1]
                    if "\\" in inner and re.search(r"\\[`$\\]", inner):
                        self.find(
                            "R6",
                            "backslash escapes inside backticks are re-parsed by bash "
                            "(nested substitution); use $(...) instead",
                            node,
                            "`",
                        )
            elif kind == "heredoc_redirect":
                if not self.heredoc(node):
                    skip = next((c for c in children if c.type == "heredoc_body"), None)
            elif kind == "file_redirect":
                self.file_redirect(node, children)
            elif kind == "herestring_redirect":
                self.redirects.append(Redirect("<<<", None, self.offset(node.start_byte)))
            elif kind == "expansion":
                self.expansion(node, children)
            elif kind in _EXPRESSIONS and ctx & _TEST:
                self.test_expression(node, children)
            for_arith = kind == "c_style_for_statement"
            container = kind in _STATEMENT_CONTAINERS
            prev_end = -1
            subscript_index = kind == "subscript"
            after_colon = False
            # Children are pushed in reverse so they pop in source order.
            pending: list[tuple[Node, str, int, int]] = []
            for child in children:
                if skip is not None and child == skip:
                    continue
                ctype = child.type
                if container and ctype != "comment":
                    if (
                        prev_end >= 0
                        and ctype not in _SEPARATOR_TOKENS
                        and b"\n" in self.data[prev_end : child.start_byte]
                    ):
                        self.operators.append(
                            Operator("separator", "\n", (";", "\n"), self.offset(prev_end))
                        )
                    prev_end = child.end_byte if ctype in _STATEMENTS else -1
                if not child.is_named:
                    if child.is_missing:
                        self.find("R6", f"bash syntax error: missing {ctype!r}", child, ctype)
                        continue
                    if ctype == ":" and kind == "expansion":
                        after_colon = True
                    op = _operator_for(ctype, kind, child == children[0])
                    if op is not None:
                        text = ctype
                        texts = op[1]
                        prev = child.prev_sibling
                        if (
                            op[0] == "redirect"
                            and prev is not None
                            and prev.type == "file_descriptor"
                        ):
                            text = self.text(prev) + ctype
                            texts = (text, *texts)
                        self.operators.append(
                            Operator(op[0], text, texts, self.offset(child.start_byte))
                        )
                    continue
                cctx = child_ctx
                if for_arith and ctype != "do_group":
                    cctx |= _ARITH
                elif subscript_index and child == node.child_by_field_name("index"):
                    if self.text(child) not in ("@", "*"):
                        cctx |= _ARITH
                elif after_colon:
                    cctx |= _ARITH
                pending.append((child, kind, depth + 1, cctx))
            for item in reversed(pending):
                push(item)

    def leaf(self, node: Node, kind: str, parent: str, ctx: int) -> None:
        if ctx & _ARITH:
            self.arith_operand(node)
        if kind in _SCANNED_LEAVES or (ctx & _DQUOTE and kind in ("raw_string", "ansi_c_string")):
            text = self.text(node)
            if "`" in text or "$" in text:
                self.scan_leaf(node, text)
        if kind in _DATA_LEAVES:
            self.data_ranges.append((node.start_byte, node.end_byte))

    def arith_operand(self, node: Node) -> None:
        kind = node.type
        if kind == "number":
            return
        if kind == "word":
            text = self.text(node)
            if text[:1].isdigit():
                return
        if kind in _EXPRESSIONS:
            return
        self.find(
            "R2",
            f"arithmetic on {self.text(node)[:40]!r}: bash evaluates a variable's value "
            "as arithmetic, and an array subscript in it (a[$(cmd)]) runs a command; "
            "only number literals are allowed in $((...)), ((...)), [[ -eq ]] and "
            "${x:offset}",
            node,
            self.text(node)[:40],
        )

    def expansion(self, node: Node, children: list[Node]) -> None:
        if len(children) > 1 and children[1].type == "!":
            self.find(
                "R2",
                "indirect expansion ${!name} evaluates the named variable's array "
                "subscript, which can run a command",
                node,
                "${!",
            )
        types = [c.type for c in children]
        for i in range(len(types) - 1):
            if types[i] == "@" and types[i + 1] == "P":
                self.find(
                    "R2",
                    "prompt expansion ${name@P} runs command substitutions held in the value",
                    node,
                    "@P",
                )

    def test_expression(self, node: Node, children: list[Node]) -> None:
        op = node.child_by_field_name("operator")
        if op is None:
            return
        op_text = self.text(op)
        if op_text in _ARITH_TEST_OPERATORS:
            for child in children:
                if child.is_named and child != op and child.type not in _EXPRESSIONS:
                    self.arith_operand(child)
        elif op_text in ("-v", "-R"):
            for child in children:
                if child.is_named and child != op and not _NAME.match(self.text(child)):
                    self.find(
                        "R2",
                        f"[[ {op_text} ]] on {self.text(child)!r}: bash evaluates an array "
                        "subscript there, which can run a command",
                        child,
                        op_text,
                    )

    def file_redirect(self, node: Node, children: list[Node]) -> None:
        operator = ""
        target: list[Node] = []
        for child in children:
            if not child.is_named:
                operator = operator or child.type
            elif child.type != "file_descriptor":
                target.append(child)
        words = self.words(target)
        self.redirects.append(
            Redirect(operator, words[0] if words else None, self.offset(node.start_byte))
        )


# ---------------------------------------------------------------------------
# Entry points


def parse(source: str, *, max_bytes: int = 65536, max_depth: int = 100) -> ParsedScript:
    """Parse ``source`` as bash. Never raises for any string; whatever cannot be
    decided on safely is reported in ``findings``."""
    findings: list[Finding] = []

    def early(rule: str, message: str, token: str | None = None) -> ParsedScript:
        findings.append(Finding(rule, message, token, 0))
        return ParsedScript(source, (), (), (), (), (), tuple(findings), 0)

    if "\x00" in source:
        return early("R6", "the command holds a NUL byte, which bash cannot receive", "\\0")
    if len(source) > max_bytes:
        return early("R6", f"the command is longer than {max_bytes} bytes")
    try:
        data = source.encode("utf-8")
    except UnicodeEncodeError:
        return early("R6", "the command is not valid Unicode (lone surrogate)")
    if len(data) > max_bytes:
        return early("R6", f"the command is longer than {max_bytes} bytes")
    tree = _parser().parse(data)
    walk = _Walk(source, data, max_depth)
    walk.run(tree.root_node)
    controls = _control_positions(source)
    if controls:
        ranges = walk.data_ranges
        for pos in controls:
            byte = pos if walk.ascii else len(source[:pos].encode("utf-8"))
            if not any(start <= byte < end for start, end in ranges):
                ch = source[pos]
                walk.findings.insert(
                    0,
                    Finding(
                        "R8",
                        f"control character {escape_controls(ch)} outside quotes: "
                        "bash and this parser (and a terminal showing it) read it "
                        "differently",
                        escape_controls(ch),
                        pos,
                    ),
                )
                break
    return ParsedScript(
        source,
        tuple(walk.commands),
        tuple(walk.operators),
        tuple(walk.assignments),
        tuple(walk.functions),
        tuple(walk.redirects),
        tuple(walk.findings),
        walk.depth,
    )


def parse_prefix(text: str) -> tuple[str, ...]:
    """Split an allowed-prefix entry such as ``"git status"`` into literal words.

    Raises ValueError naming the problem when the entry is not a single simple
    command made of literal words.
    """
    script = parse(text)
    if script.findings:
        raise ValueError(script.findings[0].message)
    if len(script.commands) != 1 or script.operators or script.redirects:
        raise ValueError("it must be one simple command without operators")
    command = script.commands[0]
    words = [*(scan_word(a.text) for a in command.assignments), *command.words]
    values = [w.value for w in words]
    if not values or any(v is None or v == "" for v in values):
        raise ValueError("every word must be a literal (no expansions, globs or braces)")
    return tuple(v for v in values if v is not None)
