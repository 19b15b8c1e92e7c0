"""The PostgreSQL store against a real server (tests/pgcluster.py): the throwaway
cluster itself, races between processes, leases across hosts, and a server restart."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from sandbox import FunctionTool, QueueConfirmationProvider, StoreError, ToolRunner
from sandbox.approval.store import Owner, open_store
from sandbox.approval.store.postgres import SCHEMA_VERSION

psycopg = pytest.importorskip("psycopg")

pytestmark = [pytest.mark.timeout(120)]


def test_the_cluster_runs_unprivileged_on_a_unix_socket_only(pg_cluster: Any) -> None:
    pid = int((pg_cluster.data / "postmaster.pid").read_text().split()[0])
    server = psutil.Process(pid)
    assert server.uids().real != 0 and pwd.getpwuid(server.uids().real).pw_name == \
        pg_cluster.user
    assert not [c for c in server.net_connections(kind="inet") if c.status == "LISTEN"]
    assert os.path.exists(os.path.join(pg_cluster.socket_dir, ".s.PGSQL.5432"))


# -- helpers -------------------------------------------------------------------------------

def _python(code: str, *args: str, env: dict[str, str] | None = None,
            **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})}, **kwargs)


def _approved(store: Any, call_id: str) -> str:
    """A call with an approval waiting to be claimed; its digest."""
    digest = f"d-{call_id}"
    store.open_call(call_id, "t", digest, {"x": call_id})
    rid, _ = store.park(call_id=call_id, tool="t", args={"x": call_id}, digest=digest,
                        hint="", payload=None, kind="static", expires_at=None)
    store.decide(rid, status="approved", outcome="approve", decided_by="test")
    return digest


def _wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


CLAIMER = """
import json, sys, time
from sandbox.approval.store import open_store
url, go, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(url)
print("ready", flush=True)
import os
while not os.path.exists(go):
    time.sleep(0.001)
won = [i for i in range(n) if store.start(f"c{i}", f"d-c{i}")]
print(json.dumps(won), flush=True)
store.close()
"""


# -- races between processes ---------------------------------------------------------------

def test_two_processes_racing_start_on_each_call_claim_it_once(pg_url: str,
                                                               tmp_path: Path) -> None:
    n = 200
    store = open_store(pg_url)
    for i in range(n):
        _approved(store, f"c{i}")
    go = tmp_path / "go"
    procs = [_python(CLAIMER, pg_url, str(go), str(n)) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        go.touch()
        won = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            won.append(set(json.loads(out.splitlines()[-1])))
    finally:
        for proc in procs:
            proc.kill()
    assert won[0] | won[1] == set(range(n)) and not won[0] & won[1]
    for i in (0, n - 1):
        journal = [s for s, _, _ in store.journal(f"c{i}")]
        assert journal == ["new", "awaiting", "approved", "started"]
    store.close()


# -- leases: a worker on another host --------------------------------------------------------

HOLDER = """
import sys, time
from sandbox.approval.store import open_store
url, action = sys.argv[1], sys.argv[2]
store = open_store(url)
store.open_call("c1", "t", "d1", {"x": 1})
if action == "start":
    assert store.start("c1", "d1")
