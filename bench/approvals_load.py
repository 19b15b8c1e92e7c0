"""Load and faults: many pending approvals from several processes, approved through the web API.

    .venv/bin/python bench/approvals_load.py [--requests 1000] [--processes 4]
                                             [--kill-server] [--json]
    .venv/bin/python bench/approvals_load.py --pg-cluster --requests 10000 --workers 8 \
        --servers 2 --kill-worker --restart-db --compare-sqlite

Each worker process holds a ToolRunner whose QueueConfirmationProvider waits on one
shared store (``--store``: a SQLite file, the default, or a ``postgresql://`` URL;
``--pg-cluster`` starts a throwaway PostgreSQL cluster, tests/pgcluster.py, and uses it);
every call of its tool appends one line to a side-effect file. Each worker presents its
own host id (``SANDBOX_HOST_ID=host-N``). The driver approves every pending request
through the JSON API of ``--servers`` `sandbox approvals serve` processes (HTTP to
127.0.0.1 only, bounded loops and timeouts), round robin.

Faults, each once, half-way through the approvals:

- ``--kill-server``: one page server is SIGKILLed and started again (same port, token);
- ``--kill-worker``: worker 0 makes one more call whose tool writes its line and then
  hangs; it is SIGKILLed there, mid-call. The driver, presenting another host id, sweeps
  the store (`in_doubt`) until that call is reported ``in_doubt`` (its lease runs out:
  ``SANDBOX_LEASE_SECONDS``, 2 s here). A replacement worker (another host id) then
  makes worker 0's calls again, by their call ids: finished ones are answered from the
  store, waiting ones are waited for, and none runs twice;
- ``--restart-db`` (with ``--pg-cluster``): the PostgreSQL server is restarted with
  ``-m immediate`` (a crash). Workers reconnect; an operation cut off in flight raises
  `StoreError` and the worker makes the call again by its call id.

Checked at the end: every call ran exactly once or is reported ``in_doubt`` (and ran at
most once), none was lost. Prints the throughput in approvals per second; with
``--compare-sqlite`` the same load (without the database restart) runs on a SQLite file
too and both are printed side by side. Exit status 0 only if every check passed.
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

#: The extra call worker 0 makes with --kill-worker: its tool hangs after its effect.
DOOMED = 10**9


def worker(store: str, effect: str, worker_id: int, count: int, doomed: str = "") -> None:
    """``doomed``: a marker file; make call DOOMED too, which hangs once it has run."""
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks on demand, to debug
    from sandbox import FunctionTool, StoreError, ToolRunner
    from sandbox.approval.channels.queue import QueueConfirmationProvider

    async def touch(n: int) -> dict[str, Any]:
        line = f"w{worker_id}-{n}\n".encode()
        fd = os.open(effect, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)  # one small O_APPEND write: whole lines, never interleaved
        finally:
            os.close(fd)
        if n == DOOMED:
            Path(doomed).touch()
            await anyio.sleep(3600)  # killed here, mid-call
        return {"touched": n}

    provider = QueueConfirmationProvider(store, poll_interval=0.05, timeout=300)
    runner = ToolRunner([FunctionTool(touch, require_confirmation=True)],
                        provider=provider, store=store)
    results: dict[int, Any] = {}
    retries = Counter[str]()

    async def one(n: int) -> None:
        call_id = f"w{worker_id}-{n}"
        for _ in range(100):
            try:
                result = await runner.call("touch", {"n": n}, call_id=call_id)
                if result.get("status") == "awaiting_confirmation":
                    # Made again (after a lost connection, or by a replacement worker):
                    # the request is still pending; wait for its answer and apply it.
                    req = await anyio.to_thread.run_sync(runner.store.get_request,
                                                         result["confirmation_id"])
                    decision = await provider.confirm(req)
                    result = await runner.resume(req.id, decision)
                results[n] = result
                return
            except StoreError as exc:
                retries[str(exc).split("(")[0][-60:]] += 1
                await anyio.sleep(0.2)
        results[n] = {"status": "gave up"}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
            if doomed:
                tg.start_soon(one, DOOMED)

    anyio.run(main)
    statuses = Counter("done" if r == {"touched": n} or r == {"touched": n, "replayed": True}
                       else str(r.get("status")) for n, r in results.items())
    print(json.dumps({"worker": worker_id, "statuses": dict(statuses),
                      "store_errors_retried": sum(retries.values())}), flush=True)


# -- driver ----------------------------------------------------------------------------------

class Server:
    """`sandbox approvals serve` as a child process, killable and restartable."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def start(self) -> None:
        env = {**os.environ, "SANDBOX_APPROVALS_TOKEN": TOKEN}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox", "approvals", "serve", "--store", self.store,
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


