"""Load and faults: 1,000 pending approvals from 4 processes sharing one SQLite file,
approved concurrently through the web API while the server is SIGKILLed and restarted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO

BENCH = REPO / "bench" / "approvals_load.py"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_every_call_runs_exactly_once_when_the_server_is_killed_mid_way() -> None:
    # The benchmark kills every process it starts (by PID) before it returns.
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--requests", "1000", "--processes", "4",
         "--kill-server", "--timeout", "90", "--json"],
        capture_output=True, text=True, timeout=110,
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["server_killed"] and report["server_restarts"] == 1
    assert report["approved"] == 1000
    assert report["ran_once"] == 1000
    assert report["ran_twice_or_more"] == 0
    assert report["never_ran"] == 0
    assert report["unexpected_lines"] == 0
    assert report["call_statuses"] == {"done": 1000}
    assert report["ok"] and proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.needs_postgres
@pytest.mark.timeout(300)
def test_on_postgresql_a_killed_worker_is_in_doubt_and_a_restart_loses_nothing() -> None:
    """8 workers with their own host ids, 2 page servers; worker 0 SIGKILLed mid-call
    (swept in_doubt from another host, its calls made again by a replacement), the
    PostgreSQL server crash-restarted half-way."""
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--pg-cluster", "--requests", "400", "--workers", "8",
         "--servers", "2", "--kill-worker", "--restart-db", "--timeout", "240", "--json"],
        capture_output=True, text=True, timeout=290,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["store"] == "postgresql" and report["servers"] == 2
    assert report["worker_killed"] and report["db_restarted"]
    doomed = "w0-1000000000"
    assert doomed in report["swept_in_doubt"] and doomed in report["in_doubt"]
    # The kill can also land while another of worker 0's approved calls is running (its
    # lease taken, its result not yet recorded): that call is in doubt too, rightly. Only
    # worker 0's calls may be; each ran at most once; every other call ran exactly once.
    in_doubt = report["in_doubt"]
    assert all(call.startswith("w0-") for call in in_doubt), in_doubt
    assert set(report["swept_in_doubt"]) <= set(in_doubt)
    assert report["ran_twice_or_more"] == 0 and report["unexpected_lines"] == 0
    assert report["ran_once"] + report["never_ran"] == 401
    assert report["never_ran"] <= len(in_doubt) - 1  # the doomed call ran once
    assert report["not_done_states"] == {"in_doubt": len(in_doubt)}
    assert report["ok"] and proc.returncode == 0, proc.stderr[-2000:]