print("holding", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("action, expected", [("start", "in_doubt"), ("open", "abandoned")])
def test_a_worker_on_another_host_that_stops_heartbeating_is_swept_from_here(
        shared_store: str, action: str, expected: str) -> None:
    """On PostgreSQL and on a SQLite file alike: the lease, not the pid, decides."""
    pg_url = shared_store
    lease = 1.0
    worker = _python(HOLDER, pg_url, action,
                     env={"SANDBOX_HOST_ID": "host-b", "SANDBOX_LEASE_SECONDS": str(lease)})
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "holding"
        here = open_store(pg_url, lease_seconds=lease)
        rec = here.get_call("c1")
        assert rec.owner is not None and rec.owner.startswith("host-b:")
        assert Owner.alive(rec.owner) is None  # another host: its pid means nothing here
        # Alive and heartbeating for several lease lengths: never swept.
        time.sleep(lease * 3)
        assert here.in_doubt() == [] and here.get_call("c1").state == (
            "started" if action == "start" else "new")

        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        _wait_for(lambda: (here.in_doubt(), here.get_call("c1").state)[1] == expected,
                  timeout=lease * 10, what=f"the sweep to mark c1 {expected}")
        journal = [s for s, _, _ in here.journal("c1")]
        assert journal[-1] == expected and journal.count("started") == (action == "start")
        assert [n for s, _, n in here.journal("c1") if s == expected] == [
            "owner's lease expired"]
        if action == "start":  # never started again, from any host
            assert [r.call_id for r in here.in_doubt()] == ["c1"]
            assert here.start("c1", "d1") is False
        else:  # never ran: made again, it starts over here
            assert here.open_call("c1", "t", "d1", {"x": 1}) is None
            assert here.start("c1", "d1") is True
        here.close()
    finally:
        worker.kill()
        worker.wait(10)


def test_a_lease_is_on_the_server_clock_and_renewed_by_the_heartbeat(pg_url: str) -> None:
    store = open_store(pg_url, lease_seconds=0.6)
    store.open_call("c1", "t", "d1", {})
    raw = psycopg.connect(pg_url, autocommit=True)
    first = raw.execute("SELECT expires - extract(epoch from clock_timestamp()) FROM leases"
                        ).fetchone()
    assert first is not None and 0 < first[0] <= 0.6
    time.sleep(1.5)  # several heartbeats later, the lease still lies ahead
    (left,) = raw.execute("SELECT expires - extract(epoch from clock_timestamp()) FROM leases"
                          ).fetchone() or (None,)
    assert left is not None and left > 0
    store.close()
    time.sleep(0.8)  # closed: no more heartbeats, the lease runs out
    (left,) = raw.execute("SELECT expires - extract(epoch from clock_timestamp()) FROM leases"
                          ).fetchone() or (None,)
    assert left is not None and left < 0
    raw.close()


# -- a server restart ------------------------------------------------------------------------

def test_a_server_restart_mid_run_reconnects_and_loses_nothing(pg_cluster: Any,
                                                                pg_url: str) -> None:
    store = open_store(pg_url)
    other = open_store(pg_url)
    done = []
    for i in range(20):
        store.open_call(f"c{i}", "t", f"d{i}", {"i": i})
        assert store.start(f"c{i}", f"d{i}")
        store.finish(f"c{i}", "done", {"i": i})
        done.append(f"c{i}")
    _approved(store, "a1")
    cursor = store.answer_cursor()
    assert cursor is not None

    pg_cluster.restart("immediate")  # a crash: every connection is cut

    # Every row written before is there, and the same store objects go on working.
    assert [store.get_call(c).state for c in done] == ["done"] * len(done)
    assert store.start("a1", "d-a1") is True
    store.finish("a1", "done", None)
    for i in range(20, 40):
        store.open_call(f"c{i}", "t", f"d{i}", {"i": i})
        assert store.start(f"c{i}", f"d{i}")
        store.finish(f"c{i}", "done", {"i": i})
    # The listener reconnected too: an answer recorded by another process wakes it.
    store.open_call("p1", "t", "dp", {})
    rid, _ = store.park(call_id="p1", tool="t", args={}, digest="dp", hint="", payload=None,
                        kind="static", expires_at=None)
    cursor = store.answer_cursor()
    assert cursor is not None
    other.submit_answer(rid, True, decided_by="other")
    t0 = time.monotonic()
    new, named = store.wait_answers(cursor, 10)
    assert new != cursor and (named is None or rid in named)  # None: "look at all"
    assert time.monotonic() - t0 < 5
    assert store.answer_states([rid])[rid][1] is not None
    journal_total = sum(len(store.journal(f"c{i}")) for i in range(40))
    assert journal_total == 40 * 3  # new, started, done: none lost, none doubled
    store.close()
    other.close()


def test_a_transaction_cut_by_a_restart_is_an_error_and_leaves_nothing(
        pg_cluster: Any, pg_url: str) -> None:
    store = open_store(pg_url)
    store.open_call("c1", "t", "d1", {})
    with pytest.raises(StoreError, match="rolled it back, nothing of it was written"), \
            store._tx():
        store._x("UPDATE calls SET state='started', note='half' WHERE call_id='c1'")
        pg_cluster.restart("immediate")
        store._x("SELECT 1")
    assert store.get_call("c1").state == "new"
    assert [s for s, _, _ in store.journal("c1")] == ["new"]
    store.close()


def test_a_write_while_the_server_is_down_is_a_clear_error_naming_the_url(
        pg_cluster: Any, pg_url: str) -> None:
    store = open_store(pg_url, reconnect_timeout=0.5)
    pg_cluster.stop("fast")
    try:
        with pytest.raises(StoreError) as err:
            store.open_call("c1", "t", "d1", {})
        assert "postgresql://sandbox@" in str(err.value) and "server" in str(err.value)
    finally:
        pg_cluster.start()
    assert store.open_call("c1", "t", "d1", {}) is None  # back: it reconnects by itself
    store.close()


# -- waiting for answers: NOTIFY, not polling --------------------------------------------------

async def _queue_answer(pg_url: str) -> tuple[dict[str, Any], float]:
    import anyio

    provider = QueueConfirmationProvider(pg_url, poll_interval=30, timeout=20)
    runner = ToolRunner([FunctionTool(lambda x: {"ran": x}, name="f",
                                      require_confirmation=True)],
                        provider=provider, store=pg_url)
    answerer = open_store(pg_url)
    out: dict[str, Any] = {}

    async def call() -> None:
        out.update(await runner.call("f", {"x": 1}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        for _ in range(1000):
            if answerer.pending():
                break
            await anyio.sleep(0.02)
        await anyio.sleep(0.3)  # the provider is asleep on the store by now
        [req] = answerer.pending()
        t0 = time.monotonic()
        answerer.submit_answer(req.id, True, decided_by="web")
    took = time.monotonic() - t0
    answerer.close()
    runner.store.close()
    provider.store.close()
    return out, took


@pytest.mark.anyio
async def test_the_queue_provider_wakes_on_notify_not_on_its_poll_interval(
        pg_url: str) -> None:
    result, took = await _queue_answer(pg_url)
    assert result == {"ran": 1}
    assert took < 3  # poll_interval is 30 s: only the notification could have woken it


# -- migrations --------------------------------------------------------------------------------

def test_migrations_are_recorded_once_and_a_newer_schema_is_refused(pg_url: str) -> None:
    procs = [_python("import sys; from sandbox.approval.store import open_store; "
                     "open_store(sys.argv[1]).close(); print('ok')", pg_url) for _ in range(4)]
    for proc in procs:  # four processes opening a new database at once: one migrates
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.strip() == "ok", err
    raw = psycopg.connect(pg_url, autocommit=True)
    versions = [v for (v,) in raw.execute("SELECT version FROM schema_version ORDER BY 1")]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    raw.execute("INSERT INTO schema_version VALUES (%s, 0)", (SCHEMA_VERSION + 1,))
    raw.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than"):
        open_store(pg_url)


# -- clear errors ---------------------------------------------------------------------------

def test_an_unreachable_server_is_a_clear_error_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql://alice:s3cret@/db?host={tmp_path}"
    with pytest.raises(StoreError) as err:
        open_store(url)
    text = str(err.value)
    assert "s3cret" not in text and "postgresql://alice:***@/db" in text
    assert "No such file or directory" in text or "connect" in text
    with pytest.raises(StoreError, match="unknown kind of approval store"):
        open_store("mysql://x@y/z")


@pytest.mark.parametrize("url", [
    "postgresql://alice:s3cret@[::1:1/db",  # libpq quotes an unparsable URI whole
    "postgres:alice:s3cret@host/db",  # not a URL at all (no //)
    "postgresql:alice:s3cret@host/db",
    "postgresql://[::1:1/db?password=s3cret",
])
def test_a_malformed_url_is_a_clear_error_without_the_password(url: str) -> None:
    """A URL Python cannot split (or no URL at all) had nothing redacted: the error, and
    every log or traceback that shows it, held the password."""
    with pytest.raises(StoreError) as err:
        open_store(url)
    text = str(err.value)
    assert "s3cret" not in text, text
    assert "postgresql://" in text  # it still says what a reference looks like, or which


def test_without_psycopg_the_error_names_the_extra(pg_url: str) -> None:
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from sandbox.approval.store import open_store\n"
            "try:\n    open_store(sys.argv[1])\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    proc = _python(code, pg_url)
    out, err = proc.communicate(timeout=60)
    assert "StoreError" in out and "pip install 'sandbox[postgres]'" in out, (out, err)


def test_sandbox_approvals_serve_and_list_take_a_postgresql_url(pg_url: str) -> None:
    store = open_store(pg_url)
    store.open_call("c1", "t", "d1", {"x": 1})
    rid, _ = store.park(call_id="c1", tool="t", args={"x": 1}, digest="d1", hint="",
                        payload=None, kind="static", expires_at=None)
    listed = subprocess.run([sys.executable, "-m", "sandbox", "approvals", "list", "--store",
                             pg_url, "--json"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert rid in listed.stdout
    serve = subprocess.Popen([sys.executable, "-m", "sandbox", "approvals", "serve",
                              "--store", pg_url, "--port", "0"], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert "postgresql://sandbox@" in line, (line, serve.stderr)
        url = line.rsplit(": ", 1)[1].strip()
        base, token = url.split("/?token=")
        import httpx

        answer = httpx.post(f"{base}/api/requests/{rid}/answer", json={"outcome": "approve"},
                            headers={"Authorization": f"Bearer {token}",
                                     "X-Sandbox-User": "dave"}, timeout=20)
        assert answer.status_code == 200, answer.text
        assert store.get_answer(rid) is not None
    finally:
        serve.kill()
        serve.communicate(timeout=10)
        store.close()


def test_a_lock_held_too_long_by_another_process_is_a_clear_busy_error(pg_url: str) -> None:
    store = open_store(pg_url, busy_timeout=0.5)
    store.open_call("c1", "t", "d1", {})
    holder = psycopg.connect(pg_url, autocommit=True)
    holder.execute("BEGIN")
    holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", (0x5A1D, store._key))
    try:
        with pytest.raises(StoreError, match=r"is busy: another process held its lock"):
            store.park(call_id="c1", tool="t", args={}, digest="d1", hint="", payload=None,
                       kind="static", expires_at=None)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    rid, _ = store.park(call_id="c1", tool="t", args={}, digest="d1", hint="", payload=None,
                        kind="static", expires_at=None)  # free again: it goes through
    assert store.get_request(rid).status == "pending"
    store.close()


@pytest.mark.anyio
async def test_a_request_that_expires_while_the_provider_sleeps_on_notify_times_out(
        pg_url: str) -> None:
    provider = QueueConfirmationProvider(pg_url, poll_interval=30, timeout=20)
    runner = ToolRunner([FunctionTool(lambda x: {"ran": x}, name="f",
                                      require_confirmation=True)],
                        provider=provider, store=pg_url, approval_ttl=1.0)
    t0 = time.monotonic()
    result = await runner.call("f", {"x": 1})
    took = time.monotonic() - t0
    assert result["status"] == "timed_out", result
    assert took < 5  # no notification comes: the expiry itself ends the sleep
    runner.store.close()
    provider.store.close()


# -- one round trip per step: the server-side functions' fall-backs ---------------------

def _deferred_runner(url: str, ran: list[int], **options: Any) -> ToolRunner:
    async def act(n: int) -> dict[str, Any]:
        ran.append(n)
        return {"n": n}

    return ToolRunner([FunctionTool(act, name="act", require_confirmation=True)],
                      store=open_store(url, **options))


@pytest.mark.anyio
async def test_a_parked_request_changed_in_the_store_is_judged_as_stored(pg_url: str
                                                                         ) -> None:
    ran: list[int] = []
    runner = _deferred_runner(pg_url, ran)
    parked = await runner.call("act", {"n": 1})
    rid = parked["confirmation_id"]
    assert runner.store.parked_request(rid) is not None  # the one-round-trip path is tried
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE requests SET args = %s WHERE id = %s", ('{"n": 666}', rid))
    result = await runner.resume(rid, True)
    assert ran == [] and result["status"] == "error", result
    assert "do not match its digest" in result["error"]
    assert runner.store.get_request(rid).status == "error"
    runner.store.close()


@pytest.mark.anyio
async def test_an_answer_waiting_from_another_channel_still_wins_over_resume(pg_url: str
                                                                             ) -> None:
    ran: list[int] = []
    runner = _deferred_runner(pg_url, ran)
    rid = (await runner.call("act", {"n": 2}))["confirmation_id"]
    web = open_store(pg_url)
    web.submit_answer(rid, {"confirmed": False}, decided_by="alice", channel="web")
    result = await runner.resume(rid, True)  # an approval contradicting alice's denial
    assert ran == [] and result["status"] != "ok", result
    assert "alice" in json.dumps(result), result
    assert web.get_request(rid).status == "pending"  # her answer waits to be applied
    denied = await runner.resume(rid)
    assert denied["status"] == "denied" and ran == [], denied
    web.close()
    runner.store.close()


@pytest.mark.anyio
async def test_a_request_decided_elsewhere_first_is_not_decided_again(pg_url: str) -> None:
    ran: list[int] = []
    runner = _deferred_runner(pg_url, ran)
    rid = (await runner.call("act", {"n": 3}))["confirmation_id"]
    other = open_store(pg_url)
    other.decide(rid, status="denied", outcome="deny", decided_by="bob")
    result = await runner.resume(rid, True)
    assert ran == [] and "already answered" in result["error"], result
    assert [s for s, _, _ in runner.store.journal(result["call_id"])] == [
        "new", "awaiting", "denied"]
    other.close()
    runner.store.close()


@pytest.mark.anyio
async def test_opening_and_parking_in_one_round_trip_keeps_the_bounds_and_rules(
        pg_url: str) -> None:
    ran: list[int] = []
    runner = _deferred_runner(pg_url, ran, max_pending=1)
    first = await runner.call("act", {"n": 4})
    assert first["status"] == "awaiting_confirmation", first
    second = await runner.call("act", {"n": 5})
    assert second["status"] == "error" and "max_pending=1" in second["error"], second
    # A rule added after a park that found none is seen by the next call at once.
    runner.rules.add(tool="act", kind="tool", scope="always", ttl=60)
    await runner.resume(first["confirmation_id"], False)
    third = await runner.call("act", {"n": 6})
    assert third == {"n": 6} and ran == [6], third
    runner.store.close()


def test_a_failed_claim_in_the_decision_rolls_the_decision_back(pg_url: str) -> None:
    store = open_store(pg_url)
    store.open_call("c1", "t", "d1", {"x": 1})
    rid, _ = store.park(call_id="c1", tool="t", args={"x": 1}, digest="d1", hint="",
                        payload=None, kind="static", expires_at=None)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the call moved meanwhile
        conn.execute("CREATE FUNCTION block_claim() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN IF NEW.state = 'started' THEN RETURN NULL; END IF; "
                     "RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER block_claim BEFORE UPDATE ON calls FOR EACH ROW "
                     "EXECUTE FUNCTION block_claim()")
    with pytest.raises(Exception, match="no longer waiting"):
        store.decide(rid, status="approved", outcome="approve", decided_by="t", start=True)
    assert store.get_request(rid).status == "pending"
    assert store.get_call("c1").state == "awaiting"
    store.close()


@pytest.mark.anyio
async def test_a_step_that_would_wait_for_the_lock_leaves_the_event_loop_free(
        pg_url: str) -> None:
    """Steps run on the caller's thread over a unix socket (`run_now`) only while they
    wait for nothing: with another process holding the store's lock, the call goes to
    the worker thread and the event loop keeps running until the lock is released."""
    import anyio

    from sandbox.approval.store.postgres import _TX_LOCK

    ran: list[int] = []
    runner = _deferred_runner(pg_url, ran)
    store = runner.store
    assert store._local  # the test cluster listens on a unix socket only
    rid = (await runner.call("act", {"n": 1}))["confirmation_id"]  # warm, inline
    holder = psycopg.connect(pg_url)  # a transaction of another process holds the lock
    holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_TX_LOCK, store._key))
    ticks = 0
    done = anyio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await anyio.sleep(0.01)

    async def release() -> None:
        await anyio.sleep(0.5)
        holder.rollback()

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        tg.start_soon(release)
        result = await runner.resume(rid, True)
        done.set()
    assert result == {"n": 1} and ran == [1], result
    assert ticks >= 20, ticks  # the loop ran while the resume waited for the lock
    holder.close()
    store.close()
