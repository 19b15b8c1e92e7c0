"""`open_store`: THE way an approval store is opened from a reference, and `ApprovalStore`,
its public name (``ApprovalStore(ref)`` is ``open_store(ref)``; ``isinstance(store,
ApprovalStore)`` is true of every backend).

A reference is one of:

- None: `MemoryApprovalStore` (this process only; what a `ToolRunner` without a store
  uses);
- an approval store already open (any backend): itself;
- ``":memory:"``: `SQLiteApprovalStore` in this process's memory;
- a file path (`str` or `os.PathLike`), or ``sqlite:///path`` (``sqlite:///:memory:``,
  and ``sqlite:////abs/path`` for an absolute one, as SQLAlchemy writes them): a SQLite
  file the processes of one host share;
- ``postgresql://…`` or ``postgres://…`` (any libpq URL): `PostgresApprovalStore`, a
  database shared by many hosts (``pip install 'sandbox[postgres]'``).

Why the opener lives here and not in the base class: the backends derive from
`StoreBase` (store/base.py), so a base that picks a backend (the ``__new__`` dispatch
this replaces) must import every backend, and every backend imports it: an import cycle.
Here the dependency runs one way — this module imports the backends (each only when a
reference names it: PostgreSQL needs psycopg, imported only then), nothing below imports
this module. The backend each kind of reference opens is a table (`OPENERS`), as
SQLAlchemy's ``create_engine`` finds a dialect by the URL's scheme.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.approval.store.base import StoreBase
from sandbox.errors import StoreError

#: Schemes of a PostgreSQL URL.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_URL = "sqlite://"


def _memory(ref: None, **options: Any) -> StoreBase:
    from sandbox.approval.store.memory import MemoryApprovalStore

    return MemoryApprovalStore(**options)


def _sqlite(ref: str | os.PathLike[str], **options: Any) -> StoreBase:
    from sandbox.approval.store.sqlite import SQLiteApprovalStore

    return SQLiteApprovalStore(ref, **options)


def _postgres(ref: str, **options: Any) -> StoreBase:
    from sandbox.approval.store.postgres import PostgresApprovalStore

    return PostgresApprovalStore(ref, **options)


#: The backend each kind of reference opens: ``memory`` (None), ``sqlite`` (a path,
#: ``":memory:"``, a ``sqlite://`` URL) and ``postgresql``. Each opener takes the
#: reference and the options and imports its backend when it is first used.
OPENERS: dict[str, Callable[..., StoreBase]] = {
    "memory": _memory,
    "sqlite": _sqlite,
    "postgresql": _postgres,
}


def kind_of(ref: str | os.PathLike[str] | None) -> tuple[str, Any]:
    """Which backend a reference names (a key of `OPENERS`) and the reference as that
    backend takes it; a clear `StoreError` for one that names none."""
    if ref is None:
        return "memory", None
    if isinstance(ref, os.PathLike):
        return "sqlite", ref
    if not isinstance(ref, str):
        raise StoreError(
            f"an approval store reference is a path, ':memory:', a postgresql:// URL, "
            f"an open store or None; got {type(ref).__name__}")
    if ref.startswith(POSTGRES_SCHEMES):
        return "postgresql", ref
    if ref.startswith(("postgresql:", "postgres:")):
        from sandbox.approval.store.postgres import scrubbed

        raise StoreError(f"{scrubbed(ref, ref)}: a PostgreSQL store is named by a URL, "
                         "postgresql://user@host/database")
    if ref.startswith(_SQLITE_URL):
        path = ref[len(_SQLITE_URL):]
        if not path.startswith("/") or path == "/":
            raise StoreError(
                f"{ref}: a SQLite URL names a file as sqlite:///relative/path or "
                "sqlite:////absolute/path (or sqlite:///:memory:)")
        return "sqlite", path[1:]
    if "://" in ref:
        raise StoreError(
            f"{ref.split('://', 1)[0]}://…: unknown kind of approval store; use a SQLite "
            "file path, ':memory:', or a postgresql:// URL")
    if not ref:
        raise StoreError("an empty approval store path; name a file (or ':memory:')")
    return "sqlite", ref


def open_store(ref: str | os.PathLike[str] | StoreBase | None = None,
               **options: Any) -> StoreBase:
    """Open the store a reference names: None (memory, this process), ``":memory:"``
    (SQLite in memory), a file path or ``sqlite:///`` URL (SQLite, shared by the
    processes of one host) or a ``postgresql://`` URL (PostgreSQL, shared by many hosts;
    ``pip install 'sandbox[postgres]'``). A store already open is returned as it is.

    ``options`` go to the backend (``max_pending``, ``max_pending_per_session``, ...).
    """
    if isinstance(ref, StoreBase):
        if options:
            raise StoreError(
                f"options {sorted(options)} were given with a store that is already open; "
                "pass them when opening it")
        return ref
    kind, target = kind_of(ref)
    opener = OPENERS[kind]
    if target is None:
        return opener(None, **options)
    return opener(target, **options)


class _OpensStores(type):
    """`ApprovalStore`'s type: calling it opens a store (`open_store`), and every
    backend's store is an instance of it. A class that derives from it (a backend of
    the user's own, as before) derives from `StoreBase` instead: an ordinary class."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any],
                **kwargs: Any) -> type:
        if any(isinstance(base, _OpensStores) for base in bases):
            bases = tuple(StoreBase if isinstance(base, _OpensStores) else base
                          for base in bases)
            meta: Callable[..., type] = type(StoreBase)  # (StoreProtocol's)
            return meta(name, bases, namespace, **kwargs)
        return super().__new__(mcs, name, bases, namespace, **kwargs)

    def __call__(cls, ref: Any = None, /, **options: Any) -> StoreBase:
        return open_store(ref, **options)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, StoreBase)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return isinstance(subclass, type) and issubclass(subclass, StoreBase)


if TYPE_CHECKING:
    ApprovalStore = StoreBase
else:
    class ApprovalStore(metaclass=_OpensStores):
        """An approval store, any backend. ``ApprovalStore(ref, **options)`` is
        ``open_store(ref, **options)``: ``ApprovalStore()`` keeps everything in this
        process's memory, ``ApprovalStore(path)`` is a SQLite file the processes of one
        host share, ``ApprovalStore(":memory:")`` SQLite in memory and
        ``ApprovalStore("postgresql://…")`` a PostgreSQL database. ``isinstance(store,
        ApprovalStore)`` holds for every backend (they derive from `StoreBase`)."""
