"""Approval stores: one Protocol (`StoreProtocol`), typed states with a transition table
(`states`), and the backends — `MemoryApprovalStore` (one process) and
`SQLiteApprovalStore` (a file shared by the processes of one host) and
`PostgresApprovalStore` (a database shared by many hosts; it needs the ``postgres``
extra, imported only when one is opened). The SQL backends share their operations
(`sql.SQLApprovalStore`). `open_store` opens the one a reference names."""

from typing import TYPE_CHECKING

from sandbox._lazy import exports

if TYPE_CHECKING:
    from sandbox.approval.store.base import MAX_PENDING_PER_SESSION, StoreBase
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
    "CallRecord",
    "CallState",
    "MemoryApprovalStore",
    "Owner",
    "Page",
    "PostgresApprovalStore",
    "RequestStatus",
    "SQLiteApprovalStore",
    "StoreBase",
    "StoreProtocol",
    "new_id",
    "open_store",
]
