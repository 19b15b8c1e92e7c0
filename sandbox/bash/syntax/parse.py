"""Parse bash source with tree-sitter-bash into the facts a policy decides on.

The result is deliberately small: every simple command (argv words after quote
removal, or a marker that bash would expand the word), every operator that bash
treats as syntax, every variable assignment, function name and redirection
target, and *findings*: places where the source cannot be decided on safely
(a parse error, a construct tree-sitter-bash reads differently from bash, a
control character outside quotes, arithmetic that can run commands).

tree-sitter-bash (0.25) is not bash. Where the two are known to disagree this
module reports a finding instead of trusting the tree:

- a carriage return, vertical tab or form feed is whitespace to tree-sitter and
  a word character to bash (``ls\\r\\nid`` runs ``id``);
- after a pipeline of three commands tree-sitter may read the next line as more
  arguments (``a | b | c`` newline ``d || e`` hides ``d``);
- a backslash-newline glued between two words is a blank to tree-sitter and
  nothing to bash (``ls\\<newline>blk`` runs lsblk);
- in double quotes a single quote is an ordinary character even inside
  ``${x:-'...'}``, so ``"${x:-'$(id)'}"`` runs id;
- backticks inside an unquoted here-document body, and backslash escapes inside
  backticks, are re-parsed by bash but left as text by tree-sitter;
- a here-document that bash ends elsewhere (``E\\<newline>OF`` is ``EOF``);
- in general, every ``$(``, ``${``, ``$[`` and backtick of the source must be one
  tree-sitter parsed, escaped, or inside single quotes or a comment.

tree-sitter's error recovery is quadratic or worse on some invalid input, so a
long command is parsed and walked in a long-lived worker process that is killed
at a deadline (see "The parse worker" below), and every parse in this process
stops at a deadline too (see "Time-bounded parsing").
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import io
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypeVar

import tree_sitter
import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from sandbox.bash.syntax.agreement import Disagreement, check_agreement

__all__ = [
    "Assignment",
    "Finding",
    "Operator",
    "ParseOffLoop",
    "ParsedScript",
    "Redirect",
    "SimpleCommand",
    "Word",
    "escape_controls",
    "loop_budget",
    "parse",
    "parse_prefix",
    "scan_word",
]

_LANGUAGE = Language(tree_sitter_bash.language())


# tree-sitter-bash 0.25.1 reads out of bounds on some code points of Unicode planes
# 3-16 after a `{` (`x{\U000e0001h)` segfaults a fresh process about one run in
# two, depending on what lies past its tables): such commands are refused before
# the parser ever sees them. Planes 0-2 (every script in use, emoji, CJK) parse.
_FIRST_UNPARSEABLE = "\U00030000"


def _parser() -> Parser:
    """A new parser for every parse: no state carried from one command to the next and
    nothing shared between threads, for ~0.3 µs."""
    return Parser(_LANGUAGE)


# ---------------------------------------------------------------------------
# Time-bounded parsing, and parses kept off an event loop
#
# tree-sitter-bash's error recovery is superlinear on some short input that the
# worker's guard (below) does not catch: 4,096 bytes of "(" x100 then ")~" x1998 took
# 2-8 s in the agent's process. Every parse in this process therefore runs with a
# progress callback, which tree-sitter calls every hundred parse operations (every
# ~60 µs on that input): it ends the parse at a deadline (the command is refused, R6),
# and, being Python code, it lets the interpreter hand the GIL to another thread at
# each call. py-tree-sitter holds the GIL for a whole parse otherwise, so a parse in a
# worker thread would still freeze the event loop. py-tree-sitter ignores the callback
# when given bytes: the source is read through a callable (a memoryview, no copies).


class _Cut(Exception):
    """tree-sitter stopped at the deadline."""


class ParseOffLoop(BaseException):
    """Raised by `parse` only inside `loop_budget`: this command is not one to decide on
    an event loop (longer than the budget's bytes, or one for the parse worker, or
    tree-sitter passed the budget's deadline); decide it in a worker thread instead.

    A BaseException, like GeneratorExit: a signal to the code that set the budget, not
    an error. `BashToolPolicy.check` turns every Exception into a remembered R6
    refusal; a command merely cut short on the loop must be neither refused nor
    remembered, so this passes through it."""


class _Budget(threading.local):
    deadline: float | None = None
    max_bytes: int = 0


_budget = _Budget()


@contextlib.contextmanager
def loop_budget(seconds: float, max_bytes: int) -> Iterator[None]:
    """Within this block (on this thread), `parse` parses only a command of at most
    ``max_bytes`` characters that needs no worker, and only until ``seconds`` from now;
    otherwise it raises `ParseOffLoop`. For a caller on an event loop: it tries the
    cheap case there and moves anything else to a thread."""
    previous = (_budget.deadline, _budget.max_bytes)
    _budget.deadline, _budget.max_bytes = time.monotonic() + seconds, max_bytes
    try:
        yield
    finally:
        _budget.deadline, _budget.max_bytes = previous


class _Progress:
    """tree-sitter's progress callback: True (stop) once the deadline has passed."""

    __slots__ = ("deadline",)

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, _offset: int, _has_error: bool) -> bool:
        return time.monotonic() > self.deadline


def _parse_bounded(data: bytes, seconds: float) -> Node:
    """The root of ``data``'s tree, parsed here within ``seconds`` (and within the
    loop budget, if one is set): raises _Cut past it, ParseOffLoop past the budget."""
    deadline = time.monotonic() + seconds
    budget = _budget.deadline
    on_loop = budget is not None and budget < deadline
    if on_loop:
        assert budget is not None
        deadline = budget
    view = memoryview(data)
    try:
        tree = _parser().parse(
            lambda byte, _point: view[byte:], progress_callback=_Progress(deadline)
        )
    except ValueError:  # tree-sitter returned no tree: the callback stopped it
        if on_loop:
            raise ParseOffLoop from None
        raise _Cut from None
    return tree.root_node


# ---------------------------------------------------------------------------
# The model (NamedTuples: immutable, and cheap to build by the hundred per script)


class Word(NamedTuple):
    """One bash word as written (``text``) and as the program receives it.

    ``value`` is the word after quote removal when bash performs no expansion on
    it, else None. ``prefix`` is the literal text bash produces before the first
    expansion (equal to ``value`` for a literal word): a word whose prefix is
    ``src/`` cannot become an option whatever the expansion yields. A word with an
    unquoted parameter, command or arithmetic expansion has the prefix ``""``: bash
    splits its result into fields, and only the first starts with the literal text. ``plain`` is
    True when the word has no quoting, escaping, expansion, glob or brace at all.
    ``numeric`` is True for a word that is one arithmetic expansion (``$((n+1))``),
    which can only become an integer.
    """

    text: str
    value: str | None
    prefix: str
    plain: bool
    numeric: bool = False
    splits: bool = False  # an unquoted expansion: bash may split it into fields or drop it

    @property
    def shown(self) -> str:
        """The value when known, else the source text."""
        return self.text if self.value is None else self.value


# Builds a NamedTuple from a tuple without its Python-level __new__ (hot loops).
_new = tuple.__new__
# The defaults of Word's fields after ``plain``: _new(Word, (text, value, prefix,
# plain, *_WORD_TAIL)) is Word(text, value, prefix, plain), whatever fields follow.
_WORD_TAIL = Word("", None, "", False)[4:]


class Assignment(NamedTuple):
    """``name=value`` as a leading assignment, a statement or a declaration argument."""

    name: str
    text: str


class SimpleCommand(NamedTuple):
    """A simple command: ``words[0]`` is the command word (absent for
    assignment-only and redirection-only commands).

    ``kind`` is ``"command"``, ``"declaration"`` (declare/export/local/readonly/
    typeset), ``"unset"``, ``"test"`` (``[ ... ]``), ``"assignment"`` or ``"loop"``
    (the variable of ``for NAME in …``, assigned on every iteration).
    """

    kind: str
    words: tuple[Word, ...]
    assignments: tuple[Assignment, ...]
    text: str
    offset: int

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple([w.text if w.value is None else w.value for w in self.words])


class Operator(NamedTuple):
    """An operator bash treats as syntax. ``texts`` are the spellings it is
    known by: a newline separator is also ``;`` and a backtick substitution
    is also ``$(``, so blocking either spelling blocks both."""

    kind: str
    text: str
    texts: tuple[str, ...]
    offset: int


