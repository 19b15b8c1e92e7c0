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
at a deadline (`sandbox.bash.syntax.guard`), and every parse in this process
stops at a deadline too (`sandbox.bash.syntax.grammar`).

This module holds the entry points (`parse`, its plain-words fast path, `parse_prefix`);
the model is in `model`, words in `words`, the walk in `walk` and `script`.
"""

from __future__ import annotations

import re

from sandbox.bash.syntax.agreement import check_agreement
from sandbox.bash.syntax.grammar import (
    _BLANKS,
    _COMMAND,
    _COMMAND_NAME,
    _FIRST_UNPARSEABLE,
    _NUMBER,
    _WORD,
    ParseOffLoop,
    _budget,
    _parser,
    loop_budget,
)
from sandbox.bash.syntax.guard import (
    GUARDED_PARSE_ABOVE,
    _needs_guard,
    parse_in_worker,
)
from sandbox.bash.syntax.model import (
    _WORD_TAIL,
    Assignment,
    Finding,
    Operator,
    ParsedScript,
    Redirect,
    SimpleCommand,
    Word,
    _is_control,
    _new,
    escape_controls,
)
from sandbox.bash.syntax.script import (
    _parse_tree,
    _slow_message,
)
from sandbox.bash.syntax.words import scan_word

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


# ---------------------------------------------------------------------------
# Entry points


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
    state = parse_in_worker(data, max_depth, max_seconds)
    if isinstance(state, ParsedScript):
        return state
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
