"""What a parse yields: the model of a bash script a policy decides on (NamedTuples:
immutable, and cheap to build by the hundred per script), and control characters (R8)."""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

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


