"""The approvals page's API against a real `sandbox approvals serve` process: listings are
paged and bounded in size however many and however large the pending requests are, one
request's full arguments are there on demand, and the event stream (token required)
tells a page what changed: new requests, answers given elsewhere, and how they ended."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from sandbox import ApprovalStore, FunctionTool, ToolRunner
from sandbox.approval.channels.web.app import create_app
from sandbox.approval.channels.web.events import PendingWatch
from sandbox.approval.channels.web.listing import (
    DISPLAY_CHARS,
    MAX_BODY_BYTES,
    MAX_LIMIT,
    VALUE_CHARS,
    WATCH_WINDOW,
    encode_cursor,
)
from sandbox.approval.models import ConfirmationRequest, args_digest
from sandbox.approval.store import MAX_PAGE, Page, SQLiteApprovalStore

pytestmark = [pytest.mark.timeout(120)]


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.base, _, self.token = url.partition("/?token=")
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base, headers=self.headers, timeout=30)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    ApprovalStore(tmp_path / "approvals.db").close()
    return tmp_path / "approvals.db"


@pytest.fixture
def served(store_path: Path) -> Iterator[Served]:
    """`sandbox approvals serve` in its own process, on a free port."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "approvals", "serve", "--store", str(store_path),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
        assert match, f"no URL printed: {line!r}"
        yield Served(proc, match.group(1))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()


def write(path: str, content: str) -> dict[str, Any]:
    """Write a file in the project."""
    return {"written": path}


def runner_for(store_path: Path, *, session_id: str | None = None) -> ToolRunner:
    return ToolRunner([FunctionTool(write, require_confirmation=True)],
                      store_path=str(store_path), session_id=session_id)


def park(store_path: Path, calls: list[dict[str, Any]], **kw: Any) -> ToolRunner:
    """Calls made with no provider: each waits in the store for an answer."""
    runner = runner_for(store_path, **kw)

    async def go() -> None:
        for args in calls:
            result = await runner.call("write", args)
            assert result["status"] == "awaiting_confirmation", result
    anyio.run(go)
    return runner


def big(n: int) -> dict[str, Any]:
    """About 45 KB of arguments, different for each call."""
    return {"path": f"src/generated_{n}.py", "content": f"# file {n}\n" + "x = 1\n" * 7500}


def page_through(served: Served, **params: str) -> list[dict[str, Any]]:
    """Every page of /api/pending, following `next`; asserts each body is bounded."""
    async def go() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        after: str | None = None
        async with served.client() as client:
            while True:
                query = {**params, **({"after": after} if after else {})}
                r = await client.get("/api/pending", params=query)
                assert r.status_code == 200, r.text
                assert len(r.content) <= MAX_BODY_BYTES
                body = r.json()
                seen.extend(body["requests"])
                if not body["more"]:
                    return seen
                after = body["next"]
    result: list[dict[str, Any]] = anyio.run(go)
    return result


# -- a flood of large requests -------------------------------------------------------

def test_three_hundred_pending_calls_of_45_kb_list_in_bounded_pages(
        served: Served, store_path: Path) -> None:
    calls = [big(n) for n in range(300)]
    park(store_path, calls)
    assert len(json.dumps(calls[0])) > 45_000

    async def first_page(params: dict[str, str]) -> httpx.Response:
        async with served.client() as client:
            return await client.get("/api/pending", params=params)

    r = anyio.run(first_page, {})
    assert r.status_code == 200
    body = r.json()
    assert len(body["requests"]) == 50 and body["more"] is True  # the default page
    assert len(r.content) < 50 * 2 * DISPLAY_CHARS  # not 50 x 45 KB, let alone 300
    card = body["requests"][0]
    assert card["args_truncated"] is True and card["args"] is None
    assert card["args_chars"] > 45_000
    assert card["digest"] == args_digest("write", calls[0])
    assert sum(len(p[0]) for p in card["args_pieces"]) <= DISPLAY_CHARS + 100
    # The long value is cut, so the short one after it stays in view.
    assert '"path": "src/generated_0.py"' in "".join(p[0] for p in card["args_pieces"])
    left = len(calls[0]["content"]) - VALUE_CHARS
    assert [p[0] for p in card["args_pieces"] if p[1] == "cut"] == [f"… ⟨{left:,} more characters⟩"]

    r = anyio.run(first_page, {"limit": "100000"})
    assert len(r.json()["requests"]) <= MAX_LIMIT
    assert len(r.content) <= MAX_BODY_BYTES

    listed = page_through(served, limit="120")
    assert [c["args_chars"] for c in listed] == [
        len(json.dumps(c, indent=2, sort_keys=True)) for c in calls]  # all, in order, once
    assert len({c["id"] for c in listed}) == 300


