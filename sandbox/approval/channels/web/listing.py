"""What the page lists: pending requests a page at a time, each shown within a size cap.

A listing is bounded twice. It holds at most `MAX_LIMIT` requests, and each request is
shown within `DISPLAY_CHARS` characters of arguments (and smaller caps for the hint,
the tool's description and the details): a longer value is cut, marked as cut, and
carries its length and digest, and `full_arguments` gives all of it to a human who asks
(one request at a time). `fit` then trims a page whose encoded size still exceeds
`MAX_BODY_BYTES`, so no listing is ever larger than that, whatever the store holds.

`pending_page` and `pending_window` are the only places that read pending requests from
the store, each one bounded page of `ApprovalStore.list_pending`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sandbox.approval.display import count_controls, escape_pieces, escape_text, rule_subjects_of
from sandbox.approval.explain import explain
from sandbox.approval.models import ConfirmationRequest
from sandbox.approval.store import MAX_PAGE, ApprovalStore, Page

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: Characters of arguments shown on a card before the rest is cut (expand to see all).
DISPLAY_CHARS = 4000
#: Characters of one string value in JSON arguments, so that every key stays in view.
VALUE_CHARS = 600
#: Characters of the hint, of the tool's description and of each detail or payload.
TEXT_CHARS = 1000
DETAILS_CHARS = 2000
#: No listing body is larger than this, however many or large the requests.
MAX_BODY_BYTES = 1024 * 1024
#: Control characters are counted in at most this many characters of arguments.
_COUNT_CHARS = 256 * 1024

_ASCII_CONTROLS = re.compile(r"[\x00-\x1f\x7f]")
_ASCII_CONTROLS_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# -- paging --------------------------------------------------------------------------

#: Pending requests the event stream follows by id (the oldest ones); beyond them it
#: follows only their number. A page showing more than these learns of their answers
#: when it looks again (a request answered twice is refused, never run twice).
WATCH_WINDOW = MAX_LIMIT


def pending_page(store: ApprovalStore, *, limit: int, after: str | None = None,
                 session_id: str | None = None) -> Page:
    """Up to ``limit`` pending requests after request ``after``, oldest first: one
    `list_pending` page from the store (never every pending request)."""
    return store.list_pending(limit=min(limit, MAX_PAGE), after=after, session_id=session_id)


def pending_window(store: ApprovalStore) -> tuple[list[str], int]:
    """The ids of the oldest `WATCH_WINDOW` pending requests, and how many are pending."""
    page = store.list_pending(limit=WATCH_WINDOW)
    return [r.id for r in page.items], page.total


_CURSOR = re.compile(r"[A-Za-z0-9_-]{1,200}")


def encode_cursor(request_id: str) -> str:
    """The ``next`` of a listing: where the following page starts (opaque to clients)."""
    return base64.urlsafe_b64encode(request_id.encode()).decode().rstrip("=")


def decode_cursor(text: str) -> str:
    """The request id a listing's ``next`` names; ValueError for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("after must be the 'next' value of a previous listing") from None
    if not _CURSOR.fullmatch(raw):
        raise ValueError("after must be the 'next' value of a previous listing")
    return raw


# -- one request, as a card shows it ---------------------------------------------------

@dataclass(frozen=True)
class Shown:
    """A text cut to a cap: escaped pieces, and how much was left out."""

    pieces: list[list[Any]]
    chars: int
    truncated: bool


def _pieces(text: str, *, layout_newlines: bool) -> list[list[Any]]:
    """[text, escaped] runs; with ``layout_newlines`` a newline stays a line break (JSON
    layout: json.dumps writes a newline inside a string as ``\\n``)."""
    out: list[list[Any]] = []
    lines = text.split("\n") if layout_newlines else [text]
    for number, line in enumerate(lines):
        if number:
            out.append(["\n", False])
        out.extend([p.text, p.escaped] for p in escape_pieces(line))
    return out


def _cut(text: str, cap: int, *, layout_newlines: bool = False) -> Shown:
    return Shown(_pieces(text[:cap], layout_newlines=layout_newlines), len(text), len(text) > cap)


