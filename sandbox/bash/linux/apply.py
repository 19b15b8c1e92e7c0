"""Preparation and application: `prepare` builds, before the fork, everything
`Prepared.apply` does after it, in the forked child, with system calls only (the order
is in `sandbox.bash.linux.confinement`'s docstring)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
from typing import TYPE_CHECKING

from sandbox.bash.linux import protected_apply as _protected
from sandbox.bash.linux.etc import _etc_secrets
from sandbox.bash.linux.landlock import (
    _add_path_rule,
    _cached_rules,
    _fs_rights,
    _read_rights,
    _Rules,
)
from sandbox.bash.linux.namespaces import (
    _CLONE_NEWIPC,
    _CLONE_NEWNET,
    _CLONE_NEWNS,
    _CLONE_NEWUSER,
    _IFF_UP_RUNNING,
    _LINUX_CAPABILITY_VERSION_3,
    _MOUNT_ATTR_NODEV,
    _MOUNT_ATTR_NOSUID,
    _MOUNT_ATTR_RDONLY,
    _MS_BIND,
    _MS_NODEV,
    _MS_NOEXEC,
    _MS_NOSUID,
    _MS_PRIVATE,
    _MS_RDONLY,
    _MS_REC,
    _MS_REMOUNT,
    _PR_CAP_AMBIENT,
    _PR_CAP_AMBIENT_CLEAR_ALL,
    _PR_CAPBSET_DROP,
    _PR_SET_NO_NEW_PRIVS,
    _PR_SET_SECCOMP,
    _SECCOMP_MODE_FILTER,
    _SIOCSIFFLAGS,
    _last_cap,
    _mount_setattr,
    _shared_netns,
    empty_network_namespace,
    send_proxy_listeners,
)
from sandbox.bash.linux.seccomp import _SockFprog, seccomp_program
from sandbox.bash.linux.syscalls import SYS_capset, SYS_landlock_restrict_self, _libc

if TYPE_CHECKING:
    from sandbox.bash.linux.confinement import Confinement




_seccomp_cache: dict[tuple[bool, bool], ctypes.Array[ctypes.c_char]] = {}


class Prepared:
    """A `Confinement` made ready in the process that will fork: the Landlock ruleset
    fd, the BPF program and every structure are built here, so that `apply`, run in
    the forked child, only makes system calls. What is the same from run to run (the
    Landlock rules of system paths, the BPF program, the empty network namespace) is
    built once per process and reused. Call `close` once the child exists (the ruleset
    fd is close-on-exec, so the child's copy goes away at exec)."""

    def __init__(self, c: Confinement) -> None:
        self.confinement = c
        self._ruleset = -1
        self._rules: _Rules | None = None
        self._etc_generation = 0
        self._own_mounts = False  # set in the child that made its own mount namespace
        self._empty_file = b""  # covers a protected name that is a symbolic link
        self.ahead = False  # a zygote's, applied ahead of its request (child.py)
        if c.protected is not None and c.protected.links:
            self._empty_file = _etc_secrets.placeholder_paths()[1]
        self._run_paths: tuple[str, ...] = ()  # a zygote's run's TMPDIR, given later
        if c.landlock_abi and (c.landlock_fs or c.landlock_net or c.landlock_scopes):
            self._rules = _cached_rules(c)
            self._ruleset = self._rules.ruleset(c.private_paths)
        try:
            which = (c.deny_unix_sockets, c.deny_inet_sockets)
            bpf = _seccomp_cache.get(which) if c.seccomp else None
            if c.seccomp and bpf is None:
                program = seccomp_program(deny_unix_sockets=c.deny_unix_sockets,
                                          deny_inet_sockets=c.deny_inet_sockets)  # fmt: skip
                bpf = _seccomp_cache[which] = ctypes.create_string_buffer(
                    program, len(program))
            self._bpf = bpf
            self._fprog = _SockFprog(len(bpf) // 8 if bpf is not None else 0,
                                     ctypes.addressof(bpf) if bpf is not None else 0)  # fmt: skip
            self._cap_header_buf = ctypes.create_string_buffer(
                struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0), 8)
            self._cap_data_buf = ctypes.create_string_buffer(24)
            self._caps = _CAPS
            self._ifreq = struct.pack("16sH14s", b"lo", _IFF_UP_RUNNING, b"")
            self._uid_map = b"%d %d 1" % (c.euid, c.euid)
            self._gid_map = b"%d %d 1" % (c.egid, c.egid)
            self._netns = empty_network_namespace() if _shared_netns(c) else -1
            self._covers: list[tuple[bytes, bytes]] = []
            self._placeholder_root = b""
            if c.hide_etc_secrets:
                root, file, directory = _etc_secrets.placeholder_paths()
                self._placeholder_root = root
                self._covers = [(directory if is_dir else file, path)
                                for path, is_dir in _etc_secrets.entries()]  # fmt: skip
                self._etc_generation = _etc_secrets.generation
            # With a PID namespace of its own, the user namespace around it was made by
            # `fork_in_pid_namespace`, before the child existed.
            self._own_userns = c.new_userns and not c.private_proc
            self._unshare_flags = (
                (_CLONE_NEWNET if c.new_netns and self._netns < 0 else 0)
                | (_CLONE_NEWUSER if self._own_userns else 0)
                | (_CLONE_NEWNS if c.protected_mount_ns else 0)
            )
        except BaseException:
            self.close()
            raise

    # Each step raises OSError naming itself; CPython's preexec_fn machinery turns any
    # exception into SubprocessError("Exception occurred in preexec_fn."), and the
    # process layer reports it.

    def apply_namespaces(self) -> None:
        c = self.confinement
        if self._netns >= 0 and _libc.setns(ctypes.c_int(self._netns),
                                            ctypes.c_int(_CLONE_NEWNET)) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "setns(empty network namespace)")
        if self._unshare_flags:
            if _libc.unshare(ctypes.c_int(self._unshare_flags)) != 0:
                raise OSError(ctypes.get_errno(), "unshare")
        if self._own_userns:
            for path, data in (
                ("/proc/self/setgroups", b"deny"),
                ("/proc/self/uid_map", self._uid_map),
                ("/proc/self/gid_map", self._gid_map),
            ):
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
        if c.loopback_up:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS, self._ifreq)
            finally:
                s.close()
            if c.proxy_channel >= 0:
                send_proxy_listeners(c.proxy_channel, c.proxy_ports)
        if c.protected_mount_ns and c.protected is not None:  # sandbox/bash/linux/protected.py
            _protected.apply_in_new_mount_namespace(c.protected, self._empty_file,
                                                    strict=not self.ahead)  # fmt: skip
            self._own_mounts = True
        if c.private_proc:
            self._private_proc()

    def _private_proc(self) -> None:
        # A /proc mounted by the first process of a PID namespace lists that namespace
        # only. Mounted in a mount namespace of the command's own, private so that
        # nothing propagates back to the host's.
        if os.getpid() != 1:
            raise OSError(errno.EINVAL, "private /proc: the child is not the first process "
                          "of a new PID namespace (fork it with "
                          "confinement.fork_in_pid_namespace())")
        # An IPC namespace too: SysV shared memory, queues and semaphores are otherwise
        # the host's, and uid 0 owns root's segments.
        if _libc.unshare(ctypes.c_int(_CLONE_NEWNS | _CLONE_NEWIPC)) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS|CLONE_NEWIPC)")
        if _libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
            raise OSError(ctypes.get_errno(), "mount(/, MS_REC|MS_PRIVATE)")
        if _libc.mount(b"proc", b"/proc", b"proc",
                       ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "mount(proc, /proc)")
        if self._covers:
            # The placeholders on a read-only mount first: bind mounts made from there
            # are read-only too, so not even their owner can chmod them.
            root = self._placeholder_root
            for source, flags in ((root, _MS_BIND), (None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)):
                if _libc.mount(source, root, None, ctypes.c_ulong(flags), None) != 0:
                    raise OSError(ctypes.get_errno(), "mount(placeholders, read-only)")
            for source, target in self._covers:
                if _libc.mount(source, target, None, ctypes.c_ulong(_MS_BIND), None) != 0:
                    err = ctypes.get_errno()
                    if err != errno.ENOENT:  # removed since the scan: nothing to cover
                        raise OSError(err, f"cover {os.fsdecode(target)}")
        if self._ruleset >= 0 and self.confinement.landlock_fs:
            # The rule names the new /proc's inode, which exists only from here on.
            _add_path_rule(self._ruleset, "/proc", _read_rights())
        self._own_mounts = True  # this process's mount namespace: see lock_mounts

    def lock_mounts(self) -> None:
        """In the child's own mount namespace (private /proc), after it joined its
        cgroups and before it drops its capabilities: every mount read-only and nosuid
        but the paths the command may write. Landlock does not govern chmod, utime or
        extended attributes, and root owns root's files: without this a command could
        chmod 4755 a root binary of the host, or make /etc/passwd writable."""
        if not self._own_mounts or os.getpid() != 1:
            return  # never in a shared mount namespace
        writable = [os.fsencode(p) for p in (*self.confinement.write_paths,
                                             *self.confinement.private_paths,
                                             *self._run_paths)
                    if os.path.exists(p)]
        for path in writable:
            self._bind_self(path)
        _mount_setattr(b"/", recursive=True, set_=_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID,
                       clear=0)
        for path in writable:
            # nodev: a device node there is inert (/dev/shm included), but for a
            # device file granted itself and the directories of devices (/dev, /dev/pts).
            nodev = _MOUNT_ATTR_NODEV if os.path.isdir(path) and path not in (
                b"/dev", b"/dev/pts") else 0  # fmt: skip
            _mount_setattr(path, recursive=False, set_=nodev, clear=_MOUNT_ATTR_RDONLY)
        if self.confinement.protected is not None:  # sandbox/bash/linux/protected.py
            _protected.apply_mounts(self.confinement.protected, self._empty_file,
                                    strict=not self.ahead)  # fmt: skip
        # The working directory was entered before the bind mounts: enter it again, so
        # that relative paths resolve on the writable mount on top.
        os.chdir(os.getcwd())

    @staticmethod
    def _bind_self(path: bytes) -> None:
        if _libc.mount(path, path, None, ctypes.c_ulong(_MS_BIND), None) != 0:
            raise OSError(ctypes.get_errno(), f"bind {os.fsdecode(path)}")

    def still_fresh(self) -> bool:
        """Whether what was prepared still matches the machine: no path of a Landlock
        rule replaced, no entry of /etc created, removed or chmod'ed since (for a
        zygote, prepared ahead of its request)."""
        c = self.confinement
        if self._rules is not None and _cached_rules(c) is not self._rules:
            return False
        if c.hide_etc_secrets:
            _etc_secrets.entries()
            return _etc_secrets.generation == self._etc_generation
        return True

    def stale_in_zygote(self) -> str:
        """In a zygote (forked after this was prepared), given a request straight from
        the agent: '' if what was prepared still matches the machine, else what
        changed. Reads the shared state without touching the forking process's."""
        if self._rules is not None and not self._rules.fresh():
            return "a path of a Landlock rule was replaced"
        if self.confinement.hide_etc_secrets and _etc_secrets.stale_since(
                self._etc_generation):  # fmt: skip
            return "/etc changed"
        return self.protected_stale()

    def protected_stale(self) -> str:
        """In a zygote whose mounts were made ahead: '' if every protected path is still
        a read-only mount (a file renamed over one on the host detaches it), else what
        is not."""
        if self.confinement.protected is None or not self._own_mounts:
            return ""
        return _protected.still_protected(self.confinement.protected)

    def zygote_fds(self) -> tuple[int, ...]:
        """The descriptors a zygote still needs once its namespaces are made: the
        ruleset, and the /etc watch its staleness check reads."""
        return tuple(fd for fd in (self._ruleset, _etc_secrets.watch_fd) if fd >= 0)

    def grant_private_paths(self, paths: tuple[str, ...]) -> None:
        """Add read-write rules for `paths` to this (not yet applied) ruleset: a zygote
        learns its run's private paths only once a request comes."""
        if self._ruleset >= 0 and self.confinement.landlock_fs:
            for path in paths:
                _add_path_rule(self._ruleset, path, _fs_rights(self.confinement.landlock_abi))
        self._run_paths = paths  # writable when lock_mounts makes the rest read-only

    def drop_bounding_set(self) -> None:
        if not self.confinement.drop_capabilities:
            return
        for cap in self._caps:
            if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                err = ctypes.get_errno()
                if err == errno.EPERM:
                    return  # unprivileged, no user namespace: holds none to drop
                if err != errno.EINVAL:
                    raise OSError(err, "PR_CAPBSET_DROP")

    def drop_capabilities(self) -> None:
        if not self.confinement.drop_capabilities:
            return
        if _libc.syscall(ctypes.c_long(SYS_capset), self._cap_header_buf,
                         self._cap_data_buf) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "capset")
        _libc.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)

    def restrict(self) -> None:
        c = self.confinement
        if c.no_new_privs or self._ruleset >= 0 or c.seccomp:
            if _libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if self._ruleset >= 0:
            done = _libc.syscall(ctypes.c_long(SYS_landlock_restrict_self),
                                 ctypes.c_int(self._ruleset), ctypes.c_uint32(0))  # fmt: skip
            if done != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self")
        if c.seccomp:
            if _libc.prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                           ctypes.byref(self._fprog), 0, 0) != 0:  # fmt: skip
                raise OSError(ctypes.get_errno(), "seccomp")

    def apply(self) -> None:
        """Everything, for a child that keeps its identity (see the module doc)."""
        self.apply_namespaces()
        self.lock_mounts()
        self.drop_bounding_set()
        self.drop_capabilities()
        self.restrict()

    def close(self) -> None:
        if self._ruleset >= 0:
            os.close(self._ruleset)
            self._ruleset = -1

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


_CAPS = [ctypes.c_ulong(cap) for cap in range(_last_cap() + 1)]


def prepare(confinement: Confinement) -> Prepared:
    """Build, before the fork, everything `Prepared.apply` needs after it. A
    confinement with private_proc must then be forked by `fork_in_pid_namespace`."""
    return Prepared(confinement)
