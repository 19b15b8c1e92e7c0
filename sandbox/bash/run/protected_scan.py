"""The protected paths of one run, found before it is planned: the scan of the workspace
(`sandbox.bash.linux.protected.scan`) attached to the run's `ConfinementRequest`, on the
event loop when the last walk is cached and small, else in a worker thread, so that a
large workspace never holds up the agent's event loop (docs/protected-paths.md)."""

from __future__ import annotations

import dataclasses

import anyio.to_thread

from sandbox.bash.config import ConfinementRequest
from sandbox.bash.linux.protected import scan, scan_if_cached

__all__ = ["attach_protected"]


async def attach_protected(request: ConfinementRequest, workspace: str) -> ConfinementRequest:
    """`request` with the scan of `workspace` for its protected_paths: here when its
    walk is cached and small (`scan_if_cached`), else in a worker thread (a large
    workspace must not hold up the caller's event loop)."""
    if request.mode == "none" or request.filesystem != "read-write" or (
            not request.protected_paths):  # fmt: skip
        return request
    found = scan_if_cached(workspace, request.protected_paths)
    if found is None:
        found = await anyio.to_thread.run_sync(scan, workspace, request.protected_paths)
    return dataclasses.replace(request, protected=found)