class Redirect(NamedTuple):
    operator: str
    target: Word | None
    offset: int


class Finding(NamedTuple):
    """A place the source cannot be decided on safely. ``rule`` is the docs/policy.md
    rule it falls under (R2 hidden command, R6 parse, R8 control character)."""

    rule: str
    message: str
    token: str | None
    offset: int


class ParsedScript(NamedTuple):
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
        elif esc == "x" and text.startswith("{", i):
            raise _Dynamic  # bash's \x{HH…} form
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
            if i >= n or text[i] in "'\\":
                # bash keeps a \c just before the closing quote as the text "\c"
                # ($'\c' is two characters), and \c\ is not worth modelling
                raise _Dynamic
            if not text[i].isascii():
                raise _Dynamic  # bash takes one byte of a multibyte character
            decoded = "\x7f" if text[i] == "?" else chr(ord(text[i]) & 0x1F)
            i += 1
        else:
            decoded = "\\" + esc
        if decoded == "\x00":
            cut = True
        elif not cut:
            out.append(decoded)
    raise _Dynamic  # unterminated


# Runs of characters with no meaning inside double quotes / outside any quotes.
_DQ_RUN = re.compile(r'[^"\\$`]+')
_UNQUOTED_RUN = re.compile(r"[^\\'\"$`*?\[(){~<>]+")


def _double_quoted(text: str, i: int, out: list[str]) -> int:
    """Quote-remove ``"..."`` content starting after the opening quote."""
    n = len(text)
    while i < n:
        run = _DQ_RUN.match(text, i)
        if run is not None:
            out.append(run.group())
            i = run.end()
            continue
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
    """Whether the unquoted ``{`` at ``i`` may start a brace expansion.

    A superset of bash's rule (``brace_gobbler``): a ``,`` or ``..`` after the ``{``
    and a ``}`` after that. bash's own matching has corners (``x{},y}`` expands to
    ``x}`` and ``xy``: a ``}`` right after the ``{`` is text), so this does not match
    braces by depth; ``{}`` and ``{x}`` stay literal."""
    separator = False
    j = i + 1
    n = len(text)
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch in "'\"":
            return True  # quoted parts inside braces: too subtle, treat as expanding
        if ch == "," or (ch == "." and text.startswith("..", j)):
            separator = True
        elif ch == "}" and separator:
            return True
        j += 1
    return False


def _is_arithmetic_word(text: str) -> bool:
    """Whether ``text`` is exactly one ``$((...))`` or ``$[...]`` expansion."""
    if text.startswith("$(("):
        opening, closing, depth = "(", ")", 2
    elif text.startswith("$["):
        opening, closing, depth = "[", "]", 1
    else:
        return False
    start = 3 if opening == "(" else 2
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "'\"`\\":
            return False
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False


def scan_word(text: str) -> Word:
    """Interpret one bash word's source text the way bash does before running it:
    quote removal, ANSI-C decoding, and detection of anything it would expand
    (parameters, substitutions, arithmetic, globs, braces, a leading tilde)."""
    if text and not _NOT_PLAIN.search(text):
        return _new(Word, (text, text, text, True, *_WORD_TAIL))
    if _is_arithmetic_word(text):
        return Word(text, None, "", False, True)
    out: list[str] = []
    n = len(text)
    i = 0
    assignment = _ASSIGNMENT_WORD.match(text)
    try:
        while i < n:
            if (run := _UNQUOTED_RUN.match(text, i)) is not None:
                out.append(run.group())
                i = run.end()
                continue
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
        if _splits(text):
            return Word(text, None, "", False, False, True)
        return _new(Word, (text, None, "".join(out), False, *_WORD_TAIL))
    value = "".join(out)
    return _new(Word, (text, value, value, False, *_WORD_TAIL))


def may_be_several(word: Word) -> bool:
    """Whether bash may turn ``word`` into several words, or none: an unquoted
    expansion (split into fields, dropped when empty), a glob or a brace expansion."""
    if word.value is not None or word.numeric:
        return False
    return word.splits or _splits(word.text, globs=True)


def _splits(text: str, *, globs: bool = False) -> bool:
    """Whether the word holds an unquoted parameter, command or arithmetic expansion,
    whose result bash splits into fields (``./$v`` with v=' -o M' is the three words
    ``./``, ``-o``, ``M``) or drops when empty: only the first field starts with the
    word's literal prefix."""
    n = len(text)
    i = 0
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
        elif ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return True
            i = end + 1
        elif ch == "$" and i + 1 < n and text[i + 1] == "'":
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif ch == '"' or (ch == "$" and i + 1 < n and text[i + 1] == '"'):
            j = i + (2 if ch == "$" else 1)
            while j < n and text[j] != '"':
                if text.startswith("$@", j):
                    return True  # "$@" is one word per parameter
                if text.startswith("${", j):
                    close = text.find("}", j)
                    if "@" in text[j: close if close > 0 else n]:
                        return True  # "${a[@]}", "${@:2}", "${!p@}": several words
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif ch == "`" or (ch == "$" and i + 1 < n and text[i + 1] in _EXPANDS_AFTER_DOLLAR):
            return True
        elif globs and ch in "*?[{":
            return True
        else:
            i += 1
    return False


# ---------------------------------------------------------------------------
# Node kinds, as tree-sitter symbol ids: comparing ints keeps the walk cheap.

_KIND_COUNT = _LANGUAGE.node_kind_count
_KIND_NAME: tuple[str, ...] = tuple(_LANGUAGE.node_kind_for_id(i) or "" for i in range(_KIND_COUNT))
_NAMED: tuple[bool, ...] = tuple(_LANGUAGE.node_kind_is_named(i) for i in range(_KIND_COUNT))


def _ids(*names: str, named: bool = True) -> frozenset[int]:
    wanted = set(names)
    return frozenset(
        i for i in range(_KIND_COUNT) if _KIND_NAME[i] in wanted and _NAMED[i] == named
    )


