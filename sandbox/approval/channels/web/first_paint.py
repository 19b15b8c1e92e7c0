"""The pending cards in the page's first response, rendered on the server.

Without them the page's first paint said only "connecting…": cards arrived once the
script had opened the event stream and fetched a listing, so a screenshot, a slow link,
a text browser or a browser with scripts off showed an empty page. The first response
now holds the first page of cards (the same `present` cards the API sends, the same
escaping); the script replaces them with its live cards as soon as its first listing
arrives. Without scripts a card says how to answer it from a shell: the answer endpoint
stays behind the script's CSRF and origin checks (a form post from this page carries
``Origin: null`` under its no-referrer policy, which those checks rightly refuse).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

#: The badge of each kind of request (the script's KINDS).
KINDS = {
    "static": "asks before every call",
    "predicate": "its check asked for approval",
    "tool": "the tool asked from inside",
    "edit": "an edited call, asked again",
}


def render_cards(cards: list[dict[str, Any]]) -> str:
    """HTML for ``cards`` (`listing.present` dicts, plus ``answer``)."""
    return "\n".join(_card(card) for card in cards)


def count_text(total: int) -> str:
    return "1 waiting" if total == 1 else f"{total} waiting"


def _card(card: dict[str, Any]) -> str:
    e = html.escape
    rid = e(card["id"])
    kind = e(KINDS.get(card["kind"], card["kind"]))
    expires = card.get("expires_at")
    parts = [
        f'<article class="request waiting first-paint" data-id="{rid}">',
        '<header class="card-head"><div class="title">'
        f'<h2 class="tool">{e(card["tool"])}</h2><span class="badge">{kind}</span></div>'
        + (f'<span class="expiry">expires {_time(expires)}</span>' if expires else "")
        + "</header>",
        f'<p class="what"><span class="why">What happens: </span>{_text(card["what"])}</p>',
        f'<p class="hint"><span class="why">Why asked: </span>{_text(card["why"])}</p>',
        '<dl class="meta">'
        f'<dt>Asked by</dt><dd>{_text(card["who"])}</dd>'
        f'<dt>Request</dt><dd>{rid}</dd>'
        f'<dt>Asked</dt><dd>{_time(card["created_at"])}</dd>'
        + (f"<dt>Expires</dt><dd>{_time(expires)}</dd>" if expires
           else "<dt>Expires</dt><dd>never: waits until answered</dd>")
        + "</dl>",
        f'<pre class="args">{_pieces(card["args_pieces"])}'
        + (f' … ⟨{card["args_chars"]:,} characters in all⟩' if card["args_truncated"] else "")
        + "</pre>",
    ]
    if card["control_characters"]:
        parts.append(f'<p class="warn">⚠ {card["control_characters"]} control character(s) '
                     "in the arguments, shown escaped and highlighted</p>")
    details = card.get("details") or {}
    if details:
        parts.append('<dl class="details">' + "".join(
            f"<dt>{e(k)}</dt><dd>{_text(v)}</dd>" for k, v in details.items()) + "</dl>")
    if card.get("answer"):
        parts.append('<p class="status">Answered; waiting for the agent to apply it.</p>')
    else:
        parts.append(
            "<noscript><p class=\"note\">Answering on this page needs JavaScript; from a "
            f"shell: <code>sandbox approvals approve {rid}</code> or <code>sandbox approvals "
            f"deny {rid} --reason \u2026</code> (with this page's <code>--store</code>)."
            "</p></noscript>")
    parts.append("</article>")
    return "\n".join(parts)


def _text(shown: Any) -> str:
    """A `listing._cut_text` dict (or a plain string) as HTML, escapes highlighted."""
    if isinstance(shown, dict) and "pieces" in shown:
        text = _pieces(shown["pieces"])
        return text + (" …" if shown.get("truncated") else "")
    return html.escape(str(shown))


def _pieces(pieces: list[list[Any]]) -> str:
    return "".join(f'<span class="{"cut" if escaped == "cut" else "ctl"}">'
                   f"{html.escape(t)}</span>" if escaped else html.escape(t)
                   for t, escaped in pieces)


def _time(iso: str) -> str:
    when = datetime.fromisoformat(iso).astimezone(UTC)
    return (f'<time datetime="{html.escape(iso)}">'
            f"{when:%Y-%m-%d %H:%M:%S} UTC</time>")
