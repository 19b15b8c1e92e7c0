"""The approvals page in a real headless Chromium (Debian's `chromium`, driven by Playwright):
answers given on the page reach the runner holding the tool, in the same process or in
another one; model text stays inert; the token and CSRF defences hold."""

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

import anyio
import pytest

from sandbox import ApprovalStore, FunctionTool, ToolRunner
from sandbox.approval.rules import RuleBook
from sandbox.approval.web import WebConfirmationProvider
from sandbox.bash.policy import BashToolPolicy

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(60),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed "
                       "(scripts/test.sh installs it: apt-get install chromium)"),
]
DOCS = Path(__file__).resolve().parent.parent / "docs"


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


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    pg = context.new_page()
    pg.dialogs = []  # type: ignore[attr-defined]
    pg.console_messages = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
    pg.on("console", lambda m: pg.console_messages.append(f"{m.type}: {m.text}"))
    try:
        yield pg
    finally:
        context.close()


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


def defer(store_path: Path, effect: Path, *commands: str, confirm: Any = True) -> ToolRunner:
    """Calls made by a runner with no provider: they wait in the store for the page."""
    runner = ToolRunner([shell_tool(effect, confirm=confirm)], store_path=str(store_path))

    async def go() -> None:
        for command in commands:
            result = await runner.call("shell", {"command": command})
            assert result["status"] == "awaiting_confirmation"
    run_async(go)
    return runner


def apply(runner: ToolRunner) -> list[dict[str, Any]]:
    return list(run_async(runner.apply_answers).values())


def card(page: Any, text: str) -> Any:
    locator = page.locator("article.request", has_text=text)
    locator.wait_for(timeout=10_000)
    return locator


def wait_note(page_card: Any, text: str) -> None:
    page_card.locator(".note", has_text=text).wait_for(timeout=10_000)


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
    c.locator("input.reason").fill("use the staging copy")
    c.get_by_role("button", name="Deny", exact=True).click()
    wait_note(c, "Answered: deny")
    (result,) = apply(runner)
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
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
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


def test_an_edit_that_still_needs_approval_is_asked_again(
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    runner = defer(store_path, effect, "rm -rf build", confirm=lambda command: "rm" in command)
    page.goto(served.url)
    c = card(page, "rm -rf build")
    c.get_by_role("button", name="Edit…").click()
    c.locator("textarea.editor").fill("rm -rf /")
    c.get_by_role("button", name="Run the edited command").click()
    wait_note(c, "Answered: edit")
    (result,) = apply(runner)
    assert result["status"] == "awaiting_confirmation"  # the predicate fired again
    assert ran(effect) == []
    card(page, "rm -rf /")  # the new request shows up live


def test_always_approve_saves_only_the_prefix_the_human_picked(
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
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
        page: Any, served: Served, tmp_path: Path, store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    defer(store_path, effect, PAYLOAD)
    page.goto(served.url)
    c = card(page, "window.__pwned")
    shown = c.locator("pre.command").text_content()
    assert shown == PAYLOAD.replace("\r", "\\r").replace("\u202e", "\\u202e")
    assert c.locator("pre.command .ctl").all_text_contents() == ["\\r", "\\u202e"]
    page.wait_for_timeout(1500)  # two refreshes of the list
    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == []
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0
    assert not [m for m in page.console_messages if m.startswith("error")]


# -- token and CSRF ------------------------------------------------------------------------

def test_requests_without_the_token_are_refused(page: Any, served: Served,
                                                tmp_path: Path, store_path: Path) -> None:
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


def test_a_cross_site_form_post_is_refused(page: Any, served: Served, tmp_path: Path,
                                           store_path: Path) -> None:
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


def test_screenshot_of_the_page(page: Any, served: Served, tmp_path: Path,
                                store_path: Path) -> None:
    effect = tmp_path / "effect.txt"
    defer(store_path, effect, "git log --oneline -5 && curl -fsSL https://example.org/install.sh",
          "echo done\r rm -rf ~/projects")
    wipe = FunctionTool(lambda database, dry_run=False: {"wiped": database}, name="wipe_database",
                        require_confirmation=True)
    runner = ToolRunner([wipe], store_path=str(store_path), approval_ttl=900)
    run_async(runner.call, "wipe_database", {"database": "orders", "dry_run": False})
    page.goto(served.url)
    card(page, "wipe_database")
    card(page, "git log").get_by_role("button", name="Always approve…").click()
    # The README's picture is refreshed only on request, so a test run leaves the tree clean.
    target = DOCS if os.environ.get("SANDBOX_UPDATE_SCREENSHOTS") else tmp_path
    target.mkdir(exist_ok=True)
    page.screenshot(path=str(target / "approvals-page.png"), full_page=True)
    assert (target / "approvals-page.png").stat().st_size > 10_000
