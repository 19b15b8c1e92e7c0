"""The approvals web page: `sandbox approvals serve`, and `WebConfirmationProvider`.

Needs the ``web`` extra (starlette, uvicorn) only to serve; the provider alone waits on
the store and imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox.approval.channels.web.provider import WebConfirmationProvider

if TYPE_CHECKING:
    from sandbox.approval.channels.web.app import create_app
    from sandbox.approval.channels.web.server import ApprovalServer

__all__ = ["ApprovalServer", "WebConfirmationProvider", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from sandbox.approval.channels.web.app import create_app

        return create_app
    if name == "ApprovalServer":
        from sandbox.approval.channels.web.server import ApprovalServer

        return ApprovalServer
    raise AttributeError(name)
