"""The forwarding process of the egress proxy (see forwarder.py for why and how).

Run as ``python -I -S _forwarder_main.py FD``: standard library only, no package
import (the interpreter stays small), FD being its end of the control socket.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import select
import socket
import sys

_F_SETPIPE_SZ = 1031
_F_GETPIPE_SZ = 1032
_SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
# Rounds of splicing one direction gets per readiness event before the others get a
# turn (level-triggered epoll reports it again while it is still ready).
_ROUNDS = 4


class _Way:
    """One direction of one connection: ``src`` spliced to ``dst`` through a pipe."""

    __slots__ = ("dst", "eof", "held", "ident", "masks", "r", "size", "src", "w")

    def __init__(self, ident: bytes, src: int, dst: int, size: int) -> None:
        self.ident, self.src, self.dst, self.size = ident, src, dst, size
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.size = _pipe_capacity(self.w, size)
        self.held = 0
        self.eof = False
        self.masks = {src: 0, dst: 0}

    def pump(self) -> bool:
        """Splice what can be spliced now; True when this direction is over."""
        for _ in range(_ROUNDS):
            moved = False
            if not self.eof and self.held < self.size:
                try:
                    n = os.splice(self.src, self.w, self.size - self.held, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    pass
                else:
                    moved = True
                    if n == 0:
                        self.eof = True
                    self.held += n
            if self.held:
                try:
                    m = os.splice(self.r, self.dst, self.held, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    pass
                else:
                    moved = moved or m > 0
                    self.held -= m
            if self.eof and not self.held:
                return True
            if not moved:
                break
        return False

    def wanted(self) -> dict[int, int]:
        """The readiness this direction waits for now, per descriptor."""
        return {self.src: select.EPOLLIN if not self.eof and self.held < self.size else 0,
                self.dst: select.EPOLLOUT if self.held else 0}  # fmt: skip

    def close(self) -> None:
        _shutdown(self.dst, socket.SHUT_WR)
        for fd in (self.src, self.dst, self.r, self.w):
            with contextlib.suppress(OSError):
                os.close(fd)


def serve(control_fd: int) -> None:
    """The forwarding process's loop (see the module)."""
    # Four descriptors per direction (two sockets, a pipe): as many as the hard limit
    # allows; past it a direction is refused and the agent moves it itself.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    control = socket.socket(fileno=control_fd)
    control.setblocking(False)
    epoll = select.epoll()
    epoll.register(control_fd, select.EPOLLIN)
    ways: dict[int, _Way] = {}  # by each of its socket descriptors
    control.send(b"ready")

    def update(way: _Way) -> None:
        for fd, mask in way.wanted().items():
            if mask == way.masks[fd]:
                continue
            # A descriptor with no interest is taken out of the set: left in with an
            # empty mask, a hung-up peer would still be reported, over and over.
            if not way.masks[fd]:
                epoll.register(fd, mask)
            elif not mask:
                epoll.unregister(fd)
            else:
                epoll.modify(fd, mask)
            way.masks[fd] = mask

    def finish(way: _Way, word: bytes = b"D") -> None:
        for fd in (way.src, way.dst):
            ways.pop(fd, None)
            if way.masks[fd]:
                with contextlib.suppress(OSError):
                    epoll.unregister(fd)
        way.close()
        with contextlib.suppress(OSError):
            control.send(word + way.ident)

    def take() -> bool:
        while True:
            try:
                message, fds, flags, _addr = socket.recv_fds(control, 64, 2)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                # A message lost would leave the agent waiting for its answer: end
                # instead (the agent cuts what was carried and moves the rest itself).
                return False
            if not message:
                return False
            ident = message[1:9]
            if (message[:1] != b"F" or len(message) != 13 or len(fds) != 2
                    or flags & socket.MSG_CTRUNC):  # fmt: skip
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    control.send(b"R" + ident)
                continue
            try:
                way = _Way(ident, fds[0], fds[1], int.from_bytes(message[9:13], "big"))
            except OSError:  # no descriptors for its pipe
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    control.send(b"R" + ident)
                continue
            ways[way.src] = ways[way.dst] = way
            step(way)

    def step(way: _Way) -> None:
        try:
            over = way.pump()
        except OSError:  # EPIPE, ECONNRESET, a socket shut down by the agent
            over = True
        if over:
            finish(way)
        else:
            update(way)

    try:
        while True:
            try:
                events = epoll.poll()
            except InterruptedError:
                continue
            seen: set[int] = set()
            for fd, _mask in events:
                if fd == control_fd:
                    if not take():
                        return
                    continue
                way = ways.get(fd)
                if way is None or id(way) in seen:
                    continue
                seen.add(id(way))
                step(way)
    finally:
        # The agent is gone: nothing it connected stays open on its behalf.
        for way in set(ways.values()):
            _shutdown(way.src, socket.SHUT_RDWR)
            way.close()


def _pipe_capacity(w: int, wanted: int) -> int:
    """Grow the pipe to ``wanted`` bytes (up to /proc/sys/fs/pipe-max-size) and return
    what it holds. Past pipe-user-pages-soft (64 MiB of pipes per user, unprivileged)
    a pipe stays at its default size: waiting for the source while believing the pipe
    had room would wake on a readable source forever and move nothing."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, _F_SETPIPE_SZ, wanted)
    try:
        return max(1, min(wanted, fcntl.fcntl(w, _F_GETPIPE_SZ)))
    except OSError:
        return 4096


def _shutdown(fd: int, how: int) -> None:
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(how)
        finally:
            sock.detach()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