async def approve_all(servers: list[Server], total: int, *, kill_at: int | None,
                      deadline: float, concurrency: int,
                      faults: list[Any] | None = None) -> dict[str, Any]:
    """Approve every pending request through the APIs until all are, or the deadline.

    With ``kill_at``, a watcher SIGKILLs the first server once that many approvals went
    through — while other posts are in flight — and starts it again on the same port.
    ``faults``: functions run in a thread once half the approvals went through.
    A post whose response was lost is retried; 409 (answered already) then counts as
    approved, because the first post's answer is in the store.
    """
    server = servers[0]
    turn = [0]
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

    half = anyio.Event()
    faults_done = anyio.Event()
    fault_notes: list[Any] = []

    async def post(client: httpx.AsyncClient, rid: str) -> None:
        async with limiter:
            turn[0] += 1
            target = servers[turn[0] % len(servers)]
            try:
                r = await client.post(f"{target.base}/api/requests/{rid}/answer",
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
                if len(approved) >= total // 2:
                    half.set()
            else:
                counts["http_errors"] += 1

    async def killer() -> None:
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            await reached.wait()
        server.kill()  # SIGKILL with posts in flight, then start again on the same port
        await anyio.to_thread.run_sync(server.start)
        server.restarts += 1
        killed.set()

    async def fault() -> None:
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            await half.wait()
        for fn in faults or ():
            fault_notes.append(await anyio.to_thread.run_sync(fn))
        faults_done.set()

    async with httpx.AsyncClient(timeout=10) as client, anyio.create_task_group() as outer:
        if kill_at is not None:
            outer.start_soon(killer)
        if faults:
            outer.start_soon(fault)
        while len(approved) < total and time.monotonic() < deadline:
            lister = servers[turn[0] % len(servers)]
            try:
                r = await client.get(f"{lister.base}/api/pending",
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
        if faults:  # the faults run to their end (the swept call, the replacement)
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                await faults_done.wait()
        outer.cancel_scope.cancel()
    return {"approved": len(approved), **counts, "first_post": first_post,
            "server_killed": killed.is_set(), "faults": fault_notes}


def drive(requests: int, processes: int, kill_server: bool, workdir: Path,
          timeout: float, concurrency: int, *, store: str | None = None, servers: int = 1,
          kill_worker: bool = False, restart_db: Any = None) -> dict[str, Any]:
    """One load run. ``restart_db``: a function restarting the database server."""
    store = store or str(workdir / "approvals.db")
    effect = workdir / "effect.txt"
    marker = workdir / "doomed"
    from sandbox import ApprovalStore

    os.environ["SANDBOX_HOST_ID"] = "driver"  # the sweep runs on "another host"
    ApprovalStore(store).close()
    pages = [Server(store) for _ in range(servers)]
    for page in pages:
        page.start()
    per = [requests // processes + (1 if i < requests % processes else 0)
           for i in range(processes)]
    lease = os.environ.get("SANDBOX_LEASE_SECONDS", "5")

    def spawn(i: int, count: int, host: str, doomed: str = "") -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, __file__, "--worker", store, str(effect), str(i), str(count),
             doomed],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "SANDBOX_HOST_ID": host, "SANDBOX_LEASE_SECONDS": lease})

    workers = [spawn(i, n, f"host-{i}", str(marker) if kill_worker and i == 0 else "")
               for i, n in enumerate(per)]
    replacement: list[subprocess.Popen[str]] = []
    faults: list[Any] = []
    swept: dict[str, Any] = {}

    def kill_and_sweep() -> dict[str, Any]:
        """SIGKILL worker 0 inside its doomed call; sweep from here until it is in doubt;
        start a replacement worker (another host) for worker 0's calls."""
        t0 = time.monotonic()
        while not marker.exists() and time.monotonic() - t0 < timeout:
            time.sleep(0.01)
        os.kill(workers[0].pid, signal.SIGKILL)
        workers[0].wait()
        killed_at = time.monotonic()
        doomed_id = f"w0-{DOOMED}"
        with ApprovalStore(store) as sweeper:
            while time.monotonic() - killed_at < 60:
                if any(r.call_id == doomed_id for r in sweeper.in_doubt()):
                    swept["swept_in_doubt"] = [r.call_id for r in sweeper.in_doubt()]
                    break
                time.sleep(0.1)
        swept["seconds_to_in_doubt"] = round(time.monotonic() - killed_at, 2)
        replacement.append(spawn(0, per[0], "host-0-replacement"))
        return {"worker_killed": True, **swept}

    def restart() -> dict[str, Any]:
        t0 = time.monotonic()
        restart_db()
        return {"db_restarted": True, "db_down_seconds": round(time.monotonic() - t0, 2)}

    if kill_worker:
        faults.append(kill_and_sweep)
    if restart_db is not None:
        faults.append(restart)
    expected = {f"w{i}-{n}" for i, count in enumerate(per) for n in range(count)}
    if kill_worker:
        expected.add(f"w0-{DOOMED}")
    started = time.monotonic()
    try:
        outcome = anyio.run(lambda: approve_all(
            pages, requests + (1 if kill_worker else 0),
            kill_at=requests // 2 if kill_server else None,
            deadline=started + timeout, concurrency=concurrency, faults=faults))
        reports = []
        for proc in [*workers[1 if kill_worker else 0:], *replacement]:
            out, err = proc.communicate(timeout=max(1.0, started + timeout - time.monotonic()))
            if proc.returncode != 0:
                raise RuntimeError(f"worker failed ({proc.returncode}): {err[-2000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        finished = time.monotonic()
        with ApprovalStore(store) as final:
            states = {k: final.get_call(k).state for k in sorted(expected)}
            if any(state != "done" for state in states.values()):
                # Calls left behind by workers that have exited: their leases run out.
                time.sleep(float(lease) + 1)
                final.in_doubt()
                states = {k: final.get_call(k).state for k in sorted(expected)}
            in_doubt = {k for k, state in states.items() if state == "in_doubt"}
    finally:
        for proc in [*workers, *replacement]:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        for page in pages:
            page.kill()
    lines = effect.read_text().splitlines() if effect.exists() else []
    runs = Counter(lines)
    statuses: Counter[str] = Counter()
    for report in reports:
        statuses.update(report["statuses"])
    first = outcome.pop("first_post") or started
    fault_notes = outcome.pop("faults")
    done_once = {k for k in expected if runs[k] == 1 and states[k] == "done"}
    return {
        "store": "postgresql" if store.startswith("postgres") else "sqlite",
        "requests": requests, "processes": processes, "servers": servers, **outcome,
        "server_restarts": sum(p.restarts for p in pages),
        **{k: v for note in fault_notes for k, v in note.items()},
        "ran_once": sum(1 for key in expected if runs[key] == 1),
        "ran_twice_or_more": sum(1 for key in expected if runs[key] > 1),
        "never_ran": sum(1 for key in expected if runs[key] == 0),
        "in_doubt": sorted(in_doubt),
        "unexpected_lines": sum(1 for key in runs if key not in expected),
        "call_statuses": dict(statuses),
        "store_errors_retried": sum(r.get("store_errors_retried", 0) for r in reports),
        "seconds": round(finished - first, 3),
        "approvals_per_second": round(requests / max(finished - first, 1e-9), 1),
        "not_done_states": dict(Counter(s for s in states.values() if s != "done")),
        # Exactly once, or in doubt (and then at most once); nothing lost, nothing extra.
        "ok": (all(runs[k] <= 1 for k in expected) and not (set(runs) - expected)
               and expected == done_once | in_doubt
               and (not kill_worker or f"w0-{DOOMED}" in in_doubt)),
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
               sys.argv[6] if len(sys.argv) > 6 else "")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--processes", "--workers", type=int, default=4,
                        help="worker processes, each with its own host id")
    parser.add_argument("--store", default=None,
                        help="a SQLite file or a postgresql:// URL (default: a new SQLite "
                             "file in a temporary directory)")
    parser.add_argument("--pg-cluster", action="store_true",
                        help="start a throwaway PostgreSQL cluster and use it as the store")
    parser.add_argument("--servers", type=int, default=1, help="page servers answering")
    parser.add_argument("--kill-server", action="store_true",
                        help="SIGKILL a web server half-way and restart it")
    parser.add_argument("--kill-worker", action="store_true",
                        help="SIGKILL worker 0 mid-call; sweep it in_doubt from another host")
    parser.add_argument("--restart-db", action="store_true",
                        help="restart the PostgreSQL server half-way (needs --pg-cluster)")
    parser.add_argument("--compare-sqlite", action="store_true",
                        help="run the same load on a SQLite file too (no database restart)")
    parser.add_argument("--concurrency", type=int, default=16, help="parallel HTTP posts")
    parser.add_argument("--timeout", type=float, default=100.0, help="give up after (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.restart_db and not args.pg_cluster:
        parser.error("--restart-db needs --pg-cluster (the bench restarts only a server it "
                     "started)")
    reports = []
    cluster = None
    try:
        if args.pg_cluster:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.pgcluster import Cluster

            cluster = Cluster().start()
            args.store = cluster.fresh_url()
        with tempfile.TemporaryDirectory(prefix="approvals-load-") as tmp:
            reports.append(drive(
                args.requests, args.processes, args.kill_server, Path(tmp), args.timeout,
                args.concurrency, store=args.store, servers=args.servers,
                kill_worker=args.kill_worker,
                restart_db=(lambda: cluster.restart("immediate")) if args.restart_db
                and cluster is not None else None))
        if args.compare_sqlite:
            with tempfile.TemporaryDirectory(prefix="approvals-load-") as tmp:
                reports.append(drive(
                    args.requests, args.processes, args.kill_server, Path(tmp),
                    args.timeout, args.concurrency, servers=args.servers,
                    kill_worker=args.kill_worker))
    finally:
        if cluster is not None:
            cluster.destroy()
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports))
    else:
        keys = list(dict.fromkeys(k for r in reports for k in r))
        width = max(len(k) for k in keys)
        for key in keys:
            print(f"{key:<{width}}  " + "  ".join(f"{r.get(key, '-')!s:<24}"
                                                  for r in reports))
    return 0 if all(r["ok"] for r in reports) else 1


if __name__ == "__main__":
    raise SystemExit(main())
