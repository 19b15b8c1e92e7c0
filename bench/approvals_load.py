"""Load and faults: many pending approvals from several processes, approved through the web API.

    .venv/bin/python bench/approvals_load.py [--requests 1000] [--processes 4]
                                             [--kill-server] [--json]

Each worker process holds a ToolRunner whose QueueConfirmationProvider waits on one
shared SQLite store; every call of its tool appends one line to a side-effect file. The
driver approves every pending request through `sandbox approvals serve`'s JSON API (HTTP
to 127.0.0.1 only, bounded loops and timeouts). With ``--kill-server`` the server is
killed with SIGKILL half-way and started again on the same port and token.

Checked at the end: every call ran exactly once (side-effect lines), none was lost
(every worker call returned its tool's result). Prints the throughput in approvals per
second. Exit status 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

TOKEN = "load-test-token-" + "x" * 24


# -- worker: one process holding the tool --------------------------------------------------

def worker(store: str, effect: str, worker_id: int, count: int) -> None:
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks on demand, to debug
    from sandbox import FunctionTool, ToolRunner
    from sandbox.approval.queue import QueueConfirmationProvider

    def touch(n: int) -> dict[str, Any]:
        line = f"w{worker_id}-{n}\n".encode()
        fd = os.open(effect, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)  # one small O_APPEND write: whole lines, never interleaved
        finally:
            os.close(fd)
        return {"touched": n}

    provider = QueueConfirmationProvider(store, poll_interval=0.05, timeout=300)
    runner = ToolRunner([FunctionTool(touch, require_confirmation=True, run_in_thread=False)],
                        provider=provider, store_path=store)
    results: dict[int, Any] = {}

    async def one(n: int) -> None:
        results[n] = await runner.call("touch", {"n": n}, call_id=f"w{worker_id}-{n}")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)

    anyio.run(main)
    statuses = Counter("done" if r == {"touched": n} else str(r.get("status"))
                       for n, r in results.items())
    print(json.dumps({"worker": worker_id, "statuses": dict(statuses)}), flush=True)


# -- driver ----------------------------------------------------------------------------------

class Server:
    """`sandbox approvals serve` as a child process, killable and restartable."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def start(self) -> None:
        env = {**os.environ, "SANDBOX_APPROVALS_TOKEN": TOKEN}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox", "approvals", "serve", "--store", str(self.store),
             "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not match:
            raise RuntimeError(f"the server did not start: {line!r}")
        self.port = int(match.group(1))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def approve_all(server: Server, total: int, *, kill_at: int | None, deadline: float,
                      concurrency: int) -> dict[str, Any]:
    """Approve every pending request through the API until all are, or the deadline.

    With ``kill_at``, a watcher SIGKILLs the server once that many approvals went
    through — while other posts are in flight — and starts it again on the same port.
    A post whose response was lost is retried; 409 (answered already) then counts as
    approved, because the first post's answer is in the store.
    """
    import httpx

    headers = {"Authorization": f"Bearer {TOKEN}", "X-Sandbox-User": "load-test"}
    approved: set[str] = set()
    # Posts whose response was lost: the answer may or may not be in the store, and an
    # answered request no longer shows as unanswered, so these are posted again
    # explicitly (a 409 then proves the first post landed).
    uncertain: set[str] = set()
    counts = {"posts": 0, "http_errors": 0, "conflicts": 0}
    first_post: float | None = None
    killed = anyio.Event()
    reached = anyio.Event()
    limiter = anyio.Semaphore(concurrency)

    async def post(client: httpx.AsyncClient, rid: str) -> None:
        async with limiter:
            try:
                r = await client.post(f"{server.base}/api/requests/{rid}/answer",
                                      json={"outcome": "approve"}, headers=headers)
            except httpx.HTTPError:
                counts["http_errors"] += 1
                uncertain.add(rid)
                return
            uncertain.discard(rid)
            counts["posts"] += 1
            if r.status_code == 409:
                counts["conflicts"] += 1
            if r.status_code in (200, 409):
                approved.add(rid)
                if kill_at is not None and len(approved) >= kill_at:
                    reached.set()
            else:
                counts["http_errors"] += 1

    async def killer() -> None:
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            await reached.wait()
        server.kill()  # SIGKILL with posts in flight, then start again on the same port
        await anyio.to_thread.run_sync(server.start)
        server.restarts += 1
        killed.set()

    async with httpx.AsyncClient(timeout=10) as client, anyio.create_task_group() as outer:
        if kill_at is not None:
            outer.start_soon(killer)
        while len(approved) < total and time.monotonic() < deadline:
            try:
                r = await client.get(f"{server.base}/api/pending",
                                     params={"unanswered": "1", "limit": "200"}, headers=headers)
                batch = [q["id"] for q in r.json()["requests"]] if r.status_code == 200 else []
            except (httpx.HTTPError, ValueError):
                counts["http_errors"] += 1
                await anyio.sleep(0.1)
                continue
            batch = [rid for rid in {*batch, *uncertain} if rid not in approved]
            if not batch:
                await anyio.sleep(0.05)
                continue
            if first_post is None:
                first_post = time.monotonic()
            async with anyio.create_task_group() as tg:
                for rid in batch:
                    tg.start_soon(post, client, rid)
        outer.cancel_scope.cancel()
    return {"approved": len(approved), **counts, "first_post": first_post,
            "server_killed": killed.is_set()}


