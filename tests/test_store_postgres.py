"""The PostgreSQL store against a real server (tests/pgcluster.py): the throwaway
cluster itself, races between processes, leases across hosts, and a server restart."""

from __future__ import annotations

import os
import pwd
from typing import Any

import psutil
import pytest

pytestmark = [pytest.mark.timeout(120)]


def test_the_cluster_runs_unprivileged_on_a_unix_socket_only(pg_cluster: Any) -> None:
    pid = int((pg_cluster.data / "postmaster.pid").read_text().split()[0])
    server = psutil.Process(pid)
    assert server.uids().real != 0 and pwd.getpwuid(server.uids().real).pw_name == \
        pg_cluster.user
    assert not [c for c in server.net_connections(kind="inet") if c.status == "LISTEN"]
    assert os.path.exists(os.path.join(pg_cluster.socket_dir, ".s.PGSQL.5432"))