_COMMAND = _ids("command")
_DECLARATION = _ids("declaration_command")
_UNSET = _ids("unset_command")
_ASSIGNMENT = _ids("variable_assignment")
_ASSIGNMENTS = _ids("variable_assignments")
_FUNCTION = _ids("function_definition")
_TEST_COMMAND = _ids("test_command")
_COMPOUND = _ids("compound_statement")
_C_FOR = _ids("c_style_for_statement")
# `for NAME in …` and `select NAME in …`: NAME is assigned on every iteration.
_FOR_IN = _ids("for_statement")
_ARITH_EXPANSION = _ids("arithmetic_expansion")
_COMMAND_SUBSTITUTION = _ids("command_substitution")
_PROCESS_SUBSTITUTION = _ids("process_substitution")
_EXPANSION = _ids("expansion")
_SUBSCRIPT = _ids("subscript")
_HEREDOC_REDIRECT = _ids("heredoc_redirect")
_FILE_REDIRECT = _ids("file_redirect")
_HERESTRING = _ids("herestring_redirect")
_DO_GROUP = _ids("do_group")
_COMMAND_NAME = _ids("command_name")
_QUOTING = _ids("string", "translated_string", "heredoc_body")
_EXPRESSION = _ids(
    "binary_expression", "unary_expression", "ternary_expression", "postfix_expression",
    "parenthesized_expression",
)  # fmt: skip
_REDIRECTS = _FILE_REDIRECT | _HERESTRING | _HEREDOC_REDIRECT | _ids("comment")
_STATEMENT = _ids(
    "command", "redirected_statement", "pipeline", "list", "subshell", "compound_statement",
    "if_statement", "for_statement", "c_style_for_statement", "while_statement",
    "case_statement", "function_definition", "negated_command", "test_command",
    "declaration_command", "unset_command", "variable_assignment", "variable_assignments",
)  # fmt: skip
# Nodes whose children are statements separated by ";", "&" or newlines.
_CONTAINER = _ids(
    "program", "compound_statement", "subshell", "do_group", "if_statement", "elif_clause",
    "else_clause", "case_item", "while_statement", "command_substitution",
    "process_substitution",
)  # fmt: skip
_COMMENT = _ids("comment")
_SEPARATOR = _ids(";", "&", ";;", ";&", ";;&", named=False)
# Leaves (tokens without children): no need to ask tree-sitter for their children.
_LEAF = _ids(
    "word", "number", "string_content", "raw_string", "ansi_c_string", "comment",
    "variable_name", "special_variable_name", "heredoc_start", "heredoc_content",
    "heredoc_end", "file_descriptor", "test_operator", "regex", "extglob_pattern",
)  # fmt: skip
# Leaves whose text is data to bash: a control character in one is not syntax.
_DATA = _ids("string_content", "raw_string", "ansi_c_string", "heredoc_content")
# Leaves bash does not expand (outside double quotes): "$(" in them is text.
_LITERAL = _ids("raw_string", "ansi_c_string", "comment")
_NUMBER = _ids("number")
_WORD = _ids("word")
_KNOWN = _ids(
    "program", "redirected_statement", "for_statement", "c_style_for_statement",
    "variable_assignment", "unary_expression", "binary_expression", "postfix_expression",
    "parenthesized_expression", "ternary_expression", "while_statement", "do_group",
    "if_statement", "elif_clause", "else_clause", "case_statement", "case_item",
    "function_definition", "compound_statement", "subshell", "pipeline", "list",
    "negated_command", "test_command", "declaration_command", "unset_command", "command",
    "command_name", "variable_assignments", "subscript", "file_redirect", "heredoc_redirect",
    "heredoc_body", "herestring_redirect", "arithmetic_expansion", "brace_expression",
    "concatenation", "string", "translated_string", "array", "number", "simple_expansion",
    "expansion", "command_substitution", "process_substitution", "word", "string_content",
    "raw_string", "ansi_c_string", "regex", "comment", "variable_name",
    "special_variable_name", "heredoc_start", "heredoc_content", "heredoc_end",
    "file_descriptor", "test_operator", "extglob_pattern",
)  # fmt: skip
_OPERATOR_TOKENS = _ids(
    ";", "&", ";;", ";&", ";;&", "&&", "||", "|", "|&", ">", ">>", "<", "&>", "&>>", "<&",
    ">&", ">|", "<&-", ">&-", "<>", "<<", "<<-", "<<<", "$(", "`", "``", "$`", "<(", ">(",
    "$((", "$[", "((", "${", "$", "(", "{", "[[", "!", ":",
    named=False,
)  # fmt: skip
_COLON = _ids(":", named=False)
_OPEN_BRACKET = _ids("[", named=False)
_ARITH_TEST_OPERATORS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# "$(", "${", "$[" and backticks that bash expands unless escaped or quoted.
_EXPANSION_START = re.compile(rb"`|\$[({\[]")

# Context bits carried down the walk.
_ARITH = 1  # an arithmetic context: only number literals are safe in it
_TEST = 2  # inside [[ ]]
# Inside double quotes or an expanding here-document body. There a single quote
# is an ordinary character, even within ${x:-'...'}, so what tree-sitter calls a
# raw_string is expanded by bash: "${x:-'$(id)'}" runs id.
_DQUOTE = 4

# What the walk does on entering a node of a given kind (kinds not listed: just
# descend). Ints compared in one dict lookup keep the per-node cost low.
(_A_UNKNOWN, _A_COMMAND, _A_QUOTING, _A_COMMAND_SUBSTITUTION, _A_EXPANSION,
 _A_FILE_REDIRECT, _A_ASSIGNMENT, _A_ARITH_EXPANSION, _A_PROCESS_SUBSTITUTION,
 _A_DECLARATION, _A_UNSET, _A_ASSIGNMENTS, _A_FUNCTION, _A_TEST_COMMAND, _A_COMPOUND,
 _A_HEREDOC, _A_HERESTRING, _A_EXPRESSION) = range(18)  # fmt: skip
_DISPATCH: dict[int, int] = {
    **{k: _A_UNKNOWN for k in range(_KIND_COUNT) if _NAMED[k] and k not in _KNOWN},
    **{k: a for kinds, a in (
        (_COMMAND, _A_COMMAND), (_QUOTING, _A_QUOTING),
        (_COMMAND_SUBSTITUTION, _A_COMMAND_SUBSTITUTION), (_EXPANSION, _A_EXPANSION),
        (_FILE_REDIRECT, _A_FILE_REDIRECT), (_ASSIGNMENT, _A_ASSIGNMENT),
        (_ARITH_EXPANSION, _A_ARITH_EXPANSION),
        (_PROCESS_SUBSTITUTION, _A_PROCESS_SUBSTITUTION), (_DECLARATION, _A_DECLARATION),
        (_UNSET, _A_UNSET), (_ASSIGNMENTS, _A_ASSIGNMENTS), (_FUNCTION, _A_FUNCTION),
        (_TEST_COMMAND, _A_TEST_COMMAND), (_COMPOUND, _A_COMPOUND),
        (_HEREDOC_REDIRECT, _A_HEREDOC), (_HERESTRING, _A_HERESTRING),
        (_EXPRESSION, _A_EXPRESSION),
    ) for k in kinds},
}  # fmt: skip
# A command of plain words separated by blanks, and the blanks between them.
_PLAIN_COMMAND = re.compile(
    r"""[^\\'"$`*?\[\]{}~()<>|&;!#\s]+(?:[ \t]+[^\\'"$`*?\[\]{}~()<>|&;!#\s]+)*"""
)
_BLANKS = re.compile(r"[ \t]+")
# Nodes that bash ends at an unescaped newline.
_ONE_LINE = _ids(
    "command", "declaration_command", "unset_command", "test_command",
    "redirected_statement", "variable_assignment", "file_redirect", "herestring_redirect",
)  # fmt: skip
_HOLDS_ASSIGNMENTS = _ids("command", "declaration_command", "variable_assignments")


_UNSEEN: tuple[str, tuple[str, ...]] = ("", ())
_OPERATOR_CACHE: dict[tuple[int, str, bool], tuple[str, tuple[str, ...]] | None] = {}


