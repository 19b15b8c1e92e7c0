"""Moved to `sandbox.approval.store.memory`; kept so old imports still work."""

from sandbox.approval.store.memory import MemoryApprovalStore

__all__ = ["MemoryApprovalStore"]
