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
``_forwarder_main.py`` (a few standard modules, no package import: ~10 MiB of RSS,
most of it the interpreter's shared pages), in a session of its own (a
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
import os
import socket
import subprocess
import sys
import weakref

__all__ = ["Forwarder"]

_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_forwarder_main.py")


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
                [sys.executable, "-I", "-S", _MAIN, str(theirs.fileno())],
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
        if self._sock is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
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
