"""What the approvals page costs when the queue is flooded: one table.

    .venv/bin/python bench/approvals_page.py [--requests 300] [--kib 45] [--rounds 5]

Parks ``--requests`` calls whose arguments are about ``--kib`` KiB each in a SQLite
store file, serves it with ``sandbox approvals serve`` (a real process), and times, over
HTTP with the bearer token:

- ``GET /api/pending`` (the first page, default limit), and with ``limit=200`` (the most);
- paging through all of them with ``next``;
- ``GET /api/requests/ID/args`` (one request's full arguments: the card's "Show all");
- the first event on ``/api/events`` after a new request is parked (the page's update).

Issue 10 measured the unpaged listing at 31 s and 96 MB for 300 x 45 KB.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from sandbox import ApprovalStore, FunctionTool, ToolRunner


def write(path: str, content: str) -> dict[str, Any]:
    """Write a file in the project."""
    return {"written": path}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--kib", type=int, default=45)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "approvals.db"
        ApprovalStore(db).close()
        runner = ToolRunner([FunctionTool(write, require_confirmation=True)],
                            store_path=str(db))
        body = "x = 1\n" * (opts.kib * 1024 // 6)
        for n in range(opts.requests):
            await runner.call("write", {"path": f"gen_{n}.py", "content": body})
        proc = subprocess.Popen([sys.executable, "-m", "sandbox", "approvals", "serve",
                                 "--store", str(db), "--port", "0"],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            match = re.search(r"(http://\S+)/\?token=(\S+)", proc.stdout.readline())
            assert match, "the server printed no URL"
            base, token = match.groups()
            async with httpx.AsyncClient(base_url=base, timeout=60,
                                         headers={"Authorization": f"Bearer {token}"}) as c:
                rows = await measure(c, runner, opts.rounds)
        finally:
            proc.kill()
            proc.wait()
    print(f"{opts.requests} pending requests of {opts.kib} KiB arguments "
          f"(median of {opts.rounds})")
    print(f"{'what':<44} {'time':>10} {'bytes':>12}")
    for what, seconds, size in rows:
        print(f"{what:<44} {seconds * 1000:>8.1f} ms {size:>12,}")


async def measure(client: httpx.AsyncClient, runner: ToolRunner,
                  rounds: int) -> list[tuple[str, float, int]]:
    async def timed(fn: Any) -> tuple[float, int]:
        times, size = [], 0
        for _ in range(rounds):
            start = time.perf_counter()
            size = await fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times), size

    async def first_page() -> int:
        r = await client.get("/api/pending")
        r.raise_for_status()
        return len(r.content)

    async def largest_page() -> int:
        r = await client.get("/api/pending", params={"limit": "200"})
        r.raise_for_status()
        return len(r.content)

    async def every_page() -> int:
        total, after = 0, None
        while True:
            r = await client.get("/api/pending", params={"after": after} if after else {})
            data = r.json()
            total += len(r.content)
            if not data["more"]:
                return total
            after = data["next"]

    rid = (await client.get("/api/pending", params={"limit": "1"})).json()["requests"][0]["id"]

    async def full_args() -> int:
        r = await client.get(f"/api/requests/{rid}/args")
        r.raise_for_status()
        return len(r.content)

    async def event_after_a_new_request() -> int:
        async with client.stream("GET", "/api/events") as stream:
            lines = stream.aiter_lines()
            async for line in lines:
                if line.startswith("data:"):
                    break  # hello
            await runner.call("write", {"path": "new.py", "content": "print()"})
            size = 0
            async for line in lines:
                size += len(line) + 1
                if line.startswith("data:"):
                    return size
        return size

    rows = []
    for what, fn in (("GET /api/pending (first page, limit 50)", first_page),
                     ("GET /api/pending?limit=200", largest_page),
                     ("every page, following next", every_page),
                     ("GET /api/requests/ID/args (Show all)", full_args),
                     ("event after a new request is parked", event_after_a_new_request)):
        seconds, size = await timed(fn)
        rows.append((what, seconds, size))
    return rows


if __name__ == "__main__":
    anyio.run(main)