def test_the_full_arguments_of_one_request_are_there_on_demand(
        served: Served, store_path: Path) -> None:
    args = big(7)
    args["content"] += "\x1b[2K\u202e"
    park(store_path, [args])
    (card,) = page_through(served)

    async def full() -> dict[str, Any]:
        async with served.client() as client:
            r = await client.get(f"/api/requests/{card['id']}/args")
            assert r.status_code == 200
            data: dict[str, Any] = r.json()
            return data
    data = anyio.run(full)
    assert data["args"] == args
    assert data["digest"] == args_digest("write", args) == card["digest"]
    text = "".join(p[0] for p in data["args_pieces"])
    assert "\x1b" not in text and "\u202e" not in text  # escaped, never raw
    assert "\\u001b[2K" in text  # JSON's own escape for ESC
    assert [p[0] for p in data["args_pieces"] if p[1]] == ["\\u202e"]  # JSON leaves it raw
    assert data["control_characters"] == 2
    assert card["editable"] is False  # the bidi override would show raw in an editor


def test_a_multi_line_file_body_is_editable_and_not_flagged(
        served: Served, store_path: Path) -> None:
    park(store_path, [{"path": "a.py", "content": "def f():\n\treturn 1\n"}])
    (card,) = page_through(served)
    assert card["control_characters"] == 0 and card["editable"] is True


def test_unanswered_only_pages_past_requests_that_have_an_answer(
        served: Served, store_path: Path) -> None:
    park(store_path, [{"path": f"f{n}", "content": ""} for n in range(12)])
    store = ApprovalStore(store_path)
    for req in store.pending()[:9]:
        store.submit_answer(req.id, {"outcome": "approve"}, decided_by="ops", channel="cli")
    listed = page_through(served, limit="2", unanswered="1")
    assert [c["args"]["path"] for c in listed] == ["f9", "f10", "f11"]
    everything = page_through(served, limit="5")
    assert [c["answer"]["decided_by"] if c["answer"] else None for c in everything] == (
        ["ops"] * 9 + [None] * 3)
    assert everything[0]["answer"]["channel"] == "cli"


def test_paging_arguments_that_make_no_sense_are_refused_with_the_fix(
        served: Served, store_path: Path) -> None:
    async def get(params: dict[str, str]) -> httpx.Response:
        async with served.client() as client:
            return await client.get("/api/pending", params=params)
    r = anyio.run(get, {"limit": "many"})
    assert r.status_code == 400 and "limit must be a number" in r.json()["error"]
    r = anyio.run(get, {"after": "cf_not_a_cursor"})
    assert r.status_code == 400 and "'next' value of a previous listing" in r.json()["error"]


def test_the_api_needs_the_token(served: Served, store_path: Path) -> None:
    rid = park(store_path, [{"path": "a", "content": ""}]).store.pending()[0].id

    async def go() -> list[int]:
        async with httpx.AsyncClient(base_url=served.base, timeout=10) as client:
            return [(await client.get(p)).status_code for p in (
                "/api/pending", "/api/events", f"/api/requests/{rid}",
                f"/api/requests/{rid}/args")]
    assert anyio.run(go) == [401, 401, 401, 401]


# -- the event stream ----------------------------------------------------------------

