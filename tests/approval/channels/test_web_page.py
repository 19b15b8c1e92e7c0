"""The approvals page in a real headless Chromium (Debian's `chromium`, driven by Playwright),
at 1280 and 390 px: answers given on the page reach the runner holding the tool, in the
same process or in another one; a card says who asked, when, why and what each answer
means; a card answered elsewhere (the CLI, another tab) changes live and says how; the
page follows server-sent events instead of re-reading the list; nothing scrolls sideways
on a phone; a flood of large requests renders a page at a time; model text stays inert;
the token and CSRF defences hold.

``SANDBOX_UPDATE_SCREENSHOTS=1`` rewrites the README's pictures in docs/."""

from __future__ import annotations

import http.server
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import httpx
import pytest

from sandbox import ApprovalStore, FunctionTool, ToolContext, ToolRunner
from sandbox.approval.channels.web import WebConfirmationProvider
from sandbox.approval.rules import RuleBook
from sandbox.bash.policy.evaluate import BashToolPolicy
from tests.paths import REPO

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(60),
    pytest.mark.needs_chromium,
]
DOCS = REPO / "docs"


class ShellTool(FunctionTool):
    """Command-shaped like ExecuteBashTool: rules match its parsed simple commands."""

    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        return BashToolPolicy().check(args["command"]).commands


def shell_tool(effect: Path, *, confirm: Any = True) -> ShellTool:
    def shell(command: str) -> dict[str, Any]:
        """Run a shell command in the project's workspace."""
        with open(effect, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(command) + "\n")
        return {"ran": command}
    return ShellTool(shell, require_confirmation=confirm)


def ran(effect: Path) -> list[str]:
    return [json.loads(x) for x in effect.read_text().splitlines()] if effect.exists() else []


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"])
        try:
            yield b
        finally:
            b.close()


WIDE, NARROW = 1280, 390


def open_page(browser: Any, width: int, **options: Any) -> Any:
    """A fresh browser context (its own cookies) at ``width`` px, recording its dialogs,
    console messages and API requests."""
    context = browser.new_context(viewport={"width": width, "height": 900}, **options)
    pg = context.new_page()
    pg.api_requests = []
    pg.on("request", lambda r: pg.api_requests.append(r.url) if "/api/" in r.url else None)
    pg.dialogs = []
    pg.console_messages = []
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    pg.on("console", lambda m: pg.console_messages.append(f"{m.type}: {m.text}"))
    return pg


@pytest.fixture(params=[WIDE, NARROW], ids=["1280px", "390px"])
def page(browser: Any, request: Any) -> Iterator[Any]:
    """The page at both widths: a desktop browser and a phone."""
    pg = open_page(browser, request.param)
    try:
        yield pg
    finally:
        pg.context.close()


@pytest.fixture
def wide_page(browser: Any) -> Iterator[Any]:
    pg = open_page(browser, WIDE)
    try:
        yield pg
    finally:
        pg.context.close()


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        self.base, _, self.token = url.partition("/?token=")


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "approvals.db"


@pytest.fixture
def served(store_path: Path) -> Iterator[Served]:
    """`sandbox approvals serve` in its own process, on a free port."""
    ApprovalStore(store_path).close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "approvals", "serve", "--store", str(store_path),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
        assert match, f"no URL printed: {line!r} {proc.stderr.read() if proc.stderr else ''}"
        yield Served(proc, match.group(1))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()


