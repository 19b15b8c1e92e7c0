"""A throwaway PostgreSQL cluster of the real Debian server, for the store tests.

`Cluster.start()` runs ``initdb`` in a fresh temporary directory as an unprivileged
user (PostgreSQL refuses to run as root), listens only on a unix socket inside that
directory (``listen_addresses=''``: nothing on the network), and starts the server with
``pg_ctl``. ``fsync`` is off (the tests never lose the machine, only the server), but
``synchronous_commit`` stays on: a restart with ``-m immediate`` is a crash, and an
asynchronous commit would be lost in it. `Cluster.destroy()` stops it with
``-m immediate`` and removes the directory; `Cluster.restart()` crashes and restarts it.
Each test gets its own schema (`Cluster.fresh_url`), so tests never see each other's
rows. Used by tests/conftest.py and bench/approvals_load.py.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

#: The database role the tests connect as (created by initdb, trusted on the socket).
ROLE = "sandbox"
DATABASE = "postgres"


class ClusterUnavailable(RuntimeError):
    pass


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not found:
        raise ClusterUnavailable(
            "the PostgreSQL server is not installed (no /usr/lib/postgresql/*/bin/initdb): "
            "run scripts/test.sh, which installs it, or apt-get install postgresql")
    return Path(found[-1]).parent


def _unprivileged_user() -> tuple[str, int, int]:
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return entry.pw_name, entry.pw_uid, entry.pw_gid
    entry = pwd.getpwnam("nobody")
    return entry.pw_name, entry.pw_uid, entry.pw_gid


class Cluster:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.user, self.uid, self.gid = _unprivileged_user()
        self.dir = Path(tempfile.mkdtemp(prefix="sandbox-pg-"))
        self.data = self.dir / "data"
        self.socket_dir = self.dir
        self.log = self.dir / "server.log"
        os.chmod(self.dir, 0o755)  # the server's user writes here; clients reach the socket
        if os.geteuid() == 0:
            os.chown(self.dir, self.uid, self.gid)
        self.running = False

    def _run(self, *argv: str, timeout: float = 60) -> None:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            cmd = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                   *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=self.dir, env={**os.environ, "LC_ALL": "C"})
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise ClusterUnavailable(
                f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n"
                f"{log}")

    def start(self) -> Cluster:
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", ROLE, "--auth=trust",
                      "--no-sync", "-E", "UTF8", "--locale=C")
            with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
                conf.write(
                    "\nlisten_addresses = ''\n"
                    f"unix_socket_directories = '{self.socket_dir}'\n"
                    "fsync = off\nfull_page_writes = off\n"
                    "max_connections = 200\nshared_buffers = 32MB\n")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "start")
        self.running = True
        return self

    def stop(self, mode: str = "immediate") -> None:
        if self.running:
            self.running = False
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "immediate", down_for: float = 0.0) -> None:
        """Stop the server (``immediate``: like a crash, every connection cut) and start it
        again on the same data directory and socket."""
        self.stop(mode)
        if down_for:
            time.sleep(down_for)
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(ClusterUnavailable, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql://{ROLE}@/{DATABASE}?host={self.socket_dir}"

    def fresh_url(self) -> str:
        """A URL whose tables live in a new, empty schema of their own."""
        import psycopg

        schema = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return f"{self.url}&options=-csearch_path%3D{schema}"