def _cut_text(text: str, cap: int) -> dict[str, Any]:
    """A plain text (hint, description, a detail) cut and escaped: its escaped ``text``,
    the same as ``pieces`` (to highlight what was escaped), ``chars`` and ``truncated``."""
    pieces = _pieces(text[:cap], layout_newlines=False)
    return {"text": "".join(p[0] for p in pieces), "pieces": pieces, "chars": len(text),
            "truncated": len(text) > cap}


def _controls(args: Any, *, layout: bool) -> tuple[int, bool]:
    """Control characters in the keys and string values of ``args``, counted within the
    first `_COUNT_CHARS` characters; True when the count stopped there (at least).

    ``layout=False`` (a command line) counts every one; ``layout=True`` (JSON values:
    file contents, messages) leaves out newlines and tabs, which are ordinary there and
    which JSON shows as ``\\n`` and ``\\t`` anyway."""
    pattern = _ASCII_CONTROLS_BUT_LAYOUT if layout else _ASCII_CONTROLS
    total = 0
    budget = _COUNT_CHARS
    stack: list[Any] = [args]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            part = value[:budget]
            budget -= len(part)
            if part.isascii():
                total += len(pattern.findall(part))
            else:
                total += count_controls(part)
                if layout:
                    total -= part.count("\n") + part.count("\t")
            if budget <= 0:
                return total, True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return total, False


def args_text(req: ConfirmationRequest) -> tuple[str, bool]:
    """The arguments as a human reads them: the command line of a command-only call
    (raw, to be escaped), else pretty JSON; and whether it is a command."""
    command = req.args.get("command")
    if isinstance(command, str) and set(req.args) == {"command"}:
        return command, True
    return json.dumps(req.args, indent=2, sort_keys=True, ensure_ascii=False, default=repr), False


def _detail_text(value: Any) -> dict[str, Any]:
    text = value if isinstance(value, str) else json.dumps(
        value, sort_keys=True, ensure_ascii=False, default=repr)
    return _cut_text(text, DETAILS_CHARS)


