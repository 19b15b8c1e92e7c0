"""Load and faults: 1,000 pending approvals from 4 processes sharing one SQLite file,
approved concurrently through the web API while the server is SIGKILLed and restarted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "approvals_load.py"


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
