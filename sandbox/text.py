"""Text every store, log, page and host can carry: valid Unicode.

A Python `str` may hold a lone surrogate (U+D800..U+DFFF): a JSON parser makes one from
``"\\ud800"``, and the OS hands undecodable bytes of an argv or a file name over as
U+DC80..U+DCFF (``surrogateescape``). Such a string is not text: UTF-8 cannot encode
it, so SQLite, PostgreSQL, a JSON-lines log, an HTTP body and an MCP host's pipe all
reject it, and a human cannot be shown faithfully what it is.

The gate's decision (one place, `lone_surrogate`): arguments, call ids and session ids
holding one are refused with an error naming where and which code point, before
anything is recorded or digested, so a digest is only ever taken over text (and stays
one-to-one). A bash command is refused the same way by the policy (R6); a byte that is
not UTF-8 is written as an escape bash expands (``printf '\\xff'``). Everything else
that is serialised (results, payloads, a human's reason) goes through
`escape_surrogates`, which writes each lone surrogate as its JSON escape ``\\udcff``:
valid UTF-8, and a distinct text for every distinct value.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def is_text(value: str) -> bool:
    """Whether ``value`` encodes as UTF-8 (holds no lone surrogate). O(1) for ASCII."""
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def escape_surrogates(json_text: str) -> str:
    """``json_text`` (JSON, written with ``ensure_ascii=False``) with every lone surrogate
    written as its JSON escape: the same JSON value, now valid UTF-8.

    Outside strings JSON holds only ASCII, so every surrogate sits inside a string,
    where ``\\uXXXX`` is that same code unit; a backslash the value itself holds is
    already written ``\\\\``, so no two values share an escaped text.
    """
    if is_text(json_text):
        return json_text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


def surrogates_as_text(json_text: str) -> str:
    """``json_text`` with every lone surrogate replaced by the six characters ``\\udcff``
    (a backslash, then ``udcff``): for a reader that only takes text (an MCP host, a
    browser), which then shows what the value held instead of failing on it."""
    if is_text(json_text):
        return json_text
    return _SURROGATE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", json_text)


_NOT_PROSE = re.compile("[\ud800-\udfff\x00]")


def printable(value: str) -> str:
    """``value`` for prose every store can hold (a hint, a reason, a name): each lone
    surrogate and NUL (which PostgreSQL's text refuses) written as ``\\udcff``,
    ``\\u0000``. The text a human reads keeps saying what was there."""
    if "\x00" not in value and is_text(value):
        return value
    return _NOT_PROSE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


def lone_surrogate(value: Any, where: str = "") -> str | None:
    """Where in ``value`` (nested lists, tuples and dicts, to any depth) a string holds
    a lone surrogate, as ``where['key'][3]: U+DCFF at index 1``; None when none does.
    The path is spelled out only for the string found (a linked list until then)."""
    Link = tuple[Any, str] | None
    stack: list[tuple[Any, Link]] = [(value, None)]
    while stack:
        item, link = stack.pop()
        if isinstance(item, str):
            if not is_text(item):
                match = _SURROGATE.search(item)
                assert match is not None
                parts: list[str] = []
                while link is not None:
                    link, label = link
                    parts.append(label)
                path = where + "".join(reversed(parts))
                return (f"{path or 'the value'}: U+{ord(match.group()):04X} at index "
                        f"{match.start()}")
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                stack.append((inner, (link, f"[{printable(str(key))!r}]")))
                if isinstance(key, str) and not is_text(key):
                    stack.append((key, (link, " (a key)")))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, (link, f"[{i}]"))
                         for i, inner in reversed(list(enumerate(item))))
    return None


def not_text_message(what: str, found: str) -> str:
    """The one error for a value that is not text: what, where, why, and the fix."""
    return (
        f"{what} is not valid Unicode text ({found}: a lone surrogate, which is how Python "
        "holds a byte that is not UTF-8 or a JSON \\ud800 escape with no pair); it cannot "
        "be stored, shown to a human or approved. Send text: for bytes, an escape the tool "
        "reads (bash: printf '\\xff') or base64"
    )
