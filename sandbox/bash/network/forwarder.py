"""The egress proxy's data plane: a process of its own that moves the bytes of
connections the proxy has already decided on.

Why a process: the proxy decides in a thread of the agent (the question for an
unlisted name goes to the runner's provider, which lives there), and moved every chunk
of every download in that thread too. Each chunk needs the GIL back after its
splice(2); while the agent's own thread runs Python (a model SDK parsing a response,
a tool serialising JSON) the proxy thread waits for the GIL on every chunk. Measured
(bench/network.py, "agent busy"): a 1 GiB loopback download fell from ~2 GB/s to
~0.25 GB/s. Here the bytes move in a process that shares no GIL with anyone, so the
agent's work and a command's downloads no longer slow each other down.

Division of work. The agent's proxy reads the request, decides, resolves, connects
and writes the reply (CONNECT's 200, a plain request's rewritten response head). Then
it hands each direction over: the two connected sockets (``src``, ``dst``) go to this
process over a unix socketpair (SCM_RIGHTS), which splices ``src`` to ``dst``
through a pipe until ``src`` ends, half-closes ``dst`` and says ``done``. The agent
keeps its own descriptors of both sockets: its slot and descriptor accounting,
``detach`` and the timeouts stay where they were, and cutting a connection is
``shutdown(SHUT_RDWR)`` on the agent's descriptor (a socket is shut down for every
holder; this process sees end of file or EPIPE and lets go).

What it holds: no privilege the agent lacks, no decision, no name. It sees connected
sockets only, never a listener, and cannot open a connection of its own: a command's
traffic goes nowhere the agent did not connect it to.

Lifetime: started by the agent's proxy (``Forwarder.start``) with ``python -I -S`` on
this file (standard library only, no package import), in a session of its own (a
terminal's signals for the agent do not reach it). It exits when the agent's end of
the control socket closes (the agent ended, even by SIGKILL), after shutting down
every socket it still holds. If it dies, the connections it carried are cut, and the
proxy moves the bytes of later connections itself.

Protocol (SOCK_SEQPACKET, one message per datagram):
  agent -> forwarder   b"F" + id (8 bytes) + pipe size (4 bytes), descriptors [src, dst]
  forwarder -> agent   b"ready" once, at start
                       b"D" + id when that direction is done (its descriptors closed)
                       b"R" + id when it could not take it (no descriptors left, say):
                       the agent moves that direction's bytes itself
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import resource
import select
import socket
import subprocess
import sys
import weakref

__all__ = ["Forwarder"]

_F_SETPIPE_SZ = 1031
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
# Rounds of splicing one direction gets per readiness event before the others get a
# turn (level-triggered epoll reports it again if it is still ready).
_ROUNDS = 4


# --------------------------------------------------------------------- agent's side


class Forwarder:
    """The agent's handle on its forwarding process. Used from the proxy's event loop
    only (``forward``); ``start`` and ``close`` from the proxy's thread."""

    def __init__(self) -> None:
        _ALL.add(self)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Future[bool] | None = None
        self._pending: dict[int, asyncio.Future[bool]] = {}
        self._next = 0
        self.dead = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the process (without waiting for it: ``forward`` waits, boundedly,
        for its ``ready``). On failure the proxy moves the bytes itself."""
        self._loop = loop
        self._ready = loop.create_future()
        if not hasattr(os, "splice"):
            self._die()
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None,
                pass_fds=(theirs.fileno(),), start_new_session=True, cwd="/",
                close_fds=True,
            )  # fmt: skip
        except OSError:
            ours.close()
            self._die()
            return
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        loop.add_reader(ours.fileno(), self._on_message)

    @property
    def pid(self) -> int | None:
        """The forwarding process's pid while it runs (None once it died)."""
        return None if self.dead or self._proc is None else self._proc.pid

    def _on_message(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._die()
                return
            if data == b"ready":
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(True)
                continue
            future = self._pending.pop(int.from_bytes(data[1:9], "big"), None)
            if future is not None and not future.done():
                future.set_result(data[:1] == b"D")

    def _die(self) -> None:
        """The process is gone (or never came): what it carried is cut (the caller
        shuts the sockets down); later connections are moved by the proxy."""
        self.dead = True
        if self._sock is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
        self._reap()
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(ConnectionAbortedError("the forwarding process ended"))

    def _reap(self) -> None:
        # Its control socket closes a moment before it can be waited for.
        if self._proc is not None and self._proc.poll() is None and self._loop is not None:
            self._loop.call_later(0.5, self._reap)

    async def forward(self, src: socket.socket, dst: socket.socket, size: int) -> bool:
        """Move ``src``'s bytes to ``dst`` in the forwarding process, until ``src``
        ends (``dst`` is then half-closed). False, at once, when it cannot take them
        (not running, out of descriptors): the caller moves them itself. Raises
        ConnectionAbortedError when the process died while moving them."""
        if self.dead or self._ready is None or self._sock is None:
            return False
        if not self._ready.done():
            # Once per agent, the first connection waits for the process to be up.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._ready), 10)
        if not self._ready.done() or not self._ready.result() or self.dead:
            return False
        self._next += 1
        ident = self._next
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        message = b"F" + ident.to_bytes(8, "big") + size.to_bytes(4, "big")
        try:
            socket.send_fds(self._sock, [message], [src.fileno(), dst.fileno()])
        except OSError:
            # ETOOMANYREFS (descriptors in flight past RLIMIT_NOFILE), EAGAIN: this
            # one is moved by the proxy.
            self._pending.pop(ident, None)
            return False
        try:
            return await future
        finally:
            self._pending.pop(ident, None)

    def close(self) -> None:
        """End the process: it shuts down what it still holds and exits."""
        sock, proc = self._sock, self._proc
        self._sock = self._proc = None
        self.dead = True
        if sock is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(sock.fileno())
            sock.close()
        if proc is not None:
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def forget(self) -> None:
        """In a forked child: drop the parent's control socket without a word (the
        process is the parent's)."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = self._proc = None
        self.dead = True


_ALL: weakref.WeakSet[Forwarder] = weakref.WeakSet()


def _forget_the_parents_forwarders() -> None:
    # A forked child holds copies of the parent's control sockets: were it to outlive
    # the parent, the parent's forwarding process would never see the end of them.
    for forwarder in list(_ALL):
        forwarder.forget()


os.register_at_fork(after_in_child=_forget_the_parents_forwarders)


# --------------------------------------------------------------------- its own side


class _Way:
    """One direction of one connection: ``src`` spliced to ``dst`` through a pipe."""

    __slots__ = ("dst", "eof", "held", "ident", "masks", "r", "size", "src", "w")

    def __init__(self, ident: bytes, src: int, dst: int, size: int) -> None:
        self.ident, self.src, self.dst, self.size = ident, src, dst, size
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # up to /proc/sys/fs/pipe-max-size
            fcntl.fcntl(self.w, _F_SETPIPE_SZ, size)
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
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    continue  # the message (and its descriptors) is lost; rare
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


def _shutdown(fd: int, how: int) -> None:
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(how)
        finally:
            sock.detach()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