def _operator_for(token: str, parent: str, first: bool) -> tuple[str, tuple[str, ...]] | None:
    """The kind and spellings of anonymous token ``token`` under ``parent``,
    or None when bash does not treat it as shell syntax there."""
    if parent in ("binary_expression", "unary_expression", "ternary_expression",
                  "postfix_expression", "parenthesized_expression"):  # fmt: skip
        return None  # arithmetic or [[ ]] operators, not shell syntax
    if token == ";":
        return "separator", (";", "\n")
    if token == "&":
        return "background", ("&",)
    if token in (";;", ";&", ";;&"):
        return "case_terminator", (token,)
    if token in ("&&", "||"):
        return ("and" if token == "&&" else "or"), (token,)
    if token in ("|", "|&"):
        return None if parent == "case_item" else ("pipe", (token,))
    if token in (">", ">>", "<", "&>", "&>>", "<&", ">&", ">|", "<&-", ">&-", "<>"):
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
    if token in ("$((", "$[", "(("):
        return "arithmetic", (token,)
    if token in ("${", "$"):
        return "expansion", (token,)
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
    """One iterative pass over an error-free tree; collects the ParsedScript fields.

    Two whole-source checks ride along. Control characters (R8) are allowed
    only inside data leaves, whose ranges are collected when the source has
    any. Every "$(", "${", "$[" and backtick in the source must be accounted
    for by a node tree-sitter parsed as that expansion, an escape, or a literal
    (single-quoted) leaf; one that is not is an expansion bash will perform and
    tree-sitter did not see.
    """

    def __init__(
        self, source: str, data: bytes, max_depth: int, data_ranges: bool, literal_ranges: bool
    ) -> None:
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
        self.depth = 0
        self.controls = data_ranges
        # (start, end, is_data): quoted text is data, a substitution inside it is
        # code again; the innermost range around a position decides.
        self.data_ranges: list[tuple[int, int, bool]] = []
        self.expansions = [m.start() for m in _EXPANSION_START.finditer(data)]
        self.track_literals = literal_ranges or bool(self.expansions)
        self.claimed: set[int] = set()
        self.literal_ranges: list[tuple[int, int]] = []

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

    def words(self, nodes: list[Node], skip: set[int] | None = None) -> tuple[Word, ...]:
        """Words of ``nodes``; adjacent nodes with no blank between them are one
        bash word (tree-sitter splits ``$"x"`` and ``a<(b)``).

        The start offsets of the nodes of a word bash does not expand go to
        ``skip``: nothing in them needs walking. Its "$(" and backticks are
        quoted or escaped, so its span counts as literal text for
        check_expansions. (Not when the source has control characters: R8 needs
        to see which of them are inside quotes.)
        """
        out: list[Word] = []
        group: list[int] = []
        start = end = -1
        for node in nodes:
            node_start = node.start_byte
            if node_start == end:
                end = node.end_byte
                group.append(node_start)
                continue
            if start >= 0:
                out.append(self.word(start, end, group, skip))
            start, end = node_start, node.end_byte
            group = [node_start]
        if start >= 0:
            out.append(self.word(start, end, group, skip))
        return tuple(out)

    def word(self, start: int, end: int, group: list[int], skip: set[int] | None) -> Word:
        word = scan_word(self.span(start, end))
        if skip is not None and (word.plain or (word.value is not None and not self.controls)):
            skip.update(group)
            if not word.plain and self.track_literals:
                self.literal_ranges.append((start, end))
        return word

    # -- statements ------------------------------------------------------

    def plain_command(self, node: Node) -> bool:
        """Record a command of plain words only, the common case, and say so: then
        nothing inside needs a walk, and its children are never asked for (a
        64 KiB command has ~30,000 of them)."""
        start = node.start_byte
        text = self.span(start, node.end_byte)
        first = node.child(0)
        if first is None or first.kind_id not in _COMMAND_NAME or not _PLAIN_COMMAND.fullmatch(text):
            return False
        words = tuple([_new(Word, (w, w, w, True, *_WORD_TAIL)) for w in _BLANKS.split(text)])
        at = start if self.ascii else self.offset(start)
        self.commands.append(SimpleCommand("command", words, (), text, at))
        return True

    def command(self, node: Node, children: list[Node]) -> set[int]:
        """Record a simple command that is not plain_command's; return the start
        offsets of its children made of plain words, which the walk can skip."""
        start = node.start_byte
        text = self.span(start, node.end_byte)
        at = start if self.ascii else self.offset(start)
        assignments: list[Assignment] = []
        parts: list[Node] = []
        seen_name = False
        for child in children:
            kind = child.kind_id
            if kind in _COMMAND_NAME:
                seen_name = True
                parts.append(child)
            elif kind in _REDIRECTS:
                continue
            elif seen_name:
                parts.append(child)
            elif kind in _ASSIGNMENT:
                assignments.append(self.assignment(child))
        plain: set[int] = set()
        self.commands.append(
            SimpleCommand("command", self.words(parts, plain), tuple(assignments), text, at)
        )
        return plain

    def builtin(self, node: Node, children: list[Node], kind: str) -> None:
        head = self.text(children[0]) if children else ""
        args = [c for c in children[1:] if c.kind_id not in _REDIRECTS]
        for child in args:
            if child.kind_id in _ASSIGNMENT:
                self.assignment(child)
        words = (Word(head, head, head, True), *self.words(args))
        self.commands.append(
            SimpleCommand(kind, words, (), self.text(node), self.offset(node.start_byte))
        )

    def test_builtin(self, node: Node, children: list[Node]) -> None:
        # bash passes ``[`` one argument per word: the tree's expression nodes
        # (``! -v x``, ``a -a -v b``) are flattened back into those words, so every
        # operator is seen as the word it is ([ -v must be found after a '!').
        parts: list[Node] = []
        stack = list(reversed(children[1:-1]))
        while stack:
            part = stack.pop()
            if _KIND_NAME[part.kind_id] in _TEST_EXPRESSIONS:
                stack.extend(reversed(part.children))
            else:
                parts.append(part)
        words = (
            Word("[", "[", "[", True),
            *self.words(parts),
            Word("]", "]", "]", True),
        )
        self.commands.append(
            SimpleCommand("test", words, (), self.text(node), self.offset(node.start_byte))
        )

    def assignment(self, node: Node) -> Assignment:
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        if name_node is not None and name_node.kind_id in _SUBSCRIPT:
            base = name_node.child_by_field_name("name")
            name = self.text(base) if base is not None else name
        result = Assignment(name, self.text(node))
        self.assignments.append(result)
        return result

    def loop_variable(self, node: Node) -> None:
        """``for NAME in …``: an assignment of NAME, decided as one (``for PATH in
        tools; do ls; done`` runs tools/ls)."""
        name_node = node.child_by_field_name("variable")
        if name_node is None:
            return
        name = self.text(name_node)
        assignment = Assignment(name, f"{name}=")
        self.assignments.append(assignment)
        self.commands.append(
            SimpleCommand(
                "loop", (), (assignment,), self.text(name_node),
                self.offset(name_node.start_byte),
            )
        )

    def assignment_only(self, node: Node, parts: list[Node]) -> None:
        assignments = tuple(self.assignment(p) for p in parts if p.kind_id in _ASSIGNMENT)
        self.commands.append(
            SimpleCommand(
                "assignment", (), assignments, self.text(node), self.offset(node.start_byte)
            )
        )

    # -- here-documents ----------------------------------------------------

    def heredoc(self, node: Node, children: list[Node]) -> Node | None:
        """Check a here-document; return its body when bash does not expand it
        (so the walk skips it)."""
        start = end = body = None
        dash = False
        for child in children:
            kind = _KIND_NAME[child.kind_id]
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
            return None
        delimiter, quoted = _heredoc_delimiter(self.text(start))
        if self.text(end) != delimiter:
            self.find(
                "R6",
                f"here-document ends at {self.text(end)!r} but bash ends it at {delimiter!r}",
                end,
                self.text(end),
            )
        if body is None:
            return None
        text = self.text(body)
        if not quoted and "\\\n" in text:
            # bash joins backslash-newline in an expanding body before it looks
            # for the delimiter: "E\\<newline>OF" ends the document.
            text = _JOINED_LINE.sub(r"\1", text)
        lines = text.split("\n")
        if any((line.lstrip("\t") if dash else line) == delimiter for line in lines):
            self.find(
                "R6",
                f"here-document body holds the delimiter line {delimiter!r}: "
                "bash ends the document there",
                body,
                delimiter,
            )
        if quoted or body.child_count == 0:
            self.data_ranges.append((body.start_byte, body.end_byte, True))
        if quoted:
            self.literal_ranges.append((body.start_byte, body.end_byte))
            return body
        # A command substitution in an expanding body is parsed by bash from the raw
        # text: "\\&" there is an escaped backslash, then the & operator, where the
        # body's escaping made it one word (bench/fuzz_policy.py, seed 20261225).
        inner = list(body.children)
        while inner:
            node = inner.pop()
            kind = _KIND_NAME[node.kind_id]
            if kind == "command_substitution" and b"\\" in self.data[node.start_byte:node.end_byte]:
                self.find(
                    "R6",
                    "a command substitution with a backslash in a here-document body: "
                    "bash reads its escapes differently there (write it on the command "
                    "line, or quote the delimiter)",
                    node,
                    self.text(node),
                )
                break
            inner.extend(node.children)
        return None

    # -- the walk ----------------------------------------------------------

    def run(self, root: Node) -> None:
        # Children are pushed in source order and so visited in reverse; the
        # results are sorted by offset at the end.
        stack: list[tuple[Node, int, int, int]] = [(root, root.kind_id, 1, 0)]
        push = stack.append
        pop = stack.pop
        max_depth = self.max_depth
        data = self.data
        track_expansions = bool(self.expansions)
        track_literals = self.track_literals
        controls = self.controls
        dispatch = _DISPATCH
        # Module constants as locals: this loop runs once per node.
        named = _NAMED
        operator_tokens_ids = _OPERATOR_TOKENS
        leaf_ids = _LEAF
        statement_ids = _STATEMENT
        separator_ids = _SEPARATOR
        comment_ids = _COMMENT
        container_ids = _CONTAINER
        c_for_ids = _C_FOR
        expansion_ids = _EXPANSION
        subscript_ids = _SUBSCRIPT
        do_group_ids = _DO_GROUP
        number_ids = _NUMBER
        data_ids = _DATA
        literal_ids = _LITERAL
        colon_ids = _COLON
        open_bracket_ids = _OPEN_BRACKET
        expression_ids = _EXPRESSION
        operators = self.operators
        ascii_source = self.ascii
        one_line_ids = _ONE_LINE
        while stack:
            node, kind, depth, ctx = pop()
            if depth > self.depth:
                self.depth = depth
                if depth > max_depth:
                    self.find("R6", f"nesting deeper than {max_depth} levels", node)
                    return
            if ctx & _ARITH and kind not in expression_ids:
                self.arith_operand(node)
            if kind in _FOR_IN:
                self.loop_variable(node)
            action = dispatch.get(kind)
            if action == _A_COMMAND and self.plain_command(node):
                continue
            children = node.children
            child_ctx = ctx
            skip: Node | None = None
            plain: set[int] | None = None
            if action is not None:
                if action == _A_UNKNOWN:
                    name = _KIND_NAME[kind] if kind < _KIND_COUNT else str(kind)
                    self.find("R6", f"unsupported construct {name!r}", node, name)
                    continue
                if action == _A_COMMAND:
                    plain = self.command(node, children)
                elif action == _A_QUOTING:
                    child_ctx |= _DQUOTE
                    if controls:
                        self.data_ranges.append((node.start_byte, node.end_byte, True))
                elif action == _A_COMMAND_SUBSTITUTION:
                    child_ctx &= ~_DQUOTE  # a substitution starts a new quoting context
                    if controls:
                        self.data_ranges.append((node.start_byte, node.end_byte, False))
                    self.command_substitution(node, children, track_expansions)
                elif action == _A_EXPANSION:
                    if track_expansions:
                        self.claimed.add(node.start_byte)
                    self.expansion(node, children)
                elif action == _A_FILE_REDIRECT:
                    self.file_redirect(node, children)
                elif action == _A_ASSIGNMENT:
                    # Inside `for ((i=0; ...))` it is arithmetic, checked as such.
                    parent = node.parent
                    if not ctx & _ARITH and (
                        parent is None or parent.kind_id not in _HOLDS_ASSIGNMENTS
                    ):
                        self.assignment_only(node, [node])
                elif action == _A_ARITH_EXPANSION:
                    child_ctx |= _ARITH
                    if track_expansions:
                        self.claimed.add(node.start_byte)
                elif action == _A_PROCESS_SUBSTITUTION:
                    child_ctx &= ~_DQUOTE
                    if controls:
                        self.data_ranges.append((node.start_byte, node.end_byte, False))
                    self.reads_file(node, children)
                elif action == _A_DECLARATION:
                    self.builtin(node, children, "declaration")
                elif action == _A_UNSET:
                    self.builtin(node, children, "unset")
                elif action == _A_ASSIGNMENTS:
                    self.assignment_only(node, children)
                elif action == _A_FUNCTION:
                    name_node = node.child_by_field_name("name")
                    self.functions.append(self.text(name_node) if name_node is not None else "")
                elif action == _A_TEST_COMMAND:
                    if _KIND_NAME[children[0].kind_id] == "[":
                        self.test_builtin(node, children)
                    else:
                        child_ctx |= _TEST
                elif action == _A_COMPOUND:
                    if _KIND_NAME[children[0].kind_id] == "((":
                        child_ctx |= _ARITH
                elif action == _A_HEREDOC:
                    skip = self.heredoc(node, children)
                elif action == _A_HERESTRING:
                    self.redirects.append(Redirect("<<<", None, self.offset(node.start_byte)))
                elif action == _A_EXPRESSION:
                    if ctx & _TEST:
                        self.test_expression(node, children)
            if not children:
                continue
            if kind in one_line_ids and len(children) > 1:
                self.check_one_line(node, children)
            c_for = kind in c_for_ids
            container = kind in container_ids
            arith_after = kind in expansion_ids or kind in subscript_ids
            prev_end = -1
            parent_name = ""
            depth += 1
            for child in children:
                ck = child.kind_id
                if container and ck not in comment_ids:
                    start = child.start_byte
                    if prev_end >= 0 and ck not in separator_ids and b"\n" in data[prev_end:start]:
                        operators.append(
                            Operator(
                                "separator",
                                "\n",
                                (";", "\n"),
                                prev_end if ascii_source else self.offset(prev_end),
                            )
                        )
                    prev_end = child.end_byte if ck in statement_ids else -1
                if not named[ck]:
                    if ck in operator_tokens_ids:
                        if arith_after and (ck in colon_ids or ck in open_bracket_ids):
                            # ${x:offset:length} and a[index] are arithmetic.
                            child_ctx |= _ARITH
                            continue
                        parent_name = parent_name or _KIND_NAME[kind]
                        self.operator(child, ck, parent_name, child is children[0])
                    elif arith_after and ck in open_bracket_ids:
                        child_ctx |= _ARITH
                    continue
                if (skip is not None and child == skip) or (plain and child.start_byte in plain):
                    continue
                cctx = child_ctx
                if c_for and ck not in do_group_ids:
                    cctx |= _ARITH
                elif cctx & _ARITH and arith_after and kind in subscript_ids:
                    if self.text(child) in ("@", "*"):
                        cctx &= ~_ARITH
                    child_ctx &= ~_ARITH  # only the index is arithmetic
                if ck in leaf_ids:
                    if cctx & _ARITH and ck not in number_ids:
                        self.arith_operand(child)
                    if controls and ck in data_ids:
                        self.data_ranges.append((child.start_byte, child.end_byte, True))
                    if (
                        track_literals
                        and ck in literal_ids
                        and not (cctx & _DQUOTE and ck not in comment_ids)
                    ):
                        self.literal_ranges.append((child.start_byte, child.end_byte))
                    continue
                push((child, ck, depth, cctx))

    def check_one_line(self, node: Node, children: list[Node]) -> None:
        """A newline ends a simple command in bash unless a backslash escapes it.
        tree-sitter-bash sometimes reads the next line as more arguments
        (``a | b -c`` newline ``sed x 2>/dev/null || c`` makes ``sed`` an
        argument of ``b``), which would hide a command."""
        data = self.data
        if b"\n" not in data[node.start_byte : node.end_byte]:
            return
        if any(c.kind_id in _HEREDOC_REDIRECT for c in children):
            return  # the body follows the line; checked by heredoc()
        end = children[0].end_byte
        for child in children[1:]:
            start = child.start_byte
            gap = data[end:start]
            at = gap.find(b"\n")
            while at >= 0:
                if at == 0 or gap[at - 1] != 0x5C:  # not a backslash-newline
                    self.find(
                        "R6",
                        "tree-sitter-bash reads this line break as part of one command, "
                        "where bash ends the command (a known misparse, e.g. after a "
                        "pipeline of three commands); end the line with ';' or send the "
                        "commands in separate calls",
                        child,
                        "\n",
                    )
                    return
                at = gap.find(b"\n", at + 1)
            end = child.end_byte

    def command_substitution(self, node: Node, children: list[Node], track: bool) -> None:
        if track:
            self.claimed.add(node.start_byte)
        self.reads_file(node, children)
        if _KIND_NAME[children[0].kind_id] in ("`", "$`"):
            self.claimed.add(node.end_byte - 1)
            inner = self.text(node)[1:-1]
            if "\\" in inner and re.search(r'\\[`$\\"]', inner):
                self.find(
                    "R6",
                    "backslash escapes inside backticks are re-parsed by bash "
                    "(nested substitution, and \\\" inside double quotes is a quote); use "
                    "$(...) instead",
                    node,
                    "`",
                )

    def reads_file(self, node: Node, children: list[Node]) -> None:
        """Decide a substitution whose last command is only ``< FILE`` as ``cat FILE``.

        bash prints the file there (``$(< f)`` is its ``$(cat f)``): in ``$( )``,
        backticks and ``<( )``/``>( )`` it runs the substitution's text one line at a
        time, and reads the file instead of opening it when the line it ran last is
        one simple command of exactly one input redirection (``<`` on fd 0), neither
        in the background nor timed. Comments, blank lines and earlier lines do not
        matter: ``$(< f #<newline>)``, ``$(#c<newline>< f)``, ``$(a<newline>< f)`` read
        f, and so does ``$(< f;)``. ``$(< f 2>/dev/null)``, ``$(< f < g)``,
        ``$(< f <<<x)``, ``$(< f &)``, ``$(3< f)`` and ``$(< f; < g)`` only open it.
        Lines are those of the raw text, as backticks, here-document bodies and bash
        5.1 run them; where bash 5.2 reprints a ``$( )`` it parsed (``a;<newline>< f``
        becomes one line) or ignores trailing blanks, the file is counted as read
        although that bash only opens it.
        """
        statements = [c for c in children
                      if _NAMED[c.kind_id] and c.kind_id not in _COMMENT]
        if not statements:
            return
        last = statements[-1]
        redirect = last
        if _KIND_NAME[last.kind_id] == "redirected_statement" and last.named_child_count == 1:
            redirect = last.named_children[0]
        if redirect.kind_id not in _FILE_REDIRECT:
            return
        parts = redirect.children
        at = 0
        if parts and _KIND_NAME[parts[0].kind_id] == "file_descriptor":
            if self.text(parts[0]).strip("0"):
                return  # 3< f opens f on another descriptor: nothing is printed
            at = 1
        if at >= len(parts) or _KIND_NAME[parts[at].kind_id] != "<":
            return
        after = [_KIND_NAME[c.kind_id] for c in children if c.start_byte >= last.end_byte]
        if "&" in after:
            return  # "< f &" runs in the background: opened, never printed
        if len(statements) > 1:
            # A line of the raw text: bash 5.2's reprinted "$( )" joins "a;<newline>< f"
            # into one line (and reads nothing), but bash 5.1 and backticks run the raw
            # text, where it is two; the file is counted as read for either bash.
            previous = statements[-2]
            if b"\n" not in self.data[previous.start_byte:last.start_byte]:
                return
        target = [c for c in parts[at + 1:] if _NAMED[c.kind_id]]
        self.commands.append(SimpleCommand(
            "command", (Word("cat", "cat", "cat", True), *self.words(target)), (),
            self.text(node), self.offset(node.start_byte)))

    def operator(self, child: Node, ck: int, parent: str, first: bool) -> None:
        token = _KIND_NAME[ck]
        key = (ck, parent, first)
        op = _OPERATOR_CACHE.get(key, _UNSEEN)
        if op is _UNSEEN:
            op = _OPERATOR_CACHE[key] = _operator_for(token, parent, first)
        if op is None:
            return
        kind, texts = op
        text = token
        if kind == "redirect":
            prev = child.prev_sibling
            if prev is not None and _KIND_NAME[prev.kind_id] == "file_descriptor":
                text = self.text(prev) + token
                texts = (text, *texts)
        at = child.start_byte
        self.operators.append(Operator(kind, text, texts, at if self.ascii else self.offset(at)))

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

    def arith_operand(self, node: Node) -> None:
        kind = node.kind_id
        if kind in _NUMBER or kind in _EXPRESSION:
            return
        text = self.text(node)
        if kind in _WORD and _INTEGER_LITERAL.fullmatch(text):
            return
        self.find(
            "R2",
            f"arithmetic on {text[:40]!r}: bash evaluates a variable's value as arithmetic, "
            "and an array subscript in it (a[$(cmd)]) runs a command; only number literals "
            "are allowed in $((...)), ((...)), [[ -eq ]], ${x:offset} and a[index]",
            node,
            text[:40],
        )

    def expansion(self, node: Node, children: list[Node]) -> None:
        names = [_KIND_NAME[c.kind_id] for c in children]
        if ":=" in names or "=" in names:
            # ${NAME:=word} assigns NAME: decided like a loop variable (R5), so an
            # exported name the policy set empty (GIT_CONFIG_VALUE_2="") stays as set
            target = next((c for c in children if _KIND_NAME[c.kind_id] in
                           ("variable_name", "subscript", "special_variable_name")), None)
            name = self.text(target).split("[", 1)[0] if target is not None else "?"
            assignment = Assignment(name, f"{name}=")
            self.assignments.append(assignment)
            self.commands.append(
                SimpleCommand("loop", (), (assignment,), self.text(node),
                              self.offset(node.start_byte))
            )
        if len(names) > 1 and names[1] == "!":
            self.find(
                "R2",
                "indirect expansion ${!name} evaluates the named variable's array "
                "subscript, which can run a command",
                node,
                "${!",
            )
        for i in range(len(names) - 1):
            if names[i] == "@" and names[i + 1] == "P":
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
                if _NAMED[child.kind_id] and child != op and child.kind_id not in _EXPRESSION:
                    self.arith_operand(child)
        elif op_text in ("-v", "-R"):
            for child in children:
                if _NAMED[child.kind_id] and child != op and not _NAME.match(self.text(child)):
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
            kind = child.kind_id
            if not _NAMED[kind]:
                operator = operator or _KIND_NAME[kind]
            elif _KIND_NAME[kind] != "file_descriptor":
                target.append(child)
        words = self.words(target)
        self.redirects.append(
            Redirect(operator, words[0] if words else None, self.offset(node.start_byte))
        )


