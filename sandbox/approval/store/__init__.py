"""Approval stores.

- `open_store(ref)` opens the store a reference names (None, ``":memory:"``, a path or
  ``sqlite:///`` URL, a ``postgresql://`` URL, or a store already open);
  ``ApprovalStore(ref)`` is the same call, and ``isinstance(store, ApprovalStore)``
  holds for every backend (store/opening.py).
- `StoreProtocol`: the operations the gate needs (protocol.py); the optional
  capabilities some backends add, each a Protocol of its own (capabilities.py).
- `CallState` / `RequestStatus` and the call's transition table (states.py); the
  decision rules every backend applies (decisions.py).
- The backends, all deriving from `StoreBase` (base.py): `MemoryApprovalStore` (one
  process), `SQLiteApprovalStore` (a file shared by the processes of one host) and
  `PostgresApprovalStore` (a database shared by many hosts; it needs the ``postgres``
  extra, imported only when one is opened). The SQL backends share their operations
  (`sql.SQLApprovalStore`).
"""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.approval.store.base import MAX_PENDING_PER_SESSION, StoreBase
    from sandbox.approval.store.capabilities import (
        Batching,
        DecidesParked,
        Located,
        OpensAndParks,
        RunsNow,
        location,
    )
    from sandbox.approval.store.memory import MemoryApprovalStore
    from sandbox.approval.store.opening import ApprovalStore, open_store
    from sandbox.approval.store.postgres import PostgresApprovalStore
    from sandbox.approval.store.protocol import MAX_PAGE, Page, StoreProtocol
    from sandbox.approval.store.records import CallRecord, Owner, new_id
    from sandbox.approval.store.sqlite import SQLiteApprovalStore
    from sandbox.approval.store.states import CallState, RequestStatus

__getattr__, __dir__ = exports(
    __name__,
    {
        "sandbox.approval.store.base": (
            "MAX_PENDING_PER_SESSION",
            "StoreBase",
        ),
        "sandbox.approval.store.opening": (
            "ApprovalStore",
            "open_store",
        ),
        "sandbox.approval.store.capabilities": (
            "Batching",
            "DecidesParked",
            "Located",
            "OpensAndParks",
            "RunsNow",
            "location",
        ),
        "sandbox.approval.store.memory": ("MemoryApprovalStore",),
        "sandbox.approval.store.postgres": ("PostgresApprovalStore",),
        "sandbox.approval.store.protocol": (
            "MAX_PAGE",
            "Page",
            "StoreProtocol",
        ),
        "sandbox.approval.store.records": (
            "CallRecord",
            "Owner",
            "new_id",
        ),
        "sandbox.approval.store.sqlite": ("SQLiteApprovalStore",),
        "sandbox.approval.store.states": (
            "CallState",
            "RequestStatus",
        ),
    },
)

__all__ = [
    "MAX_PAGE",
    "MAX_PENDING_PER_SESSION",
    "ApprovalStore",
    "Batching",
    "CallRecord",
    "CallState",
    "DecidesParked",
    "Located",
    "MemoryApprovalStore",
    "OpensAndParks",
    "Owner",
    "Page",
    "PostgresApprovalStore",
    "RequestStatus",
    "RunsNow",
    "SQLiteApprovalStore",
    "StoreBase",
    "StoreProtocol",
    "location",
    "new_id",
    "open_store",
]
