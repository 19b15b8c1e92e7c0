"""What a human is shown when asked to approve a call, in one place for every channel.

Arguments come from a model, so they are hostile text. Every control character is shown
escaped (``\\r``, ``\\x1b``, ``\\u202e``): a carriage return cannot redraw the line, an
ANSI escape cannot recolour or hide text, a bidi override cannot reorder it. The
terminal, the web page and the audit log all start from `escape_text`, so what the
audit records as shown is what was shown.
"""

from __future__ import annotations

import importlib
import json
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the bash tool imports this module (its highlighter)
    from sandbox.approval.models import ConfirmationRequest

# Characters that are not control characters by category but can still change what a
# line looks like: zero-width characters, bidi marks and overrides, line separators.
_INVISIBLE = frozenset(
    "\u00ad\u061c\u115f\u1160\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c"
    "\u202d\u202e\u2028\u2029\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069"
    "\u3164\ufeff\uffa0"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b", "\x00": "\\0"}


def needs_escape(ch: str) -> bool:
    """True for a character that must never reach a screen as itself."""
    if ch in _INVISIBLE:
        return True
    category = unicodedata.category(ch)
    # Cc: C0/C1 controls and DEL; Cf: format characters (bidi, zero-width);
    # Co/Cn/Cs: private use, unassigned, lone surrogates.
    return category in ("Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp")


def escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


@dataclass(frozen=True)
class Piece:
    """A run of text, either printable as is or the escaped form of control characters."""

    text: str
    escaped: bool


def escape_pieces(text: str) -> Iterator[Piece]:
    """Split `text` into printable runs and escaped control characters."""
    run: list[str] = []
    for ch in text:
        if needs_escape(ch):
            if run:
                yield Piece("".join(run), False)
                run = []
            yield Piece(escape_char(ch), True)
        else:
            run.append(ch)
    if run:
        yield Piece("".join(run), False)


def escape_text(text: str) -> str:
    """`text` with every control character replaced by its escape: safe on any screen."""
    return "".join(p.text for p in escape_pieces(text))


def count_controls(text: str) -> int:
    return sum(1 for ch in text if needs_escape(ch))


def command_of(args: dict[str, Any]) -> str | None:
    """The shell command a call carries, if its arguments are ``{"command": str, ...}``."""
    command = args.get("command")
    return command if isinstance(command, str) else None


def render_args(args: dict[str, Any]) -> str:
    """The arguments as one escaped text: the command line for a shell call, else JSON."""
    command = command_of(args)
    if command is not None and set(args) == {"command"}:
        return escape_text(command)
    return "".join(p.text for p in json_pieces(args))


def json_pieces(args: dict[str, Any]) -> Iterator[Piece]:
    """Pretty JSON of `args`, escaped. Its line breaks are layout (json.dumps writes a
    newline inside a string as ``\\n``), so they stay line breaks; everything else that
    json.dumps leaves raw (C1 controls, bidi, zero-width characters) is escaped."""
    text = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=repr)
    for number, line in enumerate(text.split("\n")):
        if number:
            yield Piece("\n", False)
        yield from escape_pieces(line)


def rule_subjects_of(request: ConfirmationRequest) -> list[list[str]] | None:
    """The parsed simple commands the runner attached to a request (see `BaseTool.rule_subjects`)."""
    subjects = request.details.get("rule_subjects")
    if not isinstance(subjects, list):
        return None
    out: list[list[str]] = []
    for argv in subjects:
        if not isinstance(argv, list) or not all(isinstance(w, str) for w in argv):
            return None
        out.append(list(argv))
    return out


def visible_details(request: ConfirmationRequest) -> dict[str, Any]:
    """The facts to show beside the arguments (the policy decision, and the payload a tool
    asked about from inside), minus plumbing."""
    facts = {k: v for k, v in request.details.items()
             if k not in ("rule_subjects", "tool_description")}
    if request.payload is not None:
        facts["payload"] = request.payload
    return facts


def shown(request: ConfirmationRequest, args: dict[str, Any] | None = None,
          rendered: str | None = None) -> dict[str, Any]:
    """What every channel shows a human for `request`, as recorded in the audit log.

    ``args`` replaces the request's arguments (the audit passes them redacted);
    ``rendered`` is the tool's own rendering of them (`BaseTool.render_args`).
    """
    shown_args = request.args if args is None else args
    text = escape_text(rendered) if rendered is not None else render_args(shown_args)
    return {
        "tool": escape_text(request.tool),
        "args": text,
        "hint": escape_text(request.hint),
        "details": _escape_tree(visible_details(request)),
        "control_characters": _controls_in(shown_args),
    }


def _controls_in(args: dict[str, Any]) -> int:
    """Control characters in the keys and string values of `args`."""
    total = 0
    stack: list[Any] = [args]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            total += count_controls(value)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return total


def _escape_tree(value: Any) -> Any:
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {escape_text(str(k)): _escape_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escape_tree(v) for v in value]
    return value


# -- terminal colours and highlighters (ANSI) ----------------------------------------

RESET = "\x1b[0m"
BOLD = "\x1b[1m"
REVERSE = "\x1b[7m"
#: Highlighters a tool layer registers for the text its tools render (`BaseTool.render_args`):
#: the bash layer registers "bash" (`sandbox.bash.display`). The gate knows none itself.
_HIGHLIGHTERS: dict[str, Callable[[str, bool], str]] = {}
#: Where the package's own highlighters register themselves, imported the first time
#: their syntax is asked for: the package's top level imports nothing
#: (docs/architecture.md), so a tool that renders "bash" without the bash layer having been
#: imported (a FunctionTool of the user's) still gets its colours. A name, not an
#: import: the gate does not depend on the bash layer.
_SHIPPED_HIGHLIGHTERS = {"bash": "sandbox.bash.display"}


def register_highlighter(syntax: str, highlight: Callable[[str, bool], str]) -> None:
    """Colour text of ``syntax`` for a terminal with ``highlight(text, colour)``; it must
    escape control characters as `terminal_text` does."""
    _HIGHLIGHTERS[syntax] = highlight


def highlight(text: str, syntax: str, *, colour: bool = True) -> str:
    """``text`` for a terminal, coloured by the highlighter registered for ``syntax``
    (plain `terminal_text` when none is)."""
    fn = _HIGHLIGHTERS.get(syntax)
    if fn is None and syntax in _SHIPPED_HIGHLIGHTERS:
        importlib.import_module(_SHIPPED_HIGHLIGHTERS[syntax])  # registers itself
        fn = _HIGHLIGHTERS.get(syntax)
    return fn(text, colour) if fn is not None else terminal_text(text, colour=colour)


def highlight_bash(command: str, *, colour: bool = True) -> str:
    """A shell command for a terminal (the highlighter ``sandbox.bash`` registers)."""
    return highlight(command, "bash", colour=colour)


def terminal_text(text: str, *, colour: bool = True) -> str:
    """Any model-provided text for a terminal: escaped, escapes in reverse video."""
    if not colour:
        return escape_text(text)
    return "".join(
        f"{REVERSE}{p.text}{RESET}" if p.escaped else p.text for p in escape_pieces(text)
    )