# Expression nodes tree-sitter builds inside ``[ … ]`` out of separate words.
_TEST_EXPRESSIONS = frozenset({
    "unary_expression", "binary_expression", "parenthesized_expression",
    "negated_expression", "ternary_expression", "postfix_expression",
})  # fmt: skip

# An integer as bash's arithmetic reads it, with no name in it (``0+v`` evaluates v).
_INTEGER_LITERAL = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]+")


def _odd_backslashes(data: bytes, end: int) -> bool:
    """Whether an odd run of backslashes ends just before ``end`` (escaping data[end])."""
    k = end
    while k > 0 and data[k - 1] == 0x5C:
        k -= 1
    return (end - k) % 2 == 1


_CONTINUATION = re.compile(rb"\\+\n")
_JOINED_LINE = re.compile(r"(?<!\\)((?:\\\\)*)\\\n")


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


# ---------------------------------------------------------------------------
# Entry points


# ---------------------------------------------------------------------------
# The parse worker: long commands are parsed in a child process with a deadline.
#
# tree-sitter-bash's error recovery is quadratic or worse on some input (64 KiB of
# "a | " takes ~9 s, 16 KiB of "[`<do" ~8 s; long pipelines are quadratic even when
# valid). It holds the GIL, and tree-sitter checks its progress callback only
# between parse actions (16 KiB of "a | " once ran 0.86 s past a 50 ms budget; the
# callback above stopped it after ~25 ms, but only short commands rely on it); and on
# some large crafted input the C parser has crashed a whole process (seen once in
# a property test). A command over GUARDED_PARSE_ABOVE bytes, or with many nesting
# openers, is therefore parsed first by a long-lived worker process: started on the
# first such command, fed over a pipe, and killed (then started afresh on the next
# one) when tree-sitter has not finished after ``max_seconds``. Once it has, the
# worker walks its tree and runs R9's agreement check too, and sends back the whole
# ParsedScript (pickled; this process unpickles nothing but the model's NamedTuples).
# Such a command is never parsed in this process: a long parse here, even in a worker
# thread, holds the GIL for tens of milliseconds at a time (64 KiB of words: single
# tree-sitter operations, and the walk's regular expressions over the whole source),
# which is the agent's event loop waiting.