def run_async(fn: Any, *args: Any) -> Any:
    """anyio.run in a worker thread: Playwright's sync API owns this thread's event loop."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(anyio.run(fn, *args)))
    thread.start()
    thread.join(timeout=30)
    assert out, "the async helper did not finish"
    return out[0]


def defer(store_path: Path, effect: Path, *commands: str, confirm: Any = True,
          **options: Any) -> ToolRunner:
    """Calls made by a runner with no provider: they wait in the store for the page."""
    runner = ToolRunner([shell_tool(effect, confirm=confirm)], store_path=str(store_path),
                        **options)

    async def go() -> None:
        for command in commands:
            result = await runner.call("shell", {"command": command})
            assert result["status"] == "awaiting_confirmation"
    run_async(go)
    return runner


def apply(runner: ToolRunner) -> list[dict[str, Any]]:
    return list(run_async(runner.apply_answers).values())


def card(page: Any, text: str) -> Any:
    """A live card (built by the page's script, not the server's first paint)."""
    locator = page.locator("article.request:not(.first-paint)", has_text=text)
    locator.wait_for(timeout=10_000)
    return locator


def wait_note(page_card: Any, text: str) -> None:
    page_card.locator(".note", has_text=text).wait_for(timeout=10_000)


def status(page_card: Any, text: str) -> str:
    """The card's "how it was answered" line, once it says ``text``."""
    line = page_card.locator(".status-head", has_text=text)
    line.wait_for(timeout=10_000)
    return str(line.text_content())


def no_sideways_scroll(page: Any) -> bool:
    return bool(page.evaluate(
        "document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth"))


def fits_sideways(page: Any, locator: Any) -> bool:
    """The element is laid out inside the viewport's width (not cut off at the right)."""
    box = locator.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size[
        "width"]


# -- answering ------------------------------------------------------------------------