def _shown_json(args: dict[str, Any]) -> Shown:
    """Pretty JSON of ``args`` with each long string value shortened (marked as cut, and
    how much), then the whole cut to `DISPLAY_CHARS`: a 45 KB file body does not push
    the file's path out of view. A marker is a piece ``[text, "cut"]``, never text a
    model could forge: it is found by a random nonce."""
    nonce = secrets.token_hex(8)
    cut = False

    def shorten(value: Any) -> Any:
        nonlocal cut
        if isinstance(value, str) and len(value) > VALUE_CHARS:
            cut = True
            return f"{value[:VALUE_CHARS]}@@{nonce}:{len(value) - VALUE_CHARS}@@"
        if isinstance(value, dict):
            return {k: shorten(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shorten(v) for v in value]
        return value

    full = json.dumps(args, indent=2, sort_keys=True, ensure_ascii=False, default=repr)
    text = json.dumps(shorten(args), indent=2, sort_keys=True, ensure_ascii=False,
                      default=repr)
    if len(text) > DISPLAY_CHARS:
        end = DISPLAY_CHARS
        marker = text.rfind(f"@@{nonce}:", 0, end)
        if marker != -1 and text.find("@@", marker + 2) + 2 > end:
            end = marker  # not through a marker
        text, cut = text[:end] + f"@@{nonce}:{len(text) - end}@@", True
    pieces: list[list[Any]] = []
    for n, part in enumerate(re.split(f"@@{nonce}:([0-9]+)@@", text)):
        if n % 2:
            pieces.append([f"… ⟨{int(part):,} more characters⟩", "cut"])
        elif part:
            pieces.extend(_pieces(part, layout_newlines=True))
    return Shown(pieces, len(full), cut)


def present(req: ConfirmationRequest) -> dict[str, Any]:
    """A request as a card shows it: every text escaped and cut to its cap.

    ``args`` (the raw arguments, for the editor and for scripts) is included only when
    its text fits the cap; otherwise ``args_truncated`` is set and `full_arguments`
    gives them.
    """
    text, is_command = args_text(req)
    shown = _cut(text, DISPLAY_CHARS) if is_command else _shown_json(req.args)
    controls, counted_part = _controls(req.args, layout=not is_command)
    command = req.args.get("command")
    said = explain(req)
    # A bash request's policy verdict, parsed commands and workspace are said in words
    # ("what", "why"); the raw decision stays in the store and the audit log.
    said_in_words = ("policy", "commands", "workspace") if "policy" in req.details else ()
    details = {k: v for k, v in req.details.items()
               if k not in ("rule_subjects", "tool_description", *said_in_words)}
    if req.payload is not None:
        details["payload"] = req.payload
    subjects = rule_subjects_of(req)
    description = req.details.get("tool_description")
    return {
        "id": req.id,
        "call_id": escape_text(req.call_id),
        "session_id": None if req.session_id is None else escape_text(req.session_id),
        "tool": escape_text(req.tool),
        "description": _cut_text(description, TEXT_CHARS) if isinstance(description, str)
        else None,
        "kind": req.kind,
        "hint": _cut_text(req.hint, TEXT_CHARS),
        "what": _cut_text(said.what, TEXT_CHARS),
        "why": _cut_text(said.why, TEXT_CHARS),
        "who": _cut_text(said.who, TEXT_CHARS),
        "args_pieces": shown.pieces,
        "args_chars": shown.chars,
        "args_truncated": shown.truncated,
        "digest": req.digest,
        "is_command": isinstance(command, str),
        "command": command if isinstance(command, str) and not shown.truncated else None,
        "args": None if shown.truncated else req.args,
        "details": {escape_text(str(k))[:200]: _detail_text(v)
                    for k, v in list(details.items())[:20]},
        "control_characters": controls,
        "control_characters_at_least": counted_part,
        # An editor shows text raw: offered only when nothing in it needs escaping
        # (newlines and tabs aside), so what a human edits is what they see.
        "editable": _controls(req.args, layout=True) == (0, False),
        "rule_subjects": subjects if _fits(subjects) else None,
        "rule_subjects_shown": _shown_subjects(subjects) if _fits(subjects) else None,
        "rule_subjects_count": None if subjects is None else len(subjects),
        "edited_from": req.edited_from,
        "created_at": req.created_at.isoformat(),
        "expires_at": req.expires_at.isoformat() if req.expires_at else None,
    }


def _shown_subjects(subjects: list[list[str]] | None) -> list[list[str]] | None:
    return None if subjects is None else [[escape_text(w) for w in argv] for argv in subjects]


def _fits(subjects: list[list[str]] | None) -> bool:
    """Parsed commands are sent whole or not at all (a rule must cover each one, so a
    cut list could not be saved): not at all when longer than the arguments' cap."""
    return subjects is None or sum(len(w) + 1 for argv in subjects for w in argv) <= DISPLAY_CHARS


def full_arguments(req: ConfirmationRequest) -> dict[str, Any]:
    """All of a request's arguments: escaped pieces to read, raw values to edit."""
    text, is_command = args_text(req)
    controls, _ = _controls(req.args, layout=not is_command)
    command = req.args.get("command")
    return {
        "id": req.id,
        "digest": req.digest,
        "is_command": isinstance(command, str),
        "command": command if isinstance(command, str) else None,
        "args": req.args,
        "args_pieces": _pieces(text, layout_newlines=not is_command),
        "args_chars": len(text),
        "control_characters": controls,
        "rule_subjects": rule_subjects_of(req),
        "rule_subjects_shown": _shown_subjects(rule_subjects_of(req)),
    }


def fit(cards: list[dict[str, Any]], limit_bytes: int = MAX_BODY_BYTES) -> int:
    """How many of ``cards`` fit in a body of ``limit_bytes`` (at least one)."""
    used = 200  # the envelope: count, next, more
    for n, card in enumerate(cards):
        used += len(json.dumps(card, ensure_ascii=False).encode()) + 1
        if used > limit_bytes and n > 0:
            return n
    return len(cards)


class Presented:
    """Cards already built, by request id: a request never changes once parked."""

    def __init__(self, size: int = 2000) -> None:
        self.size = size
        self._cards: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def card(self, req: ConfirmationRequest) -> dict[str, Any]:
        card = self._cards.get(req.id)
        if card is None:
            card = present(req)
            self._cards[req.id] = card
            if len(self._cards) > self.size:
                self._cards.popitem(last=False)
        else:
            self._cards.move_to_end(req.id)
        return card
