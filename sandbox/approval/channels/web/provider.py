"""`WebConfirmationProvider`: a decision made on the approvals page answers the call.

It waits on the store like `QueueConfirmationProvider` (the page records answers with
`ApprovalStore.submit_answer`), so the page may be served by this process
(``async with provider.serving() as server``) or by ``sandbox approvals serve`` in
another process sharing the store file.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from sandbox.approval.channels.queue import QueueConfirmationProvider
from sandbox.approval.providers import OnTimeout
from sandbox.approval.store import ApprovalStore

if TYPE_CHECKING:
    from sandbox.approval.channels.web.server import ApprovalServer


class WebConfirmationProvider(QueueConfirmationProvider):
    """Waits for an answer given on the approvals page.

    ``host``/``port``/``token`` configure the page when this process serves it
    (`serving`); by default 127.0.0.1, a free port and a random token.
    """

    def __init__(
        self,
        store: ApprovalStore | str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        poll_interval: float = 0.1,
        timeout: float | None = 600.0,
        on_timeout: OnTimeout = "deny",
        name: str = "web",
    ) -> None:
        super().__init__(store, poll_interval=poll_interval, timeout=timeout,
                         on_timeout=on_timeout, name=name)
        self.host = host
        self.port = port
        self.token = token

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[ApprovalServer]:
        """Serve the page from this process while the block runs; yields the server
        (``server.url`` is the address to open, token included)."""
        from sandbox.approval.channels.web.server import (
            ApprovalServer,  # starlette/uvicorn: the `web` extra
        )

        server = ApprovalServer(self.store, host=self.host, port=self.port, token=self.token)
        async with anyio.create_task_group() as tg:
            await tg.start(server.run)
            try:
                yield server
            finally:
                server.stop()
