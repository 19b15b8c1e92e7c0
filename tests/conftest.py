from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from sandbox import ApprovalStore
from sandbox.approval.memory_store import MemoryApprovalStore
from tests import machine
from tests.paths import TESTS

PROGRAMS = TESTS / "programs"

# CI explores the same generated cases on every run, so a red build is reproducible
# (run with CI=true locally); elsewhere each run draws new cases.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: Backends a store test runs on. "memory": `MemoryApprovalStore` (what `ApprovalStore()`
#: and a `ToolRunner` without a store use); "sqlite-memory": `ApprovalStore(":memory:")`;
#: "sqlite-file": `ApprovalStore(path)`; "postgresql": `ApprovalStore("postgresql://...")`
#: on the run's throwaway cluster (a new schema per store).
STORE_BACKENDS = ("memory", "sqlite-memory", "sqlite-file", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    registered = {line.split(":")[0].split("(")[0].strip()
                  for line in config.getini("markers")}  # fmt: skip
    unregistered = machine.marker_names() - registered
    if unregistered:
        raise pytest.UsageError(f"tests/machine.py defines {sorted(unregistered)}, which "
                                "pyproject.toml's [tool.pytest.ini_options] markers lack")
    try:
        machine.required_everywhere()  # a misspelled SANDBOX_TESTS_REQUIRE fails at once
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


#: Fixtures (and fixture parameters) that start the run's PostgreSQL cluster.
_POSTGRES_FIXTURES = {"pg_cluster", "pg_url"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the PostgreSQL store needs the server, whether it names the cluster or
    runs on the "postgresql" parameter of a store fixture."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if (_POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ()))
                or "postgresql" in params.values()):  # fmt: skip
            item.add_marker(pytest.mark.needs_postgres)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test whose machine requirement (tests/machine.py) is missing here, naming
    what is missing and how to get it; fail it instead if SANDBOX_TESTS_REQUIRE says the
    machine must have it."""
    required = machine.required_everywhere()
    missing: list[tuple[str, str]] = []
    for mark in item.iter_markers():
        if mark.name == machine.PROGRAM_MARKER:
            missing += [(mark.name, why) for why in map(machine.program_missing, mark.args)
                        if why]  # fmt: skip
        elif mark.name in machine.REQUIREMENTS:
            why = machine.REQUIREMENTS[mark.name].missing()
            if why:
                missing.append((mark.name, why))
    if not missing:
        return
    reasons = "; ".join(dict.fromkeys(why for _, why in missing))
    if any(name in required for name, _ in missing):
        pytest.fail(f"SANDBOX_TESTS_REQUIRE: {reasons}", pytrace=False)
    pytest.skip(reasons)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sqlite_memory(ref: None, **options: Any) -> ApprovalStore:
    from sandbox.approval.store import SQLiteApprovalStore

    return SQLiteApprovalStore(":memory:", **options)


@pytest.fixture(params=("memory", "sqlite-memory"))
def store_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once per in-process backend.

    Under "memory", `ApprovalStore()` without a path — and so a `ToolRunner` without a
    store — is a `MemoryApprovalStore` (the default); under "sqlite-memory" it is patched
    to be SQLite in memory, as it was before the memory backend existed.
    """
    if request.param == "sqlite-memory":
        from sandbox.approval.store import opening

        monkeypatch.setitem(opening.OPENERS, "memory", _sqlite_memory)
    probe = ApprovalStore()
    assert isinstance(probe, MemoryApprovalStore) == (request.param == "memory")
    probe.close()
    return str(request.param)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """One throwaway PostgreSQL cluster for the whole run (tests/pgcluster.py): initdb as
    an unprivileged user in a temporary directory, a unix socket only, stopped at the
    end whatever happened."""
    from .pgcluster import Cluster

    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def fresh_pg_url(request: pytest.FixtureRequest) -> str:
    """A ``postgresql://`` URL of a new, empty schema on the run's cluster (started on
    first use: tests that never name PostgreSQL never start it)."""
    cluster = request.getfixturevalue("pg_cluster")
    if not cluster.running:  # a restart test that failed half-way
        cluster.start()
    return str(cluster.fresh_url())


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    return fresh_pg_url(request)


@pytest.fixture(params=("sqlite-file", "postgresql"))
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store that several processes share, named as a program is told it: a SQLite
    file path, or a ``postgresql://`` URL (a new schema on the run's cluster)."""
    if request.param == "postgresql":
        return fresh_pg_url(request)
    return str(tmp_path / "a.db")


@pytest.fixture(params=STORE_BACKENDS)
def make_store(request: pytest.FixtureRequest,
               tmp_path: Path) -> Iterator[Callable[..., ApprovalStore]]:
    """A factory of stores of one backend per run; each call opens a new, empty store."""
    opened: list[ApprovalStore] = []

    def make(**kwargs: Any) -> ApprovalStore:
        if request.param == "memory":
            store: ApprovalStore = MemoryApprovalStore(**kwargs)
        elif request.param == "sqlite-memory":
            store = ApprovalStore(":memory:", **kwargs)
        elif request.param == "postgresql":
            store = ApprovalStore(fresh_pg_url(request), **kwargs)
        else:
            store = ApprovalStore(tmp_path / f"approvals-{len(opened)}.db", **kwargs)
        opened.append(store)
        return store

    make.backend = request.param  # type: ignore[attr-defined]
    yield make
    for store in opened:
        store.close()


class SideEffect:
    """A real file a tool appends to: the proof of whether, and how often, it ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")

    @property
    def happened(self) -> bool:
        return self.path.exists()

    @property
    def lines(self) -> list[str]:
        return self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []


@pytest.fixture
def effect(tmp_path: Path) -> SideEffect:
    return SideEffect(tmp_path / "effect.txt")


class Processes:
    """Starts the helper programs in tests/programs and kills every one of them at teardown."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, program: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(PROGRAMS / program), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            **kwargs,  # type: ignore[call-overload]
        )
        self.started.append(proc)
        return proc

    def run(self, program: str, *args: str, timeout: float = 30) -> str:
        """Run a program to completion; return its stdout, failing the test on an error."""
        proc = self.start(program, *args)
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{program} {args} failed ({proc.returncode}):\n{err}"
        return out

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()


@pytest.fixture
def processes() -> Iterator[Processes]:
    procs = Processes()
    try:
        yield procs
    finally:
        procs.kill_all()


@pytest.fixture
def shared_workspace() -> Iterator[Path]:
    """A workspace a command run as nobody can reach and write (drop_privileges=True).
    Not under pytest's tmp_path, which is 0700 for root."""
    ws = Path(tempfile.mkdtemp(prefix="sandbox-test-ws-"))
    ws.chmod(0o777)
    try:
        yield ws
    finally:
        shutil.rmtree(ws, ignore_errors=True)
