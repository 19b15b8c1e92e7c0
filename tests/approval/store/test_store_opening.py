"""Opening a store from a reference (`open_store`, and `ApprovalStore(ref)`, which is the
same), and the optional capabilities each backend declares (store/capabilities.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandbox import ApprovalStore, MemoryApprovalStore, StoreError, ToolRunner
from sandbox.approval.store import (
    PostgresApprovalStore,
    SQLiteApprovalStore,
    StoreBase,
    open_store,
)
from sandbox.approval.store.capabilities import (
    Batching,
    DecidesParked,
    Located,
    OpensAndParks,
    RunsNow,
    location,
)


def test_no_store_class_dispatches_in_new() -> None:
    """``ApprovalStore(ref)`` opens through `open_store`; no backend picks another class
    in ``__new__`` (which made the base import every backend and each backend the base)."""
    for cls in (StoreBase, MemoryApprovalStore, SQLiteApprovalStore, PostgresApprovalStore):
        assert all("__new__" not in vars(c) for c in cls.__mro__ if c is not object), cls


def test_each_reference_opens_its_backend(tmp_path: Path) -> None:
    cases: list[tuple[Any, type, Path | None]] = [
        (None, MemoryApprovalStore, None),
        (":memory:", SQLiteApprovalStore, None),
        (tmp_path / "a.db", SQLiteApprovalStore, tmp_path / "a.db"),
        (str(tmp_path / "b.db"), SQLiteApprovalStore, tmp_path / "b.db"),
        (f"sqlite:///{tmp_path}/c.db", SQLiteApprovalStore, tmp_path / "c.db"),
        ("sqlite:///:memory:", SQLiteApprovalStore, None),
    ]
    for ref, backend, path in cases:
        for opened in (open_store(ref), ApprovalStore(ref)):
            try:
                assert type(opened) is backend, ref
                assert opened.path == path, ref
                assert isinstance(opened, ApprovalStore) and isinstance(opened, StoreBase)
            finally:
                opened.close()


def test_a_relative_sqlite_url_is_relative_to_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///rel.db") as store:
        assert store.path == Path("rel.db")
    assert (tmp_path / "rel.db").exists()


def test_options_reach_the_backend(tmp_path: Path) -> None:
    with ApprovalStore(tmp_path / "a.db", max_pending=3) as store:
        assert store.max_pending == 3
    assert ApprovalStore(max_pending=4).max_pending == 4
    with pytest.raises(StoreError, match="max_pending must be at least 1"):
        open_store(":memory:", max_pending=0)


def test_an_open_store_is_its_own_reference() -> None:
    store = MemoryApprovalStore()
    assert open_store(store) is store
    assert ApprovalStore(store) is store
    with pytest.raises(StoreError, match="already open"):
        open_store(store, max_pending=3)


@pytest.mark.parametrize(("ref", "says"), [
    ("mysql://db/x", "unknown kind of approval store"),
    ("postgresql:db", "a PostgreSQL store is named by a URL"),
    ("sqlite://x.db", "sqlite:///relative/path"),
    ("sqlite:///", "sqlite:///relative/path"),
    ("", "empty approval store path"),
    (5, "got int"),
    (b"x.db", "got bytes"),
])
def test_a_reference_that_names_no_store_is_refused_with_what_would(ref: Any,
                                                                     says: str) -> None:
    with pytest.raises(StoreError, match=says):
        open_store(ref)
    with pytest.raises(StoreError, match=says):
        ApprovalStore(ref)


def test_isinstance_and_issubclass_hold_for_every_backend_and_nothing_else() -> None:
    for backend in (MemoryApprovalStore, SQLiteApprovalStore, PostgresApprovalStore):
        assert issubclass(backend, ApprovalStore)
    assert not issubclass(int, ApprovalStore)
    assert not isinstance(object(), ApprovalStore)
    assert not isinstance("approvals.db", ApprovalStore)


def test_a_store_class_of_the_users_own_may_still_derive_from_approval_store() -> None:
    class Mine(ApprovalStore):  # type: ignore[misc, valid-type]
        path = None

        def __init__(self, label: str) -> None:
            self.label = label

        def in_doubt(self) -> list[Any]:
            return ["checked"]

    mine = Mine("x")
    assert type(mine) is Mine and mine.label == "x"
    assert isinstance(mine, ApprovalStore) and isinstance(mine, StoreBase)
    assert issubclass(Mine, StoreBase) and mine.sweep() == ["checked"]  # StoreBase's
    assert open_store(mine) is mine


def test_a_runner_opens_its_store_path(tmp_path: Path) -> None:
    runner = ToolRunner([], store_path=tmp_path / "r.db")
    assert isinstance(runner.store, SQLiteApprovalStore)
    assert runner.store.path == tmp_path / "r.db"
    runner.store.close()
    assert isinstance(ToolRunner([]).store, MemoryApprovalStore)


def _capabilities(store: object) -> set[str]:
    return {cap.__name__ for cap in (Batching, RunsNow, OpensAndParks, DecidesParked, Located)
            if isinstance(store, cap)}


def test_the_capabilities_each_in_process_backend_declares(tmp_path: Path) -> None:
    assert _capabilities(MemoryApprovalStore()) == set()
    with ApprovalStore(":memory:") as sqlite_memory:
        assert _capabilities(sqlite_memory) == {"Batching", "RunsNow"}
        assert location(sqlite_memory) is None
    with ApprovalStore(tmp_path / "a.db") as sqlite_file:
        assert _capabilities(sqlite_file) == {"Batching", "RunsNow"}
        assert location(sqlite_file) == str(tmp_path / "a.db")
    assert location(MemoryApprovalStore()) is None


def test_the_capabilities_of_postgresql(pg_url: str) -> None:
    pytest.importorskip("psycopg")
    with open_store(pg_url.replace("postgresql://", "postgres://", 1)) as store:
        assert type(store) is PostgresApprovalStore and isinstance(store, ApprovalStore)
        assert _capabilities(store) == {"RunsNow", "OpensAndParks", "DecidesParked",
                                        "Located"}
        assert location(store) == store.url


def test_a_store_with_the_protocol_only_has_no_capability() -> None:
    """A store of the user's own making that implements `StoreProtocol` and nothing more:
    the gate finds none of the optional capabilities on it (it used getattr for them)."""
    class Plain:
        path = None

        def __getattr__(self, name: str) -> Any:  # every Protocol operation, nothing else
            if name in {"batch", "run_now", "open_and_park", "parked_request",
                        "decide_parked", "url"}:
                raise AttributeError(name)
            return lambda *a, **k: None

    assert _capabilities(Plain()) == set()
    assert location(Plain()) is None  # type: ignore[arg-type]


def test_opening_postgresql_without_psycopg_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(StoreError, match=r"pip install 'sandbox\[postgres\]'"):
        open_store("postgresql://nobody@localhost/none")


@pytest.mark.parametrize("name", ["file:x.db", "file:x.db?mode=memory", "file:x.db#y"])
def test_a_path_that_looks_like_a_sqlite_uri_opens_that_very_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """SQLite (built with SQLITE_USE_URI, as Debian's is) reads a file name beginning
    with ``file:`` as a URI even without ``uri=True``: ``ApprovalStore("file:x.db")``
    opened ``x.db``, created by SQLite with the umask's mode (0644: the store readable by
    every user), left an empty ``file:x.db`` behind, and ``?mode=memory`` made a store
    that was never on disk. The file named is the store, private to its user."""
    monkeypatch.chdir(tmp_path)
    store = ApprovalStore(name)
    try:
        store.open_call("c1", "t", "d", {})
    finally:
        store.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(
        ("-wal", "-shm"))) == [name]
    made = tmp_path / name
    assert made.stat().st_size > 0
    assert (made.stat().st_mode & 0o777) == 0o600
    reopened = ApprovalStore(str(made))
    try:
        assert reopened.get_call("c1").tool == "t"
    finally:
        reopened.close()
