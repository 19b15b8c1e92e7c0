"""tree-sitter-bash itself: the language, a parser per parse, time-bounded parsing (and
parses kept off an event loop), and node kinds as symbol ids."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

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


