"""Moving a tunnel's bytes: splice(2) through a pipe between two connected sockets, in
the proxy's event loop (the forwarding process does the same with blocking calls:
`sandbox.bash.network.forwarder`), and the socket buffers and the cut both use."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket

# The kernel buffers of the proxy's own sockets (the accepted one and the upstream one).
# Left to autotuning, a receive buffer grows to tcp_rmem's maximum (32 MiB here) while
# the client reads fast, and keeps what arrives once it stops: a command with 64
# connections that read a little and then stalled parked 1.8 GB in the agent's socket
# buffers (charged to the agent, not to the command's memory limit). Fixed sizes bound
# that to a few MiB per connection; the kernel doubles them for its bookkeeping, and a
# 2 MiB receive buffer still carries ~30 MB/s per connection at a 100 ms round trip.
RECEIVE_BUFFER = 2 << 20
SEND_BUFFER = 1 << 20


def _bound_buffers(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


def _cut(*socks: socket.socket) -> None:
    """Shut the sockets down for every holder of them (the forwarding process sees
    end of file or EPIPE and lets go of its descriptors)."""
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


_HAS_SPLICE = hasattr(os, "splice")
_F_SETPIPE_SZ = 1031
_F_GETPIPE_SZ = 1032


async def _wait_fd(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def _splice_one_way(src: socket.socket, dst: socket.socket, size: int) -> None:
    """Move bytes from ``src`` to ``dst`` through a pipe with splice(2): the data stays in
    the kernel (no copy into this process), at most ``size`` bytes in flight, so a
    download through the proxy costs what a direct one does, and memory per connection
    is the pipe's."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, _F_SETPIPE_SZ, size)
    # What the pipe holds (past pipe-user-pages-soft it keeps its default size):
    # believing it had more room, a full pipe woke on the readable source forever.
    with contextlib.suppress(OSError):
        size = max(1, min(size, fcntl.fcntl(w, _F_GETPIPE_SZ)))
    flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
    held, eof = 0, False
    try:
        while True:
            moved = False
            if not eof and held < size:
                try:
                    n = os.splice(src.fileno(), w, size - held, flags=flags)
                except BlockingIOError:
                    pass
                else:
                    moved = True
                    if n == 0:
                        eof = True
                    held += n
            if held:
                try:
                    m = os.splice(r, dst.fileno(), held, flags=flags)
                except BlockingIOError:
                    pass
                else:
                    moved = moved or m > 0
                    held -= m
            if eof and not held:
                break
            if not moved:
                if held and (eof or held >= size):
                    await _wait_fd(dst.fileno(), True)
                elif held:
                    # Either side may unblock us: whichever is ready first.
                    waits = [asyncio.ensure_future(_wait_fd(src.fileno(), False)),
                             asyncio.ensure_future(_wait_fd(dst.fileno(), True))]  # fmt: skip
                    try:
                        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for t in waits:
                            t.cancel()
                        await asyncio.gather(*waits, return_exceptions=True)
                else:
                    await _wait_fd(src.fileno(), False)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