# Above this size a command is parsed in the worker first.
GUARDED_PARSE_ABOVE = 4096
# The worker's program. -I -S, cwd "/" and an empty environment: it must not import
# anything the agent could have written (a tree_sitter.py in the workspace would run
# outside the sandbox). Its path is where this process found tree-sitter, then the
# standard library, then the directory holding this package, last: it imports this
# module the usual way (the package's top levels import nothing themselves).
_GUARD_CODE = (
    "import sys\n"
    "root, *paths = sys.argv[1:]\n"
    "sys.path[:0] = paths\n"
    "sys.path.append(root)\n"
    "from sandbox.bash.syntax.parse import _serve\n"
    "_serve(sys.stdin.buffer, sys.stdout.buffer)\n"
)
# The directory holding the `sandbox` package.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
# Where this process found tree-sitter: the child imports it from there and from
# nowhere else (no current directory, no PYTHONPATH, no site hooks).
_GUARD_PATHS = sorted(
    {
        str(Path(module.__file__).resolve().parent.parent)
        for module in (tree_sitter, tree_sitter_bash)
        if module.__file__
    }
)
_LENGTH = struct.Struct("!I")
# How long a worker may take to start, and to check a tree it has parsed (linear
# work, bounded only against a wedged worker).
_WORKER_START_SECONDS = 10.0
_WORKER_CHECK_SECONDS = 60.0
# How long the next long command waits for a verdict nobody asked for before it
# replaces the worker (starting one costs ~40 ms).
_UNASKED_VERDICT_SECONDS = 0.02


