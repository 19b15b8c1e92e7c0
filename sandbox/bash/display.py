"""A shell command as a human reads it on a terminal: coloured by token, control
characters escaped. Registered with the gate's display as the "bash" highlighter, so the
approval layer itself knows nothing of shell syntax."""

from __future__ import annotations

import re
from collections.abc import Iterator

from sandbox.approval.display import RESET, REVERSE, escape_pieces, register_highlighter

_COLOURS = {
    "command": "\x1b[1;32m",   # bold green: the program that runs
    "operator": "\x1b[1;33m",  # bold yellow: ; && || | & > ( )
    "string": "\x1b[36m",      # cyan
    "variable": "\x1b[35m",    # magenta: $x, ${x}, $(...)
    "comment": "\x1b[2m",      # dim
    "word": "",
    "space": "",
}
_TOKEN = re.compile(
    r"""
    (?P<space>[ \t]+)
  | (?P<comment>(?<![^\s;&|()])\#[^\n]*)
  | (?P<string>'[^']*'?|"(?:\\.|[^"\\])*"?|\$'(?:\\.|[^'\\])*'?)
  | (?P<variable>\$\{[^}]*\}?|\$\(|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9@*#?$!-]|`)
  | (?P<operator>&&|\|\||;;|[0-9]*>>|[0-9]*>&|[0-9]*>|<<-?|<<<|<&|<|\||&|;|\(|\)|\n)
  | (?P<word>(?:\\.|[^\s'"$`;&|()<>\\])+|\\|\$)
    """,
    re.VERBOSE | re.DOTALL,
)
_COMMAND_START = {"&&", "||", ";;", "|", "&", ";", "(", "\n", "$(", "`"}


def bash_tokens(command: str) -> Iterator[tuple[str, str]]:
    """(kind, text) tokens of a command line; concatenated they are exactly `command`.

    Only for colouring what a human reads: the policy parses with tree-sitter-bash, and
    nothing here decides what runs.
    """
    pos = 0
    expect_command = True
    while pos < len(command):
        m = _TOKEN.match(command, pos)
        if m is None:  # an unmatched character: emit it alone, uncoloured
            yield "word", command[pos]
            pos += 1
            continue
        kind = m.lastgroup or "word"
        text = m.group()
        pos = m.end()
        if kind == "word" and expect_command:
            if "=" in text and not text.startswith("="):
                yield "variable", text  # an assignment before the command
                continue
            kind = "command"
            expect_command = False
        elif kind in ("operator", "variable") and text in _COMMAND_START:
            expect_command = True
        elif kind not in ("space", "comment"):
            expect_command = False
        yield kind, text


def highlight_command(command: str, colour: bool = True) -> str:
    """The command for a terminal: coloured by token, control characters escaped and shown
    in reverse video so they stand out from a literal backslash sequence."""
    out: list[str] = []
    for kind, text in bash_tokens(command):
        start = _COLOURS.get(kind, "") if colour else ""
        for piece in escape_pieces(text):
            if piece.escaped:
                out.append(f"{REVERSE}{piece.text}{RESET}" if colour else piece.text)
                continue
            out.append(f"{start}{piece.text}{RESET}" if start else piece.text)
    return "".join(out)


register_highlighter("bash", highlight_command)