def drive(requests: int, processes: int, kill_server: bool, workdir: Path,
          timeout: float, concurrency: int) -> dict[str, Any]:
    store = workdir / "approvals.db"
    effect = workdir / "effect.txt"
    from sandbox import ApprovalStore

    ApprovalStore(store).close()
    server = Server(store)
    server.start()
    per = [requests // processes + (1 if i < requests % processes else 0)
           for i in range(processes)]
    workers = [subprocess.Popen(
        [sys.executable, __file__, "--worker", str(store), str(effect), str(i), str(n)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i, n in enumerate(per)]
    started = time.monotonic()
    try:
        outcome = anyio.run(lambda: approve_all(
            server, requests, kill_at=requests // 2 if kill_server else None,
            deadline=started + timeout, concurrency=concurrency))
        reports = []
        for proc in workers:
            out, err = proc.communicate(timeout=max(1.0, started + timeout - time.monotonic()))
            if proc.returncode != 0:
                raise RuntimeError(f"worker failed ({proc.returncode}): {err[-2000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        finished = time.monotonic()
    finally:
        for proc in workers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        server.kill()
    lines = effect.read_text().splitlines() if effect.exists() else []
    runs = Counter(lines)
    expected = {f"w{i}-{n}" for i, count in enumerate(per) for n in range(count)}
    statuses: Counter[str] = Counter()
    for report in reports:
        statuses.update(report["statuses"])
    first = outcome.pop("first_post") or started
    return {
        "requests": requests, "processes": processes, **outcome,
        "server_restarts": server.restarts,
        "ran_once": sum(1 for key in expected if runs[key] == 1),
        "ran_twice_or_more": sum(1 for key in expected if runs[key] > 1),
        "never_ran": sum(1 for key in expected if runs[key] == 0),
        "unexpected_lines": sum(1 for key in runs if key not in expected),
        "call_statuses": dict(statuses),
        "seconds": round(finished - first, 3),
        "approvals_per_second": round(requests / max(finished - first, 1e-9), 1),
        "ok": (len(lines) == requests and all(runs[k] == 1 for k in expected)
               and statuses == Counter({"done": requests})),
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--kill-server", action="store_true",
                        help="SIGKILL the web server half-way and restart it")
    parser.add_argument("--concurrency", type=int, default=16, help="parallel HTTP posts")
    parser.add_argument("--timeout", type=float, default=100.0, help="give up after (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="approvals-load-") as tmp:
        report = drive(args.requests, args.processes, args.kill_server, Path(tmp),
                       args.timeout, args.concurrency)
    if args.json:
        print(json.dumps(report))
    else:
        width = max(len(k) for k in report)
        for key, value in report.items():
            print(f"{key:<{width}}  {value}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
