"""The approvals page and its JSON API (Starlette).

Security, in the order a request meets it:

- **Host.** Only the loopback names (and the host the server was bound to) are served,
  so a DNS-rebinding page cannot reach the API through another name.
- **Token.** Every request carries the random token printed at start: once as
  ``/?token=...`` (exchanged for an HttpOnly, SameSite=Strict session cookie, then
  redirected away so the token leaves the address bar), or as ``Authorization: Bearer``
  / ``X-Sandbox-Token`` for scripts. Anything else is 401.
- **CSRF.** A request authenticated by the cookie must also carry the session's CSRF
  token (a header or form field), and an ``Origin``/``Sec-Fetch-Site`` that is this
  page's own. Header-token requests need neither: a browser cannot attach that header
  cross-site.
- **Inert text.** The page builds every element with DOM calls and ``textContent``; no
  HTML is ever made from request data, and a strict Content-Security-Policy (no inline
  script, no ``eval``, same-origin only) backs that up.

Answers go through `ApprovalStore.submit_answer` (channel ``web``); the process that
holds the tool applies them. Bodies are bounded; the store does the rest.

Routes (every one behind the Host and token checks above; the event stream too):

- ``GET /api/pending?limit=&after=&unanswered=1&session=``: a page of pending requests,
  bounded in count and bytes (`listing.py`); ``next`` is the cursor for the page after.
- ``GET /api/events``: server-sent events saying what changed (`events.py`).
- ``GET /api/requests/{id}``: one request's card and where it stands;
  ``GET /api/requests/{id}/args``: all of its arguments (cards show them cut).
- ``POST /api/requests/{id}/answer``: approve (once, session, always), deny, edit.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from sandbox.approval.channels.web.assets import APP_CSS, APP_JS, PAGE_HTML
from sandbox.approval.channels.web.events import PendingWatch, answer_view
from sandbox.approval.channels.web.first_paint import count_text, render_cards
from sandbox.approval.channels.web.listing import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Presented,
    decode_cursor,
    encode_cursor,
    fit,
    full_arguments,
    pending_page,
)
from sandbox.approval.display import escape_text, rule_subjects_of
from sandbox.approval.models import ConfirmationRequest, Decision, Remember, RulePattern
from sandbox.approval.rules import check_patterns
from sandbox.approval.store import ApprovalStore
from sandbox.errors import (
    ConfigurationError,
    ConfirmationStateError,
    ConfirmationTimedOutError,
    RuleError,
    UnknownConfirmationError,
)

COOKIE = "sandbox_approvals"
MAX_BODY = 256 * 1024
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def new_token() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class _Caller:
    via: str  # "cookie" | "header"
    session: str | None
    who: str


class _Refused(Exception):
    def __init__(self, code: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


def create_app(store: ApprovalStore, *, token: str, identity: str = "web",
               allowed_hosts: frozenset[str] | set[str] = LOOPBACK) -> Starlette:
    """The page and API over ``store``. ``identity`` names who answers from the page."""
    if len(token) < 16:
        raise ConfigurationError("the access token must be at least 16 characters")
    key = token.encode()
    hosts = frozenset(h.lower() for h in allowed_hosts)

    def sign(purpose: str, session: str) -> str:
        return hmac.new(key, f"{purpose}:{session}".encode(), hashlib.sha256).hexdigest()

    def authenticate(request: Request) -> _Caller | None:
        bearer = request.headers.get("authorization", "")
        offered = bearer[7:] if bearer.lower().startswith("bearer ") else request.headers.get(
            "x-sandbox-token")
        if offered is not None:
            if hmac.compare_digest(offered.encode(), key):
                user = request.headers.get("x-sandbox-user", "").strip()[:80] or "api"
                return _Caller("header", None, f"{escape_text(user)} (web api)")
            return None
        cookie = request.cookies.get(COOKIE, "")
        session, _, signature = cookie.partition(".")
        if session and hmac.compare_digest(signature.encode(), sign("session", session).encode()):
            return _Caller("cookie", session, f"{identity} (web session {session[:6]})")
        return None

    def check_host(request: Request) -> None:
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name.lower() not in hosts:
            raise _Refused(400, "unexpected Host header; open the page at the address "
                                "`sandbox approvals serve` printed")

    def check_same_origin(request: Request, caller: _Caller, form: dict[str, Any]) -> None:
        """A cookie-authenticated write must come from this page: CSRF token + origin."""
        if caller.via != "cookie" or caller.session is None:
            return
        site = request.headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            raise _Refused(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("origin")
        if origin is not None and origin != f"http://{request.headers.get('host', '')}":
            raise _Refused(403, "cross-origin request refused (Origin does not match)")
        offered = request.headers.get("x-csrf-token") or str(form.get("csrf", ""))
        if not hmac.compare_digest(offered.encode(), sign("csrf", caller.session).encode()):
            raise _Refused(403, "missing or wrong CSRF token; reload the page")

    def guarded(handler: Callable[[Request, _Caller], Awaitable[Response]],
                ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                check_host(request)
                caller = authenticate(request)
                if caller is None:
                    raise _Refused(401, "a valid token is required: open the URL that "
                                        "`sandbox approvals serve` printed")
                response = await handler(request, caller)
            except _Refused as exc:
                response = JSONResponse({"error": exc.message, **exc.extra},
                                        status_code=exc.code)
            response.headers.update(SECURITY_HEADERS)
            return response
        return endpoint

    async def db(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not store.blocking:
            return fn(*args, **kwargs)
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))

    watch = PendingWatch(store, db)
    presented = Presented()

    # -- routes ------------------------------------------------------------------------

    async def index(request: Request) -> Response:
        try:
            check_host(request)
        except _Refused as exc:
            return _secure(PlainTextResponse(exc.message, status_code=exc.code))
        offered = request.query_params.get("token")
        if offered is not None:
            if not hmac.compare_digest(offered.encode(), key):
                return _secure(PlainTextResponse("wrong token", status_code=401))
            session = secrets.token_urlsafe(18)
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, f"{session}.{sign('session', session)}", httponly=True,
                                samesite="strict", path="/")
            return _secure(response)
        caller = authenticate(request)
        if caller is None or caller.session is None:
            return _secure(PlainTextResponse(
                "401: a token is required. Open the URL that `sandbox approvals serve` "
                "printed (it ends in ?token=...).", status_code=401))
        csrf = sign("csrf", caller.session)

        def first_page() -> tuple[list[dict[str, Any]], int]:
            page = pending_page(store, limit=DEFAULT_LIMIT)
            states = store.answer_states([r.id for r in page.items]) if page.items else {}
            cards = [{**presented.card(req),
                      "answer": states.get(req.id, ("pending", None))[1]}
                     for req in page.items]
            return cards, page.total

        cards, total = await db(first_page)
        cards = cards[:fit(cards)]
        # One pass, so no text a card shows can be taken for a placeholder.
        fills = {"{csrf}": csrf, "{identity}": html.escape(caller.who),
                 "{first_paint}": render_cards(cards), "{count}": count_text(total),
                 "{empty_hidden}": "" if total == 0 else " hidden"}
        page = _PLACEHOLDER.sub(lambda m: fills[m.group()], PAGE_HTML)
        return _secure(Response(page, media_type="text/html; charset=utf-8"))

    async def script(request: Request, caller: _Caller) -> Response:
        return Response(APP_JS, media_type="text/javascript; charset=utf-8")

    async def style(request: Request, caller: _Caller) -> Response:
        return Response(APP_CSS, media_type="text/css; charset=utf-8")

    async def no_icon(request: Request, caller: _Caller) -> Response:
        return Response(status_code=204)

    async def pending(request: Request, caller: _Caller) -> Response:
        """A page of pending requests, oldest first: ``limit`` (default 50, at most
        200), ``after`` (the ``next`` of the previous page), ``unanswered=1``."""
        params = request.query_params
        try:
            limit = max(1, min(MAX_LIMIT, int(params.get("limit", str(DEFAULT_LIMIT)))))
        except ValueError:
            raise _Refused(400, f"limit must be a number from 1 to {MAX_LIMIT}") from None
        try:
            after = decode_cursor(params["after"]) if params.get("after") else None
        except ValueError as exc:
            raise _Refused(400, str(exc)) from None
        unanswered_only = params.get("unanswered") in ("1", "true")
        session_id = params.get("session") or None

        def read() -> tuple[list[dict[str, Any]], bool, str | None, int]:
            cards: list[dict[str, Any]] = []
            cursor = after
            total = 0
            for _ in range(10):  # unanswered=1 skips answered ones: read on, a little
                page = pending_page(store, limit=limit, after=cursor, session_id=session_id)
                total = page.total
                if not page.items and cursor is not None and page.total and not known(cursor):
                    # The request a page's cursor names was forgotten (a store prunes
                    # old finished calls): list from the start; the page skips the cards
                    # it has.
                    cursor = None
                    continue
                states = store.answer_states([r.id for r in page.items]) if page.items else {}
                for req in page.items:
                    if len(cards) == limit:
                        return cards, True, cursor, total
                    answer = states.get(req.id, ("pending", None))[1]
                    cursor = req.id
                    if unanswered_only and answer is not None:
                        continue
                    cards.append({**presented.card(req), "cursor": encode_cursor(cursor),
                                  "answer": None if answer is None
                                  else answer_view(answer, None)})
                if page.next is None:
                    return cards, False, cursor, total
                if len(cards) == limit:
                    return cards, True, cursor, total
            return cards, True, cursor, total

        cards, more, cursor, total = await db(read)
        n = fit(cards)
        if n < len(cards):
            cards, more = cards[:n], True
            cursor = decode_cursor(cards[-1]["cursor"])
        return JSONResponse({
            "requests": cards,
            "next": None if cursor is None else encode_cursor(cursor),
            "more": more,
            "limit": limit,
            "total": total,
        })

    def known(request_id: str) -> bool:
        try:
            store.get_request(request_id)
        except UnknownConfirmationError:
            return False
        return True

    async def one_request(request: Request, caller: _Caller) -> Response:
        """One request: its card (within the display caps) and where it stands."""
        req = await _known(request.path_params["request_id"])
        states = await db(store.answer_states, [req.id])
        status, answer = states.get(req.id, (req.status, None))
        decided = None if status == "pending" else await watch.decision(req.id)
        return JSONResponse({**presented.card(req), "status": status,
                             "answer": None if answer is None else answer_view(answer, None),
                             "decision": decided})

    async def arguments(request: Request, caller: _Caller) -> Response:
        """All of one request's arguments (a card shows them cut to the display cap)."""
        req = await _known(request.path_params["request_id"])
        return JSONResponse(full_arguments(req))

    async def _known(request_id: str) -> ConfirmationRequest:
        try:
            req: ConfirmationRequest = await db(store.get_request, request_id)
        except UnknownConfirmationError as exc:
            raise _Refused(404, str(exc)) from None
        return req

    async def events(request: Request, caller: _Caller) -> Response:
        """Server-sent events: what changed (see `events.py`)."""
        return StreamingResponse(watch.stream(), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    async def answer(request: Request, caller: _Caller) -> Response:
        fields = await _read_fields(request)
        check_same_origin(request, caller, fields)
        request_id = request.path_params["request_id"]
        try:
            req = await db(store.get_request, request_id)
            decision = _decision(fields, req, caller.who)
            await db(store.submit_answer, request_id,
                     decision.model_dump(mode="json", exclude_none=True),
                     decided_by=caller.who, channel="web")
        except UnknownConfirmationError as exc:
            raise _Refused(404, str(exc)) from None
        except ConfirmationTimedOutError as exc:
            raise _Refused(410, str(exc), status="timed_out") from None
        except ConfirmationStateError as exc:
            raise _Refused(409, str(exc), status="already_answered") from None
        except (ConfigurationError, RuleError, ValueError) as exc:
            raise _Refused(400, str(exc)) from None
        view = answer_view(decision.model_dump(mode="json", exclude_none=True), time.time())
        return JSONResponse({"ok": True, "id": request_id, "outcome": decision.outcome,
                             "decided_by": caller.who, "answer": view})

    app = Starlette(routes=[
        Route("/", index, methods=["GET"]),
        Route("/app.js", guarded(script), methods=["GET"]),
        Route("/app.css", guarded(style), methods=["GET"]),
        Route("/favicon.ico", guarded(no_icon), methods=["GET"]),
        Route("/api/pending", guarded(pending), methods=["GET"]),
        Route("/api/events", guarded(events), methods=["GET"]),
        Route("/api/requests/{request_id}", guarded(one_request), methods=["GET"]),
        Route("/api/requests/{request_id}/args", guarded(arguments), methods=["GET"]),
        Route("/api/requests/{request_id}/answer", guarded(answer), methods=["POST"]),
    ])
    app.state.watch = watch
    return app


_PLACEHOLDER = re.compile(r"\{(?:csrf|identity|first_paint|count|empty_hidden)\}")


def _secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


async def _read_fields(request: Request) -> dict[str, Any]:
    """The body as a dict: JSON, or an urlencoded form; bounded in size."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise _Refused(413, f"the body is larger than {MAX_BODY} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _Refused(413, f"the body is larger than {MAX_BODY} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if kind == "application/json":
            data = json.loads(body or b"{}")
        elif kind == "application/x-www-form-urlencoded":
            data = {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        else:
            raise _Refused(415, "send application/json (or an urlencoded form)")
    except (ValueError, UnicodeDecodeError):
        raise _Refused(400, "the body could not be read as JSON or a form") from None
    if not isinstance(data, dict):
        raise _Refused(400, "the body must be a JSON object")
    return data


def _decision(fields: dict[str, Any], req: ConfirmationRequest, who: str) -> Decision:
    outcome = fields.get("outcome")
    if outcome == "approve":
        scope = fields.get("scope", "once")
        if scope not in ("once", "session", "always"):
            raise ValueError("scope must be once, session or always")
        remember = None
        if scope != "once":
            remember = _remember(fields, req)
        return Decision.approve(scope=scope, remember=remember, decided_by=who, channel="web")
    if outcome == "deny":
        reason = str(fields.get("reason") or "").strip()[:2000]
        return Decision.deny(reason or "denied on the approvals page", decided_by=who,
                             channel="web")
    if outcome == "edit":
        if isinstance(fields.get("command"), str):
            if not isinstance(req.args.get("command"), str):
                raise ValueError("this call has no command to edit; send args instead")
            args = {**req.args, "command": fields["command"]}
        else:
            raw = fields.get("args")
            if isinstance(raw, str):
                raw = json.loads(raw)
            if not isinstance(raw, dict):
                raise ValueError("edited args must be a JSON object")
            args = raw
        note = fields.get("reason")
        return Decision.edit(args, reason=str(note)[:2000] if note else None,
                             decided_by=who, channel="web")
    raise ValueError("outcome must be approve, deny or edit")


def _remember(fields: dict[str, Any], req: ConfirmationRequest) -> Remember | None:
    subjects = rule_subjects_of(req)
    raw = fields.get("patterns")
    tool_wide = fields.get("tool_wide") in (True, "1", "true")
    if raw is None:
        return Remember(tool_wide=True) if tool_wide else None
    if subjects is None:
        raise ValueError("this tool does not take commands: no word patterns")
    if not isinstance(raw, list):
        raise ValueError("patterns must be a list of {words, prefix}")
    patterns = tuple(RulePattern.model_validate(p) for p in raw)
    check_patterns(patterns, subjects)  # refused here already, before the runner sees it
    return Remember(patterns=patterns)