def test_approving_on_the_page_answers_a_waiting_provider_in_this_process(
        page: Any, tmp_path: Path, store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    urls: queue.Queue[str] = queue.Queue()
    results: list[dict[str, Any]] = []

    def agent() -> None:
        async def go() -> None:
            provider = WebConfirmationProvider(str(store_path), timeout=30, poll_interval=0.05)
            runner = ToolRunner([shell_tool(effect)], provider=provider,
                                store_path=str(store_path))
            async with provider.serving() as server:
                urls.put(server.url)
                results.append(await runner.call("shell", {"command": "make deploy"}))
        anyio.run(go)

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    page.goto(urls.get(timeout=15))
    assert "token" not in page.url  # exchanged for a cookie, gone from the address bar
    c = card(page, "make deploy")
    c.get_by_role("button", name="Approve once").click()
    wait_note(c, "Answered: approve")
    thread.join(timeout=15)
    assert results == [{"ran": "make deploy"}]
    assert ran(effect) == ["make deploy"]


def test_deny_with_a_reason_from_the_page_of_another_process(
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "rm -rf /srv/data")
    page.goto(served.url)
    c = card(page, "rm -rf /srv/data")
    c.get_by_role("button", name="Deny…").click()
    reason = c.locator("input.reason")
    reason.fill("use the staging copy")
    assert fits_sideways(page, reason) and fits_sideways(page, c.locator("button.danger").last)
    assert no_sideways_scroll(page)
    c.get_by_role("button", name="Deny", exact=True).click()
    wait_note(c, "Answered: deny")
    status(c, "Denied by you via web")
    (result,) = apply(runner)
    status(c, "Denied")
    c.locator(".status-reason", has_text="use the staging copy").wait_for(timeout=10_000)
    c.locator(".status-wait").wait_for(state="detached", timeout=10_000)  # applied: final
    assert result["status"] == "denied"
    assert result["reason"] == "use the staging copy"
    assert ran(effect) == []
    decision = ApprovalStore(store_path).request_decision(result.get("confirmation_id") or
                                                          _only_request(store_path))
    assert decision is not None and decision["channel"] == "web"
    assert "web session" in (decision["decided_by"] or "")


def _only_request(store_path: Path) -> str:
    import sqlite3

    with sqlite3.connect(store_path) as db:
        (rid,) = db.execute("SELECT id FROM requests").fetchone()
    return str(rid)


def test_edit_on_the_page_runs_the_edited_command_after_rechecking_it(
        wide_page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    page = wide_page
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "rm -rf build", confirm=lambda command: "rm" in command)
    page.goto(served.url)
    c = card(page, "rm -rf build")
    c.get_by_role("button", name="Edit…").click()
    c.locator("textarea.editor").fill("ls build")
    c.get_by_role("button", name="Run the edited command").click()
    wait_note(c, "Answered: edit")
    (result,) = apply(runner)
    assert result == {"ran": "ls build"}
    assert ran(effect) == ["ls build"]


def test_an_edit_is_the_approval_of_the_edited_command_never_a_second_question(
        wide_page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    page = wide_page
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "rm -rf build", confirm=lambda command: "rm" in command)
    page.goto(served.url)
    c = card(page, "rm -rf build")
    c.get_by_role("button", name="Edit…").click()
    c.locator("textarea.editor").fill("rm -rf build/tmp")
    c.get_by_role("button", name="Run the edited command").click()
    wait_note(c, "Answered: edit")
    (result,) = apply(runner)
    # The predicate would ask about "rm -rf build/tmp", but the human who wrote it is the
    # answer: it runs once, and no new card appears.
    assert result == {"ran": "rm -rf build/tmp"}
    assert ran(effect) == ["rm -rf build/tmp"]
    assert ApprovalStore(store_path).pending() == []


def test_always_approve_saves_only_the_prefix_the_human_picked(
        wide_page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    page = wide_page
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "git log --oneline && curl https://a.example/x")
    page.goto(served.url)
    c = card(page, "git log --oneline")
    c.get_by_role("button", name="Always approve…").click()
    selects = c.locator("select.prefix")
    assert selects.count() == 2
    selects.nth(0).select_option(label="git log   … (and any further words)")
    c.get_by_role("button", name="Save the rule and approve").click()
    wait_note(c, "Answered: approve (always)")
    (result,) = apply(runner)
    assert result == {"ran": "git log --oneline && curl https://a.example/x"}
    rules = RuleBook(ApprovalStore(store_path)).rules()
    assert sorted((r.words, r.prefix) for r in rules) == [
        (("curl", "https://a.example/x"), False), (("git", "log"), True)]


# -- inert model text ---------------------------------------------------------------------

PAYLOAD = ("echo '<script>window.__pwned=1;alert(1)</script>"
           "<img src=x onerror=\"window.__pwned=2;alert(2)\">'\r rm -rf ~ \u202e")


def test_markup_in_a_command_is_shown_as_text_and_never_runs(
        wide_page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    page = wide_page
    effect = tmp_path / "effect.txt"
    defer(store_path, effect, PAYLOAD)
    page.goto(served.url)
    c = card(page, "window.__pwned")
    shown = c.locator("pre.command").text_content()
    assert shown == PAYLOAD.replace("\r", "\\r").replace("\u202e", "\\u202e")
    assert c.locator("pre.command .ctl").all_text_contents() == ["\\r", "\\u202e"]
    # An editor would show the CR and the bidi override raw: editing is not offered.
    assert c.get_by_role("button", name="Edit…").is_disabled()
    assert "hold control characters" in str(c.locator(".choice.quiet").text_content())
    page.wait_for_timeout(1500)  # two refreshes of the list
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == []
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0
    assert not [m for m in page.console_messages if m.startswith("error")]


# -- token and CSRF ------------------------------------------------------------------------

def test_requests_without_the_token_are_refused(wide_page: Any, served: Served,
                                                tmp_path: Path, store_path: Path) -> None:
    page = wide_page
    defer(store_path, tmp_path / "effect.txt", "make deploy")
    response = page.goto(served.base + "/")
    assert response.status == 401
    assert page.goto(served.base + "/api/pending").status == 401
    assert page.goto(served.base + "/?token=wrong").status == 401
    api = page.request.post(served.base + f"/api/requests/{_only_request(store_path)}/answer",
                            data=json.dumps({"outcome": "approve"}),
                            headers={"Content-Type": "application/json"})
    assert api.status == 401
    assert ApprovalStore(store_path).get_answer(_only_request(store_path)) is None


class _Attacker(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        body = (f"<!doctype html><form id=f method=post action='{self.target}'>"
                "<input name=outcome value=approve><input name=scope value=always></form>"
                "<script>document.getElementById('f').submit()</script>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_cross_site_form_post_is_refused(wide_page: Any, served: Served, tmp_path: Path,
                                           store_path: Path) -> None:
    page = wide_page
    defer(store_path, tmp_path / "effect.txt", "make deploy")
    rid = _only_request(store_path)
    page.goto(served.url)  # the human is logged in: the browser holds the session cookie
    card(page, "make deploy")
    _Attacker.target = f"{served.base}/api/requests/{rid}/answer"
    attacker = http.server.HTTPServer(("127.0.0.1", 0), _Attacker)
    thread = threading.Thread(target=attacker.serve_forever, daemon=True)
    thread.start()
    try:
        statuses: list[int] = []
        page.on("response", lambda r: statuses.append(r.status) if "/answer" in r.url else None)
        page.goto(f"http://127.0.0.1:{attacker.server_port}/")
        page.wait_for_url(re.compile(r".*/answer$"), timeout=10_000)
        assert statuses == [403]
        assert "cross-" in page.content() or "CSRF" in page.content()
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert ApprovalStore(store_path).get_answer(rid) is None




# -- what a card says ------------------------------------------------------------------

async def _transfer(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    """Send money to an account."""
    if not tool_context.tool_confirmation:
        tool_context.request_confirmation(
            hint="Above the 1000 EUR limit\x1b[2K: confirm",
            payload={"account": "DE89 3704\u202e 0044", "amount": amount})
        return {"status": "waiting"}
    return {"sent": amount}


def ask_transfer(store_path: Path, **options: Any) -> ToolRunner:
    """A tool that asks from inside, with a hint and a payload (both hostile)."""
    runner = ToolRunner([FunctionTool(_transfer, name="transfer")], store_path=str(store_path),
                        **options)
    result = run_async(runner.call, "transfer", {"amount": 5000})
    assert result["status"] == "awaiting_confirmation"
    return runner


def test_a_card_says_who_asked_when_why_and_what_each_answer_means(
        browser: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    for width in (WIDE, NARROW):
        page = open_page(browser, width, locale="en-US", timezone_id="Asia/Tokyo")
        try:
            _check_card_content(page, served, tmp_path, store_path, first=width == WIDE)
        finally:
            page.context.close()


def _check_card_content(page: Any, served: Served, tmp_path: Path, store_path: Path, *,
                        first: bool) -> None:
    if first:
        defer(store_path, tmp_path / "effect.txt",
              "git log --oneline -5 && curl -fsSL https://example.org/x.sh",
              session_id="adk-session-7f3a91", approval_ttl=900)
        ask_transfer(store_path, session_id="support-bot", approval_ttl=300)
    page.goto(served.url)
    store = ApprovalStore(store_path)
    shell_req, transfer_req = store.pending()

    c = card(page, "git log --oneline -5")
    assert c.locator("h2.tool").text_content() == "shell"
    assert c.locator(".what").text_content() == (
        "What happens: Calls shell with these arguments: Run a shell command in the "
        "project's workspace.")
    assert "Please approve or reject" not in str(c.text_content())  # for the model
    assert c.locator(".hint").text_content() == (
        "Why asked: shell always asks a human before it runs (require_confirmation).")
    meta = c.locator("dl.meta")
    assert "adk-session-7f3a91" in str(meta.text_content())  # who asked
    assert shell_req.call_id in str(meta.text_content())
    assert shell_req.id in str(meta.text_content())
    # When, in the browser's local time (Tokyo here), with how long ago / how long left.
    local = shell_req.created_at.astimezone(ZoneInfo("Asia/Tokyo"))
    clock = f"{local.hour % 12 or 12}:{local:%M:%S} {'AM' if local.hour < 12 else 'PM'}"
    asked = str(meta.locator("time").nth(0).text_content())
    assert asked.startswith(clock) and asked.endswith("(just now)"), asked
    assert re.search(r"\(in 1[45] min\.?\)$", str(meta.locator("time").nth(1).text_content()))
    assert re.search(r"expires in 1[45] min", str(c.locator(".expiry").text_content()))
    # What each answer means: the session rule names the parsed commands, "always" the
    # prefix choice.
    helps = c.locator(".choice-help").all_text_contents()
    assert helps[0] == "Runs this exact call, one time."
    assert "session adk-session-7f3a91" in helps[1]
    assert "git log --oneline -5 · curl -fsSL https://example.org/x.sh" in helps[1]
    assert "every session" in helps[2] and "“git log …”" in helps[2]
    assert "told your reason" in helps[3]
    assert c.locator(".parsed li").all_text_contents() == [
        "git log --oneline -5", "curl -fsSL https://example.org/x.sh"]

    t = card(page, "transfer")
    assert t.locator(".badge").text_content() == "the tool asked from inside"
    assert "Send money to an account." in str(t.locator(".what").text_content())
    hint = t.locator(".hint")
    assert hint.text_content() == ("Why asked: The tool itself stopped to ask before going "
                                   "on: \u201cAbove the 1000 EUR limit\\x1b[2K: confirm\u201d")
    assert hint.locator(".ctl").all_text_contents() == ["\\x1b"]
    payload = t.locator("dl.details dd")
    assert payload.locator(".ctl").all_text_contents() == ["\\u202e"]
    assert "5000" in str(payload.text_content())
    assert "support-bot" in str(t.locator("dl.meta").text_content())
    assert "transfer calls with exactly these arguments" in t.locator(
        ".choice-help").all_text_contents()[1]
    html = page.content()
    assert "\x1b" not in html and "\u202e" not in html  # never raw on the page
    assert transfer_req.payload == {"account": "DE89 3704\u202e 0044", "amount": 5000}
    assert no_sideways_scroll(page)


# -- live updates ----------------------------------------------------------------------

def cli(store_path: Path, *args: str, user: str = "alice") -> None:
    subprocess.run([sys.executable, "-m", "sandbox", "approvals", *args, "--store",
                    str(store_path)], check=True, capture_output=True, timeout=60,
                   env={**os.environ, "USER": user})


def test_a_card_answered_from_the_cli_updates_live_and_says_how(
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "make deploy", "make clean")
    deploy, clean = (r.id for r in ApprovalStore(store_path).pending())
    page.goto(served.url)
    c = card(page, "make deploy")
    card(page, "make clean")
    cli(store_path, "approve", deploy)
    assert "Approved once by alice via cli" in status(c, "Approved once")
    c.locator(".status-wait", has_text="Waiting for the agent").wait_for(timeout=10_000)
    assert c.get_by_role("button", name="Approve once").is_hidden()  # no second answer
    cli(store_path, "deny", clean, "--reason", "not on Fridays", user="bob")
    k = card(page, "make clean")
    assert "Denied by bob via cli" in status(k, "Denied")
    results = apply(runner)
    assert [r.get("status", "ran") for r in results] == ["ran", "denied"]
    c.locator(".status-wait").wait_for(state="detached", timeout=10_000)
    final = status(c, "Approved once by alice via cli")
    assert re.search(r"· \d{1,2}:\d\d:\d\d [AP]M \(just now\)", final), final
    assert "resolved" in str(c.get_attribute("class"))
    assert ran(effect) == ["make deploy"]


def test_a_card_answered_in_another_tab_updates_live(
        browser: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    defer(store_path, tmp_path / "effect.txt", "make deploy")
    first, second = open_page(browser, WIDE), open_page(browser, NARROW)
    try:
        first.goto(served.url)
        second.goto(served.url)
        mine = card(second, "make deploy")
        mine.get_by_role("button", name="Approve for this session").click()
        assert "Approved for this session by you" in status(mine, "Approved")
        theirs = card(first, "make deploy")
        line = status(theirs, "Approved for this session")
        assert "(web session" in line and "via web" in line
    finally:
        first.context.close()
        second.context.close()


def test_the_page_follows_events_and_never_refetches_the_list_on_a_timer(
        wide_page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    page = wide_page
    effect = tmp_path / "effect.txt"
    defer(store_path, effect, "make one")
    page.goto(served.url)
    card(page, "make one")
    page.wait_for_timeout(3000)
    listings = [u for u in page.api_requests if "/api/pending" in u]
    assert len(listings) == 1, page.api_requests  # one listing; then only events
    assert [u for u in page.api_requests if "/api/events" in u]
    defer(store_path, effect, "make two")
    card(page, "make two")  # pushed: the page asks only for what came after its last card
    listings = [u for u in page.api_requests if "/api/pending" in u]
    assert len(listings) == 2 and "after=" in listings[1]
    assert page.locator("#count").text_content() == "2 waiting"


def test_a_request_committed_late_with_an_earlier_time_still_shows(
        wide_page: Any, served: Served, tmp_path: Path, store_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A slower process's request can sort before the last card shown: paging after that
    card would miss it, so the page fetches every id the event names."""
    import sandbox.approval.store.sqlite as store_module

    page = wide_page
    effect = tmp_path / "effect.txt"
    defer(store_path, effect, "make one")
    page.goto(served.url)
    card(page, "make one")
    real_now = store_module.clock
    monkeypatch.setattr(store_module, "clock", lambda: real_now() - 60)
    defer(store_path, effect, "make early")
    monkeypatch.undo()
    card(page, "make early")
    assert page.locator("#count").text_content() == "2 waiting"


# -- narrow screens and big requests ----------------------------------------------------

def test_at_390_px_nothing_scrolls_sideways_even_with_long_ids_and_open_panels(
        browser: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    long_command = "echo " + "A" * 3000 + " && curl https://example.org/" + "b" * 200
    runner = ToolRunner([shell_tool(tmp_path / "effect.txt")], store_path=str(store_path),
                        session_id="session-" + "s" * 200, approval_ttl=600)
    run_async(runner.call, "shell", {"command": long_command}, "call_" + "C" * 250)
    page = open_page(browser, NARROW)
    try:
        page.goto(served.url)
        c = card(page, "AAAA")
        for ident in c.locator("dl.meta .idwrap").all():
            assert fits_sideways(page, ident)
            assert fits_sideways(page, ident.get_by_role("button", name="Copy"))
        assert no_sideways_scroll(page)
        c.get_by_role("button", name="Deny…").click()
        assert fits_sideways(page, c.locator("input.reason"))
        assert no_sideways_scroll(page)
        c.get_by_role("button", name="Always approve…").click()
        c.locator("select.prefix").first.wait_for()
        assert no_sideways_scroll(page)
        c.get_by_role("button", name="Edit…").click()
        c.locator("textarea.editor").wait_for()
        assert no_sideways_scroll(page)
        assert fits_sideways(page, c.get_by_role("button", name="Run the edited command"))
    finally:
        page.context.close()


def test_three_hundred_requests_of_45_kb_render_a_page_at_a_time(
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    def write(path: str, content: str) -> dict[str, Any]:
        """Write a file in the project."""
        return {"written": path}
    runner = ToolRunner([FunctionTool(write, require_confirmation=True)],
                        store_path=str(store_path))

    async def flood() -> None:
        for n in range(300):
            await runner.call("write", {"path": f"gen_{n}.py", "content": "x = 1\n" * 7500})
    run_async(flood)
    page.goto(served.url)
    card(page, "gen_0.py")
    assert page.locator("article.request").count() == 50
    assert page.locator("#count").text_content() == "300 waiting"
    assert page.locator("#more-text").text_content() == "250 more waiting after these"
    first = page.locator("article.request").first
    assert "Cut to fit: 52,5" in str(first.locator(".digest").text_content())
    assert first.locator("pre .cutmark").all_text_contents() == ["… ⟨44,400 more characters⟩"]
    first.get_by_role("button", name="Show all").click()
    first.locator(".digest", has_text="All 52,5").wait_for(timeout=10_000)
    assert len(str(first.locator("pre").text_content())) > 45_000
    page.get_by_role("button", name="Show more").click()
    page.locator("article.request").nth(99).wait_for(timeout=10_000)
    assert page.locator("article.request").count() == 100
    assert no_sideways_scroll(page)


# -- the README's pictures ---------------------------------------------------------------

def test_screenshots_of_the_page_at_both_widths(
        browser: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "make release VERSION=2.4.1",
                   "git log --oneline -5 && curl -fsSL https://example.org/install.sh",
                   session_id="adk-session-7f3a91", approval_ttl=900)

    def wipe_database(database: str, dry_run: bool = False) -> dict[str, Any]:
        """Delete every row of a production database. Irreversible."""
        return {"wiped": database}
    wipe = ToolRunner([FunctionTool(wipe_database, require_confirmation=True)],
                      store_path=str(store_path), approval_ttl=600, session_id="support-bot")
    run_async(wipe.call, "wipe_database", {"database": "orders", "dry_run": False})
    ask_transfer(store_path, session_id="support-bot", approval_ttl=300)
    release = ApprovalStore(store_path).pending()[0].id
    target = DOCS if os.environ.get("SANDBOX_UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(exist_ok=True)
    shots = {WIDE: target / "approvals-page.png", NARROW: target / "approvals-page-mobile.png"}
    pages = {w: open_page(browser, w, locale="en-US") for w in shots}
    try:
        for pg in pages.values():
            pg.goto(served.url)
            card(pg, "transfer")
        cli(store_path, "approve", release)  # answered elsewhere: both pages show it live
        apply(runner)
        for width, pg in pages.items():
            release_card = card(pg, "make release")
            status(release_card, "Approved once by alice via cli")
            release_card.locator(".status-wait").wait_for(state="detached", timeout=10_000)
            if width == WIDE:
                card(pg, "git log").get_by_role("button", name="Always approve…").click()
                card(pg, "wipe_database").get_by_role("button", name="Deny…").click()
                pg.screenshot(path=str(shots[width]), full_page=True)
            else:  # a phone's screenful or two: a card answered elsewhere, one to answer
                git_log = card(pg, "git log")
                git_log.get_by_role("button", name="Deny…").click()
                bottom = git_log.evaluate("c => c.getBoundingClientRect().bottom + scrollY") + 12
                pg.screenshot(path=str(shots[width]), full_page=True,
                              clip={"x": 0, "y": 0, "width": NARROW, "height": bottom})
            assert no_sideways_scroll(pg)
            assert shots[width].stat().st_size > 10_000
    finally:
        for pg in pages.values():
            pg.context.close()


def test_the_first_response_holds_the_pending_cards_without_scripts(
        browser: Any, served: Served, store_path: Path, tmp_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "git log --oneline -5", "rm -rf build\x1b[2K",
                   session_id="nightly-bot")
    # The HTML of the first response, before any script runs.
    with httpx.Client(base_url=served.base, follow_redirects=True) as client:
        first = client.get("/", params={"token": served.token})
    assert first.status_code == 200
    assert first.text.count('class="request waiting first-paint"') == 2
    assert "git log --oneline -5" in first.text
    assert "rm -rf build<span class=\"ctl\">\\x1b</span>[2K" in first.text
    assert "2 waiting" in first.text and "nightly-bot" in first.text
    assert "Why asked: </span>shell always asks a human" in first.text
    assert "FunctionResponse" not in first.text
    # A browser with scripts off shows the cards, and can answer one.
    context = browser.new_context(java_script_enabled=False)
    try:
        pg = context.new_page()
        pg.goto(served.url)
        cards = pg.locator("article.request")
        assert cards.count() == 2
        assert "What happens: Calls shell" in str(cards.first.text_content())
        assert pg.locator("#count").text_content() == "2 waiting"
        target = pg.locator("article.request", has_text="git log")
        rid = str(target.get_attribute("data-id"))
        assert f"sandbox approvals approve {rid}" in str(target.text_content())
    finally:
        context.close()
    assert apply(runner) == [] and ran(effect) == []


def test_live_cards_replace_the_first_paint(
        wide_page: Any, served: Served, store_path: Path, tmp_path: Path) -> None:
    defer(store_path, tmp_path / "effect.txt", "ls -la")
    wide_page.goto(served.url)
    card(wide_page, "ls -la").locator(".choice-help").first.wait_for()
    assert wide_page.locator("#first-paint").count() == 0
    assert wide_page.locator("article.request").count() == 1
    assert wide_page.locator("#live").text_content() == "live"
