"""Words: quote removal, and whether bash would expand anything (`scan_word`)."""

from __future__ import annotations

import re

from sandbox.bash.syntax.model import (
    _WORD_TAIL,
    Word,
    _new,
)

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


