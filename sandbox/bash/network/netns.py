"""The command's side of network="allowlist": a network namespace of its own, holding
lo and two listening sockets that only the egress proxy holds.

``make_command_network()`` forks a short-lived helper that unshares a network namespace
(and, for an unprivileged agent, a user namespace first, with the agent's uid and gid
mapped to themselves, as confinement.py maps them), brings lo up, binds 127.0.0.1:3128
(HTTP) and 127.0.0.1:1080 (SOCKS5) there, and hands back the namespace descriptors and
the two listening sockets over a socketpair (SCM_RIGHTS). The helper exits; the
namespaces live on through the descriptors. The proxy takes the listeners; the command's
child joins the namespaces (setns) instead of making a network namespace of its own.

Why not a unix socket bridged into the namespace, as sandbox-runtime does: a socket
*made inside* the namespace and accepted *outside* it needs no process inside the
command's tree, no unix socket the command could reach, and no copy through a bridge:
the namespace holds nothing the command can use but the two proxy ports.

Why a forked helper and not a thread: unshare(CLONE_NEWUSER) refuses a multithreaded
caller, and the agent has threads (the proxy's among them). The helper runs only
system calls between fork and _exit.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import warnings
from dataclasses import dataclass, field

from .proxy import HTTP_PORT, SOCKS_PORT

__all__ = ["CommandNetwork", "make_command_network"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP_RUNNING = 0x1 | 0x40
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class CommandNetwork:
    """One command's network namespace (and user namespace, unprivileged) and the
    listeners made inside it. ``close()`` once the proxy has taken the listeners and
    the child has joined the namespaces."""

    netns_fd: int
    userns_fd: int = -1
    listeners: list[socket.socket] = field(default_factory=list)

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.netns_fd,) if self.userns_fd < 0 else (self.userns_fd, self.netns_fd)

    def close(self) -> None:
        for fd in (self.netns_fd, self.userns_fd):
            if fd >= 0:
                os.close(fd)
        self.netns_fd = self.userns_fd = -1
        for sock in self.listeners:
            sock.close()
        self.listeners = []


def _helper(channel: socket.socket, userns: bool, ports: tuple[int, int]) -> None:
    """In the forked helper: make the namespaces and the listeners, send them, exit."""
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWNET | (_CLONE_NEWUSER if userns else 0)
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET" + ("|CLONE_NEWUSER)" if userns else ")"))
    if userns:
        for path, data in (("/proc/self/setgroups", b"deny"),
                           ("/proc/self/uid_map", b"%d %d 1" % (uid, uid)),
                           ("/proc/self/gid_map", b"%d %d 1" % (gid, gid))):  # fmt: skip
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", _IFF_UP_RUNNING, b""))
    listeners = [socket.create_server(("127.0.0.1", port), backlog=128) for port in ports]
    fds = [os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)]
    if userns:
        fds.insert(0, os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC))
    socket.send_fds(channel, [b"ok"], [*fds, *(s.fileno() for s in listeners)])


def make_command_network(
    http_port: int = HTTP_PORT, socks_port: int = SOCKS_PORT, *, userns: bool | None = None
) -> CommandNetwork:
    """A fresh network namespace with lo up and the proxy's two listeners inside.
    ``userns``: make a user namespace too (default: when not root). Raises OSError
    naming the step the kernel refused."""
    if userns is None:
        userns = os.geteuid() != 0
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads; the helper only
        # makes system calls and leaves with _exit.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the helper's side, measured by the tests
        code = 0
        try:
            ours.close()
            _helper(theirs, userns, (http_port, socks_port))
        except BaseException as exc:
            code = 1
            try:
                message = f"{exc}".encode(errors="replace")[:1000]
                theirs.send(b"error:" + message)
            except BaseException:
                pass
        finally:
            os._exit(code)
    theirs.close()
    try:
        ours.settimeout(10)
        message, fds, _flags, _addr = socket.recv_fds(ours, 2048, 4)
    finally:
        ours.close()
        _reap(pid)
    if not message.startswith(b"ok"):
        for fd in fds:
            os.close(fd)
        text = message.removeprefix(b"error:").decode(errors="replace") or "the helper died"
        raise OSError(errno.EPERM, f"cannot make the command's network namespace: {text}")
    expected = 4 if userns else 3
    if len(fds) != expected:
        for fd in fds:
            os.close(fd)
        raise OSError(errno.EPROTO, "the network namespace helper sent an incomplete answer")
    ns = fds[: expected - 2]
    listeners = [socket.socket(fileno=fd) for fd in fds[expected - 2 :]]
    for fd in (*ns, *(s.fileno() for s in listeners)):
        os.set_inheritable(fd, False)
    return CommandNetwork(netns_fd=ns[-1], userns_fd=ns[0] if userns else -1,
                          listeners=listeners)  # fmt: skip


def _reap(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue
