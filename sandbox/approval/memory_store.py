"""Moved to `sandbox.approval.store.memory`; kept so old imports still work."""

from .store.memory import MemoryApprovalStore

__all__ = ["MemoryApprovalStore"]
