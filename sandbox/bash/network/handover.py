"""How the proxy's listeners get inside the command's network namespace.

The command's child makes its network namespace as for network="loopback" (its own,
lo up; in a user namespace of its own when the agent lacks CAP_SYS_ADMIN). Right after
lo is up, before Landlock and seccomp, it binds 127.0.0.1:3128 (HTTP proxy) and
127.0.0.1:1080 (SOCKS5) there, sends both listening sockets to the agent over a
socketpair the agent passed it (SCM_RIGHTS), and closes its own copies and the
socketpair. From then on the listeners live in the command's namespace but only the
agent's proxy holds them: nothing in the command's tree can accept on them, and there
is no unix socket, bridge process or route inside (seccomp keeps denying
socket(AF_UNIX): a pathname unix socket is not isolated by a network namespace).

sandbox-runtime bridges a unix socket into the namespace with socat; Codex routes
through a proxy on the host's loopback. Making the sockets inside the namespace and
accepting them outside needs neither, and costs nothing per connection.

The child's side is `confinement.send_proxy_listeners` (the spawner loads
confinement.py with the standard library only); `receive_listeners` is the agent's.
"""

from __future__ import annotations

import errno
import os
import socket

import anyio

__all__ = ["receive_listeners"]


async def receive_listeners(channel: socket.socket, count: int, seconds: float
                            ) -> list[socket.socket]:  # fmt: skip
    """In the agent: the listeners the child sent, or OSError when it sent none (its
    set-up failed before: the run reports that) or not in time."""
    channel.setblocking(False)
    message, fds = b"", list[int]()
    with anyio.move_on_after(seconds) as scope:
        while True:
            await anyio.wait_readable(channel)
            try:
                message, fds, _flags, _addr = socket.recv_fds(channel, 16, count)
            except BlockingIOError:
                continue
            break
    if scope.cancelled_caught:
        raise OSError(errno.ETIMEDOUT, "the command's child did not hand over the proxy's "
                      "listeners in time")  # fmt: skip
    if message != b"ok" or len(fds) != count:
        for fd in fds:
            os.close(fd)
        raise OSError(errno.EPROTO, "the command's child handed over no proxy listeners")
    listeners = [socket.socket(fileno=fd) for fd in fds]
    for s in listeners:
        s.set_inheritable(False)
    return listeners
