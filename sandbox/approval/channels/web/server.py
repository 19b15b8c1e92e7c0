"""`ApprovalServer`: the approvals page served by uvicorn, in-process or as a command.

The listening socket is bound here, before uvicorn starts, so that ``port=0`` yields a
real port to print and so that a restarted server can take the same port at once
(``SO_REUSEADDR``). The default host is 127.0.0.1: the page answers for the tools on
this machine and must not be reachable from others.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import socket
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskStatus

from sandbox.approval.channels.web.app import LOOPBACK, create_app, new_token
from sandbox.approval.store import ApprovalStore
from sandbox.errors import ConfigurationError

#: The environment variable that fixes the access token (for restarts and scripts).
TOKEN_ENV = "SANDBOX_APPROVALS_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ApprovalServer:
    """Serves the approvals page for ``store`` on ``host:port`` behind a random token."""

    def __init__(self, store: ApprovalStore, *, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, identity: str | None = None) -> None:
        if not 0 <= port <= 65535:
            raise ConfigurationError(f"port must be between 0 and 65535, got {port}")
        self.store = store
        self.host = host
        self.token = token or os.environ.get(TOKEN_ENV) or new_token()
        self.identity = identity or _login_name()
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host.strip("[]"), port))
        except OSError as exc:
            self.socket.close()
            raise ConfigurationError(
                f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port "
                "(0 picks a free one)") from None
        self.socket.listen(128)
        self.port = int(self.socket.getsockname()[1])
        hosts = set(LOOPBACK) | {host.lower(), f"[{host.strip('[]')}]".lower()}
        self.app = create_app(store, token=self.token, identity=self.identity,
                              allowed_hosts=hosts)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)

    @property
    def base_url(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host.strip("[]") else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The address to open: it carries the token once, then a cookie does."""
        return f"{self.base_url}/?token={self.token}"

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until `stop`; reports started once the socket accepts requests."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._serve)
            while not self._server.started:
                if self._server.should_exit:
                    break
                await anyio.sleep(0.01)
            task_status.started()

    async def _serve(self) -> None:
        try:
            await self._server.serve(sockets=[self.socket])
        finally:
            self.socket.close()

    def stop(self) -> None:
        self.app.state.watch.closing = True  # ends the open event streams at once
        self._server.should_exit = True

    def serve_forever(self) -> None:
        """Block serving until interrupted (what `sandbox approvals serve` runs)."""
        self._server.run(sockets=[self.socket])

    def __enter__(self) -> ApprovalServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.socket.close()


def _login_name() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