# Bytes that open a nesting level somewhere in bash's grammar. A short command with
# hundreds of them is crafted, not typed: it goes through the worker too, since
# deep nesting is where a C parser's recursion is likeliest to run out of stack.
_OPENERS = (b"(", b"{", b"`", b"<", b"[")
GUARDED_OPENERS_ABOVE = 256


def _needs_guard(data: bytes) -> bool:
    if len(data) > GUARDED_PARSE_ABOVE:
        return True
    return sum(data.count(o) for o in _OPENERS) > GUARDED_OPENERS_ABOVE


def _serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """The worker's loop: read a command (its max_depth, then its UTF-8 bytes), reply
    "P" as soon as tree-sitter has parsed it, then "S" + the pickled ParsedScript of
    `_parse_tree` on that tree (walk and R9 included), or "E" + an error. Ends at
    EOF."""
    replies.write(b"R")
    replies.flush()
    while True:
        header = requests.read(_LENGTH.size * 2)
        if len(header) < _LENGTH.size * 2:
            return
        size, max_depth = _LENGTH.unpack_from(header), _LENGTH.unpack_from(header, 4)
        data = requests.read(size[0])
        if len(data) < size[0]:
            return
        root = _parser().parse(data).root_node
        replies.write(b"P")
        replies.flush()
        try:
            script = _parse_tree(data.decode("utf-8"), data, max_depth[0], check_agreement,
                                 root=root)  # fmt: skip
            reply = b"S" + _pickled(script)
        except Exception as exc:  # a bug: reported to the caller, which fails closed
            reply = b"E" + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
        replies.write(_LENGTH.pack(len(reply)) + reply)
        replies.flush()


# What the worker's reply may hold: this module's model, nothing else (pickle would
# otherwise build any object a compromised worker named).
_MODEL = ("Word", "Assignment", "SimpleCommand", "Operator", "Redirect", "Finding",
          "ParsedScript")  # fmt: skip


class _ModelUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if module == __name__ and name in _MODEL:
            found: type = globals()[name]
            return found
        raise pickle.UnpicklingError(f"the parse worker sent {module}.{name}")


# Unpickling holds the GIL for as long as one pickle takes (a script of 32,000
# commands: ~25 ms of CPU, ~180 ms of the event loop waiting on this machine), so the
# worker pickles a script in pieces of at most this many items (commands, or the
# words of one command), and the agent loads them one by one.
_ITEMS_PER_PICKLE = 256


