"""The approvals page: one HTML shell, one script, one stylesheet, served from the package.

The script builds every element with ``createElement`` and ``textContent``: text that
came from a model is never parsed as HTML, and arrives already escaped by the server
(control characters as ``\\r``, ``\\u202e``...). There is no inline script or style, so
the Content-Security-Policy can forbid both. ``{csrf}`` and ``{identity}`` are filled in
by the server (the identity HTML-escaped).

The page lists a page of requests, then follows ``/api/events`` (server-sent events) and
fetches only what changed: new requests after the last one it shows, the full
arguments of one request when asked. It never re-reads the whole list on a timer.

The three files are in ``static/`` next to this module, read once at import.
"""

from importlib.resources import files

_STATIC = files(__package__) / "static"

PAGE_HTML = (_STATIC / "page.html").read_text(encoding="utf-8")
APP_JS = (_STATIC / "app.js").read_text(encoding="utf-8")
APP_CSS = (_STATIC / "app.css").read_text(encoding="utf-8")

__all__ = ["APP_CSS", "APP_JS", "PAGE_HTML"]