@asynccontextmanager
async def events(served: Served) -> AsyncIterator[Callable[[str], Awaitable[dict[str, Any]]]]:
    """The server-sent events of /api/events, parsed: ``await next_event(name)``."""
    async with served.client() as client, client.stream("GET", "/api/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.aiter_lines()

        async def next_event(wanted: str) -> dict[str, Any]:
            with anyio.fail_after(20):
                name = None
                async for line in lines:
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: ") and name == wanted:
                        data: dict[str, Any] = json.loads(line[6:])
                        return data
            raise AssertionError(f"the stream ended before a {wanted!r} event")
        yield next_event


def cli(store_path: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "sandbox", "approvals", *args,
                          "--store", str(store_path)],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def test_events_announce_a_new_request_then_an_answer_from_the_cli_then_its_outcome(
        served: Served, store_path: Path) -> None:
    runner = runner_for(store_path, session_id="s-1")

    async def go() -> list[dict[str, Any]]:
        async with events(served) as next_event:
            hello = await next_event("hello")
            assert hello == {"count": 0}
            result = await runner.call("write", {"path": "a", "content": "b"})
            rid = result["confirmation_id"]
            announced = await next_event("pending")
            await anyio.to_thread.run_sync(
                lambda: cli(store_path, "deny", rid, "--reason", "not today"))
            answered = await next_event("answered")
            applied = await runner.apply_answers()
            resolved = await next_event("resolved")
            assert applied[rid]["status"] == "denied"
            return [announced, answered, resolved]

    announced, answered, resolved = anyio.run(go)
    assert announced == {"count": 1, "added": 1, "ids": [resolved["id"]]}
    assert answered["outcome"] == "deny" and answered["channel"] == "cli"
    assert answered["reason"] == "not today" and answered["decided_by"]
    assert resolved["status"] == "denied" and resolved["channel"] == "cli"
    assert resolved["decided_by"] == answered["decided_by"]
    assert isinstance(resolved["at"], float)


def test_events_report_a_request_that_expired(served: Served, store_path: Path) -> None:
    runner = ToolRunner([FunctionTool(write, require_confirmation=True)],
                        store_path=str(store_path), approval_ttl=0.5)

    async def go() -> dict[str, Any]:
        async with events(served) as next_event:
            await next_event("hello")
            await runner.call("write", {"path": "a", "content": "b"})
            await next_event("pending")
            return await next_event("resolved")
    assert anyio.run(go)["status"] == "timed_out"


def test_events_in_a_process_that_serves_a_memory_store(tmp_path: Path) -> None:
    from sandbox.approval.channels.web import WebConfirmationProvider

    store = ApprovalStore()
    provider = WebConfirmationProvider(store, timeout=30, poll_interval=0.02)
    runner = ToolRunner([FunctionTool(write, require_confirmation=True)], provider=provider,
                        store=store)

    async def go() -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        resolved: dict[str, Any] = {}
        async with provider.serving() as server, anyio.create_task_group() as tg:
            served = Served(None, server.url)  # type: ignore[arg-type]

            async def call() -> None:
                results.append(await runner.call("write", {"path": "a", "content": "b"}))
            async with events(served) as next_event:
                await next_event("hello")
                tg.start_soon(call)
                await next_event("pending")
                async with served.client() as client:
                    (card,) = (await client.get("/api/pending")).json()["requests"]
                    r = await client.post(f"/api/requests/{card['id']}/answer",
                                          json={"outcome": "approve"})
                    assert r.status_code == 200
                resolved = await next_event("resolved")
        return {**resolved, "results": results}
    out = anyio.run(go)
    assert out["status"] == "approved" and out["channel"] == "web"
    assert out["results"] == [{"written": "a"}]


# -- reading the store a page at a time ------------------------------------------------

class CountingStore(SQLiteApprovalStore):
    """A real SQLite store that counts how the page reads it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read_everything = 0
        self.page_sizes: list[int] = []

    def pending(self, *, session_id: str | None = None) -> list[ConfirmationRequest]:
        self.read_everything += 1
        return super().pending(session_id=session_id)

    def list_pending(self, *, limit: int, after: str | None = None,
                     session_id: str | None = None) -> Page:
        self.page_sizes.append(limit)
        return super().list_pending(limit=limit, after=after, session_id=session_id)


def test_listing_and_event_stream_read_the_store_one_bounded_page_at_a_time(
        store_path: Path) -> None:
    n = WATCH_WINDOW + 40
    park(store_path, [{"path": f"f{i}", "content": ""} for i in range(n)])
    store = CountingStore(store_path)
    app = create_app(store, token="t" * 32)

    async def go() -> tuple[list[str], Any]:
        ids: list[str] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                     headers={"Authorization": "Bearer " + "t" * 32}) as client:
            after: str | None = None
            while True:
                r = await client.get("/api/pending",
                                     params={"limit": "50", **({"after": after} if after else {})})
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["total"] == n
                ids.extend(card["id"] for card in body["requests"])
                if not body["more"]:
                    break
                after = body["next"]
        watch = PendingWatch(store, _inline)
        return ids, await watch.snapshot()

    ids, snapshot = anyio.run(go)
    assert store.read_everything == 0
    assert max(store.page_sizes) <= max(MAX_LIMIT, WATCH_WINDOW)
    assert ids == [r.id for r in store.list_pending(limit=MAX_PAGE).items][:n]
    assert len(ids) == len(set(ids)) == n
    assert snapshot.total == n and len(snapshot.order) == WATCH_WINDOW


async def _inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def test_a_session_cannot_park_more_than_its_cap_through_the_runner(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "capped.db", max_pending_per_session=3)
    runner = ToolRunner([FunctionTool(write, require_confirmation=True)], store=store,
                        session_id="flooder")
    other = ToolRunner([FunctionTool(write, require_confirmation=True)], store=store,
                       session_id="someone-else")

    async def go() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        mine = [await runner.call("write", {"path": f"f{i}", "content": ""})
                for i in range(5)]
        return mine, await other.call("write", {"path": "g", "content": ""})

    mine, theirs = anyio.run(go)
    assert [r["status"] for r in mine] == ["awaiting_confirmation"] * 3 + ["error"] * 2
    assert "max_pending_per_session=3" in mine[3]["error"]
    assert theirs["status"] == "awaiting_confirmation"
    assert len(store.pending(session_id="flooder")) == 3


def test_a_cursor_naming_a_forgotten_request_lists_from_the_start(store_path: Path) -> None:
    park(store_path, [{"path": f"f{i}", "content": ""} for i in range(3)])
    store = ApprovalStore(store_path)
    app = create_app(store, token="t" * 32)

    async def go() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                     headers={"Authorization": "Bearer " + "t" * 32}) as client:
            r = await client.get("/api/pending",
                                 params={"after": encode_cursor("cf_" + "0" * 24)})
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            return body

    body = anyio.run(go)
    assert [c["id"] for c in body["requests"]] == [r.id for r in store.pending()]
    assert body["more"] is False
