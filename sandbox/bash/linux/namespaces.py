"""Namespaces: mounts, capabilities, the PID namespace a command is forked into
(`fork_in_pid_namespace`), the empty network namespace and the egress proxy's
listeners (`send_proxy_listeners`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.bash.linux.syscalls import _libc, _status_field

if TYPE_CHECKING:
    from sandbox.bash.linux.confinement import Confinement




_CLONE_NEWNS = 0x00020000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 0x1, 0x20, 0x1000
_CLONE_NEWIPC = 0x08000000
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE = 442, -100, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _mount_setattr(path: bytes, *, recursive: bool, set_: int, clear: int) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    flags = _AT_RECURSIVE if recursive else 0
    if _libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path,
                     ctypes.c_uint(flags), ctypes.byref(attr),
                     ctypes.c_size_t(ctypes.sizeof(attr))) != 0:  # fmt: skip
        raise OSError(ctypes.get_errno(), f"mount_setattr({os.fsdecode(path)})")
_PR_SET_SECCOMP = 22
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_SECCOMP_MODE_FILTER = 2
_SIOCSIFFLAGS = 0x8914
_IFF_UP_RUNNING = 0x1 | 0x40
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


_ns_lock = threading.Lock()


def _forget_the_parents_lock() -> None:
    """In a child forked while another thread held it: it would wait forever."""
    global _ns_lock
    _ns_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_lock)
_own_pid_ns = -1
_empty_net_ns = -1
_PR_SET_CHILD_SUBREAPER = 36
_CAP_SYS_ADMIN = 21


def _ns_fd(kind: str) -> int:
    return os.open(f"/proc/self/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)


def namespace_admin() -> bool:
    """Whether this process may make namespaces without a user namespace of its own:
    CAP_SYS_ADMIN in its user namespace (root on a host, root of a rootless container).
    An ordinary user, or root stripped of CAP_SYS_ADMIN (Docker's default), needs one.
    Asked with capget(2) (~1 µs; reading /proc/self/status took ~50 µs, and every
    confined run's plan asks)."""
    header = ctypes.create_string_buffer(struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(24)  # two {effective, permitted, inheritable}
    if _libc.capget(header, data) == 0:
        return bool(struct.unpack_from("=I", data.raw, 0)[0] >> _CAP_SYS_ADMIN & 1)
    try:
        caps = int(_status_field("CapEff") or "0", 16)
    except (OSError, ValueError):
        return False
    return bool(caps >> _CAP_SYS_ADMIN & 1)


def initial_user_namespace() -> bool:
    """Whether this process is in the machine's first user namespace (where the PID
    namespace it was born in is owned, so that `setns` back to it is allowed)."""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


class PidNamespaceLost(OSError):
    """`setns` back to our own PID namespace failed after a fork into a new one: every
    later fork of this process would land in that command's namespace. The process
    that forks (the spawner, never the agent) must stop forking: it exits, and the
    agent starts a new one."""


def fork_in_pid_namespace(c: Confinement) -> int:
    """Fork a child that is the first process (pid 1) of a PID namespace of its own,
    as `os.fork` does: its pid (as seen here) in the parent, 0 in the child.

    Two ways, the same result:

    - Root on the host (CAP_SYS_ADMIN in the first user namespace): ``unshare(
      CLONE_NEWPID)``, fork, ``setns`` back to our own namespace: one fork.
    - Otherwise (an ordinary user, root of a rootless container, root without
      CAP_SYS_ADMIN): an intermediate child makes the namespaces (``CLONE_NEWUSER``
      first when `c.new_userns`, mapping our uid and gid to themselves, then
      ``CLONE_NEWPID``), forks the command's first process and exits. `setns` back is
      not needed (the intermediate's namespaces die with it) and would be refused: our
      PID namespace belongs to a user namespace we hold no capability in. This process
      becomes a child subreaper (PR_SET_CHILD_SUBREAPER) so that the command's first
      process is reparented to it, not to init: it waits for it as for any child. The
      child waits for the intermediate to be gone before returning (a parent-death
      signal set before would fire at the intermediate's exit). bubblewrap's
      ``--unshare-user --unshare-pid`` does the same with a clone() and a monitor
      process; Python can only fork.

    Raises OSError naming the step that failed (PidNamespaceLost: see there); never
    ends the calling process.
    """
    if not c.new_userns and _can_setns_back():
        return _fork_with_setns_back()
    return _fork_through_intermediate(c)


def _fork_with_setns_back() -> int:
    global _own_pid_ns
    with _ns_lock:
        if _own_pid_ns < 0:
            _own_pid_ns = _ns_fd("pid")
    if _libc.unshare(ctypes.c_int(_CLONE_NEWPID)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWPID): {os.strerror(err)}")
    try:
        pid = os.fork()
    finally:
        if os.getpid() != 1 and _libc.setns(ctypes.c_int(_own_pid_ns),
                                            ctypes.c_int(_CLONE_NEWPID)) != 0:  # fmt: skip
            err = ctypes.get_errno()
            raise PidNamespaceLost(err, "setns back to our PID namespace failed: "
                                   f"{os.strerror(err)}")  # fmt: skip
    return pid


_subreaper_set = False


def _fork_through_intermediate(c: Confinement) -> int:
    global _subreaper_set
    if not _subreaper_set:
        if _libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")
        _subreaper_set = True
    flags = _CLONE_NEWPID | (_CLONE_NEWUSER if c.new_userns else 0)
    maps = (
        ("/proc/self/setgroups", b"deny"),
        ("/proc/self/uid_map", b"%d %d 1" % (c.euid, c.euid)),
        ("/proc/self/gid_map", b"%d %d 1" % (c.egid, c.egid)),
    ) if c.new_userns else ()  # fmt: skip
    report_r, report_w = os.pipe2(os.O_CLOEXEC)
    try:
        middle = os.fork()
    except BaseException:
        os.close(report_r)
        os.close(report_w)
        raise
    if middle == 0:
        # The intermediate: it only ever leaves through os._exit.
        try:
            os.close(report_r)
            gone = os.pidfd_open(os.getpid())  # the child waits on it (see above)
            if _libc.unshare(ctypes.c_int(flags)) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"unshare(CLONE_NEW{'USER|CLONE_NEW' if c.new_userns else ''}"
                              f"PID): {os.strerror(err)}")  # fmt: skip
            for path, data in maps:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            pid = os.fork()
        except BaseException as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            with contextlib.suppress(BaseException):
                os.write(report_w, f"E{why}".encode()[:4000])
            os._exit(1)
        if pid == 0:
            # The command's first process: once the intermediate is gone (and so we
            # are the caller's child), carry on as the caller's child.
            os.close(report_w)
            while not select.select([gone], [], [], None)[0]:
                pass
            os.close(gone)
            return 0
        with contextlib.suppress(BaseException):
            os.write(report_w, b"P%d" % pid)
        os._exit(0)
    os.close(report_w)
    try:
        chunks = []
        while True:
            chunk = os.read(report_r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(report_r)
        os.waitpid(middle, 0)  # once it is reaped, its child is ours
    said = b"".join(chunks).decode("utf-8", "replace")
    if said.startswith("P") and said[1:].isdigit():
        return int(said[1:])
    raise OSError(errno.EPERM, said[1:] or "the process making the namespaces died")


def empty_network_namespace() -> int:
    """An fd of a network namespace with nothing in it (lo down), made once per process
    and joined by every command of network="none": creating a namespace per command
    costs ~0.7 ms, and its teardown more, in a kernel work queue. Commands that share it
    can reach nothing through it (lo is down, so not even each other), and a root
    command cannot bring lo up (no CAP_NET_ADMIN). Needs CAP_SYS_ADMIN."""
    global _empty_net_ns
    if not _can_setns_back():
        # This thread could not come back (see _shared_netns): never try.
        raise OSError(errno.EPERM, "an empty network namespace shared by setns needs "
                      "CAP_SYS_ADMIN in the first user namespace")  # fmt: skip
    with _ns_lock:
        if _empty_net_ns < 0:
            own = _ns_fd("net")
            try:
                if _libc.unshare(ctypes.c_int(_CLONE_NEWNET)) != 0:
                    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
                try:
                    _empty_net_ns = _ns_fd("net")
                finally:
                    # Only this thread moved; it moves back.
                    if _libc.setns(ctypes.c_int(own), ctypes.c_int(_CLONE_NEWNET)) != 0:
                        raise OSError(ctypes.get_errno(), "setns back to our network namespace")
            finally:
                os.close(own)
        return _empty_net_ns


def send_proxy_listeners(channel: int, ports: tuple[int, ...]) -> None:
    """In the command's child, inside its own network namespace with lo up: listen on
    127.0.0.1:PORT for each port, send the listeners to the agent's egress proxy over
    ``channel`` (SCM_RIGHTS) and close every copy here (sandbox/bash/network/handover.py
    says why)."""
    listeners = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listeners.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(128)
        with socket.socket(fileno=channel) as ch:
            socket.send_fds(ch, [b"ok"], [s.fileno() for s in listeners])
    finally:
        for s in listeners:
            s.close()


def _shared_netns(c: Confinement) -> bool:
    """Whether the command joins the one empty network namespace of this process: made
    by this thread, which then moves back with `setns`, which only root of the first
    user namespace may do (root of a rootless container may not: our own namespace is
    not its). Otherwise each command unshares its own."""
    return (c.new_netns and not c.new_userns and not c.loopback_up
            and _can_setns_back())  # fmt: skip


_setns_back: bool | None = None


def _can_setns_back() -> bool:
    global _setns_back
    if _setns_back is None:
        _setns_back = initial_user_namespace() and namespace_admin()
    return _setns_back