def _dumps(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _pickled(script: ParsedScript) -> bytes:
    """``script`` as pieces: per field, ("v", a pickle) or ("t", runs of its items),
    a run being ("i", a pickled tuple of items) or, for a command of many words,
    ("w", the command without its words, [pickled tuples of its words])."""
    fields: list[tuple[str, object]] = []
    for value in script:
        if type(value) is not tuple:
            fields.append(("v", _dumps(value)))
            continue
        runs: list[tuple[object, ...]] = []
        pending: list[object] = []
        for item in value:
            if type(item) is SimpleCommand and len(item.words) > _ITEMS_PER_PICKLE:
                if pending:
                    runs.append(("i", _dumps(tuple(pending))))
                    pending = []
                words = item.words
                runs.append(("w", _dumps(item._replace(words=())), [
                    _dumps(words[i : i + _ITEMS_PER_PICKLE])
                    for i in range(0, len(words), _ITEMS_PER_PICKLE)]))  # fmt: skip
                continue
            pending.append(item)
            if len(pending) == _ITEMS_PER_PICKLE:
                runs.append(("i", _dumps(tuple(pending))))
                pending = []
        if pending:
            runs.append(("i", _dumps(tuple(pending))))
        fields.append(("t", runs))
    return _dumps(fields)


def _unpickled(data: bytes) -> ParsedScript:
    """The script `_pickled` made, loaded a piece at a time (the interpreter can hand
    the GIL to another thread between pieces). Raises on anything else."""

    def load(piece: Any) -> Any:
        if type(piece) is not bytes:
            raise pickle.UnpicklingError("the parse worker sent a malformed reply")
        return _ModelUnpickler(io.BytesIO(piece)).load()

    fields: list[Any] = []
    for kind, payload in load(data):
        if kind == "v":
            fields.append(load(payload))
            continue
        items: list[object] = []
        for run in payload:
            if run[0] == "i":
                items.extend(load(run[1]))
                continue
            command = load(run[1])
            words: list[Word] = []
            for piece in run[2]:
                words.extend(load(piece))
            if type(command) is not SimpleCommand:
                raise pickle.UnpicklingError("the parse worker sent a malformed reply")
            items.append(command._replace(words=tuple(words)))
        fields.append(tuple(items))
    return ParsedScript(*fields)


def _read(fd: int, size: int, deadline: float) -> bytes | None:
    """``size`` bytes from ``fd`` (fewer at EOF), or None when ``deadline`` passes first."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    wanted = size
    while wanted:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(fd, wanted)
        if not chunk:
            break
        chunks.append(chunk)
        wanted -= len(chunk)
    return b"".join(chunks)


class _ParseWorker:
    """One worker process, its pipes, and what it was started from."""

    def __init__(self) -> None:
        self.code = _GUARD_CODE
        self.owner = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", self.code, _PACKAGE_ROOT, *_GUARD_PATHS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd="/", env={}, bufsize=0,
        )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin
        self.replies = self.process.stdout.fileno()
        self.reply_due = False  # a parsed command's script is still to be read

    def ended(self) -> str:
        """Reap the worker after EOF: "crashed" when a signal ended it."""
        self.stop()
        code = self.process.returncode
        return "crashed" if code is not None and code < 0 else "unavailable"

    def overran(self) -> str:
        self.stop()
        return "slow"

    def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def started(self) -> str:
        ready = _read(self.replies, 1, time.monotonic() + _WORKER_START_SECONDS)
        if ready == b"R":
            return "ok"
        if ready is None:
            return self.overran()
        return self.ended()

    def parse(self, data: bytes, max_depth: int, seconds: float) -> str:
        """Send ``data``: "parsed" once tree-sitter is done with it there, or "slow",
        "crashed", "unavailable" (the worker is stopped)."""
        try:
            self.requests.write(_LENGTH.pack(len(data)) + _LENGTH.pack(max_depth) + data)
        except OSError:  # it died since the last command
            return self.ended()
        first = _read(self.replies, 1, time.monotonic() + seconds)
        if first is None:
            return self.overran()
        if first != b"P":
            return self.ended()
        self.reply_due = True
        return "parsed"

    def script(self) -> ParsedScript:
        """The ParsedScript of the command last parsed (walked, R9 checked there)."""
        self.reply_due = False
        deadline = time.monotonic() + _WORKER_CHECK_SECONDS
        header = _read(self.replies, _LENGTH.size, deadline)
        reply = None
        if header is not None and len(header) == _LENGTH.size:
            (size,) = _LENGTH.unpack(header)
            reply = _read(self.replies, size, deadline)
            if reply is not None and len(reply) < size:
                reply = None
        if not reply:
            self.stop()
            raise RuntimeError("the parse worker ended or stalled while walking the command")
        if reply[:1] == b"S":
            try:
                return _unpickled(reply[1:])
            except Exception as exc:  # not what _pickled makes: fail closed
                self.stop()
                raise RuntimeError(f"the parse worker sent a malformed parse: {exc}") from None
        raise RuntimeError(f"the parse worker failed: {reply[1:].decode('utf-8', 'replace')}")

    def settled(self) -> bool:
        """Whether the worker can take a command: no reply is left unread (one is only
        when the caller failed between the parse and its script), or the one left
        arrives within _UNASKED_VERDICT_SECONDS and is read now; otherwise the caller
        replaces the worker (~40 ms)."""
        if not self.reply_due:
            return True
        poller = select.poll()
        poller.register(self.replies, select.POLLIN)
        if not poller.poll(_UNASKED_VERDICT_SECONDS * 1000):
            return False
        try:
            self.script()
        except (RuntimeError, pickle.UnpicklingError):
            return False
        return True


_worker: _ParseWorker | None = None
_worker_lock = threading.Lock()


def _forget_worker_after_fork() -> None:
    """A forked child neither shares nor stops its parent's worker: it closes its
    copies of the pipes and starts its own when it needs one."""
    global _worker, _worker_lock
    if _worker is not None:
        for pipe in (_worker.process.stdin, _worker.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
    _worker = None
    _worker_lock = threading.Lock()


def _stop_worker() -> None:
    global _worker
    worker, _worker = _worker, None
    if worker is not None and worker.owner == os.getpid():
        try:
            worker.requests.close()  # EOF: it exits
            worker.process.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        worker.stop()


if hasattr(os, "register_at_fork"):  # not on Windows, where nothing forks
    os.register_at_fork(after_in_child=_forget_worker_after_fork)
atexit.register(_stop_worker)


def _ready_worker() -> _ParseWorker | str:
    """The worker, started if need be (call with _worker_lock held): or "slow",
    "crashed" or "unavailable" (no worker could be run, e.g. an embedded
    interpreter) when none could be started."""
    global _worker
    worker = _worker
    if worker is not None and (
        worker.code != _GUARD_CODE
        or worker.owner != os.getpid()
        or worker.process.poll() is not None  # ended since the last command
        or not worker.settled()
    ):
        if worker.owner == os.getpid():
            worker.stop()
        worker = _worker = None
    if worker is None:
        try:
            worker = _ParseWorker()
        except (OSError, ValueError, TypeError):  # no usable interpreter
            return "unavailable"
        state = worker.started()
        if state != "ok":
            return state
        _worker = worker
    return worker


# A one-line command of plain words: printable ASCII other than bash's quoting,
# expansion, glob, brace, operator and comment characters, separated by blanks.
_PLAIN_CHARS = "%+,\\-./0-9:=@A-Z^_a-z"
_PLAIN_SOURCE = re.compile(
    rf"[ \t\n]*+([{_PLAIN_CHARS}]+(?:[ \t]+[{_PLAIN_CHARS}]+)*)[ \t\n]*"
)


def _plain_script(source: str, match: re.Match[str], max_depth: int) -> ParsedScript | None:
    """The parse of a source of plain words (``git status``), or None to take the
    general path.

    tree-sitter-bash still reads the source; when its tree is exactly one command
    whose children are a command name and words (or numbers) over the blank-separated spans of
    the source, the general path (the walk's plain-command case, no expansion, line
    join or control character to check, and a tree R9 accepts leaf by leaf: every
    leaf a word of plain characters, blanks between) yields this script, so it is
    built directly. Any other tree (``x =~ y`` reads a regex, ``a=b`` an assignment,
    a syntax error) goes the general way. A rule that ever refuses a plain word
    must be taught here too: tests/bash/syntax/test_parse_paths.py compares both paths."""
    if max_depth < 2:
        return None
    data = source.encode("ascii")
    # No deadline here (it costs ~3 µs, a sixth of this path): blank-separated words of
    # these characters, at most 4,096 bytes of them, need no error recovery; the worst
    # of 3,000 random and crafted ones parsed in 0.11 ms.
    root = _parser().parse(data).root_node
    if root.child_count != 1:
        return None
    command = root.children[0]
    if command.kind_id not in _COMMAND:
        return None
    start = match.start(1)
    text = match.group(1)
    words = _BLANKS.split(text)
    parts = command.children
    if len(parts) != len(words) or command.start_byte != start or command.end_byte != match.end(1):
        return None
    name = parts[0]
    if name.kind_id not in _COMMAND_NAME or name.child_count != 1:
        return None
    leaf = name.children[0]
    if leaf.kind_id not in _WORD or leaf.start_byte != start or leaf.end_byte != name.end_byte:
        return None
    at = start
    for word, part in zip(words, parts, strict=True):
        if part.start_byte != at or part.end_byte != at + len(word):
            return None
        if part is not name and part.kind_id not in _WORD and (
            part.kind_id not in _NUMBER or part.child_count
        ):
            return None
        at = part.end_byte
        blanks = _BLANKS.match(text, at - start)
        if blanks is not None:
            at += blanks.end() - blanks.start()
    built = SimpleCommand(
        "command", tuple([_new(Word, (w, w, w, True, *_WORD_TAIL)) for w in words]), (), text, start
    )
    return ParsedScript(source, (built,), (), (), (), (), (), 2)


def parse(
    source: str, *, max_bytes: int = 65536, max_depth: int = 100, max_seconds: float = 1.0
) -> ParsedScript:
    """Parse ``source`` as bash. Never raises for any string; whatever cannot be
    decided on safely is reported in ``findings``. A source longer than
    GUARDED_PARSE_ABOVE bytes (or with many nesting openers) is parsed in a worker
    process, which is killed when tree-sitter is not done after ``max_seconds``; in
    this process too, tree-sitter stops at ``max_seconds`` (the command is refused).
    Inside `loop_budget`, raises `ParseOffLoop` instead of parsing a command the
    budget does not cover."""
    if _budget.deadline is not None and len(source) > _budget.max_bytes:
        raise ParseOffLoop
    if len(source) <= GUARDED_PARSE_ABOVE and len(source) <= max_bytes:
        plain = _PLAIN_SOURCE.fullmatch(source)
        if plain is not None:
            script = _plain_script(source, plain, max_depth)
            if script is not None:
                return script
    return _parse_general(source, max_bytes, max_depth, max_seconds)


def _parse_general(
    source: str, max_bytes: int, max_depth: int, max_seconds: float
) -> ParsedScript:
    """parse() past the plain-words case."""
    global _worker

    def early(rule: str, message: str, token: str | None = None, at: int = 0) -> ParsedScript:
        return ParsedScript(source, (), (), (), (), (), (Finding(rule, message, token, at),), 0)

    if "\x00" in source:
        return early("R6", "the command holds a NUL byte, which bash cannot receive", "\\0")
    if len(source) > max_bytes:
        return early("R6", f"the command is longer than {max_bytes} bytes")
    if source and max(source) >= _FIRST_UNPARSEABLE:
        at = next(i for i, ch in enumerate(source) if ch >= _FIRST_UNPARSEABLE)
        return early(
            "R6",
            f"the command holds U+{ord(source[at]):04X}, a character from Unicode planes "
            "3-16, which the bash parser mishandles; remove it or write it as an escape "
            "inside $'...'",
            f"U+{ord(source[at]):04X}",
            at,
        )
    try:
        data = source.encode("utf-8")
    except UnicodeEncodeError:
        return early("R6", "the command is not valid Unicode (it holds a lone surrogate)")
    if len(data) > max_bytes:
        return early("R6", f"the command is longer than {max_bytes} bytes")
    if not _needs_guard(data):
        return _parse_tree(source, data, max_depth, check_agreement, max_seconds)
    if _budget.deadline is not None:
        raise ParseOffLoop  # the worker's answer is not waited for on a loop
    with _worker_lock:
        worker = _ready_worker()
        state = worker if isinstance(worker, str) else worker.parse(data, max_depth, max_seconds)
        if state == "parsed":
            assert isinstance(worker, _ParseWorker)
            return worker.script()
        _worker = None  # stopped, or never started: the next long command starts one
    if state == "crashed":
        return early(
            "R6",
            "tree-sitter-bash crashed parsing this command (tried in a separate process); "
            "fix its syntax or shorten it",
        )
    if state == "slow":
        return early("R6", _slow_message(max_seconds))
    # "unavailable": no worker could be run (an embedded interpreter), or it could
    # not import the parser; nothing was learnt, and the command is parsed here.
    return _parse_tree(source, data, max_depth, check_agreement, max_seconds)


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


_PREFIX_SPECIAL = re.compile(r"""[\\'"$`;&|<>(){}*?~#=]""")


def parse_prefix(text: str) -> tuple[str, ...]:
    """Split an allowed-prefix entry such as ``"git status"`` into literal words.

    Raises ValueError naming the problem when the entry is not a single simple
    command made of literal words.
    """
    if not _PREFIX_SPECIAL.search(text):
        # Plain words, including ones bash's grammar would not start a command
        # with on their own, such as "[".
        plain = tuple(text.split())
        if plain and not any(_is_control(c) for c in text):
            return plain
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
