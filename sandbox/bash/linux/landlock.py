"""Landlock: the ruleset of a `Confinement` (filesystem, TCP and scope rights), built and
filled before the fork and kept ready between runs (`_Rules`, `_cached_rules`)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import stat
import struct
import threading
from typing import TYPE_CHECKING

from sandbox.bash.linux.etc import ETC
from sandbox.bash.linux.syscalls import SYS_landlock_add_rule, SYS_landlock_create_ruleset, _libc

if TYPE_CHECKING:
    from sandbox.bash.linux.confinement import Confinement


# System directories a command may read and execute. /etc is handled separately (only
# its world-readable files). Missing ones are skipped.
SYSTEM_READ_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                     "/proc", "/sys/devices/system/cpu")  # fmt: skip
# Devices a command may read and write (not ioctl).
DEVICE_PATHS = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")




_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REFER = 1 << 13
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0
_SCOPE_SIGNAL = 1 << 1
_RULE_PATH_BENEATH = 1
# The rights that make sense on a file (not a directory).
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _ruleset_attr(c: Confinement) -> tuple[bytes, int]:
    """struct landlock_ruleset_attr for `c`, and the filesystem rights it handles."""
    handled_fs = _fs_rights(c.landlock_abi) if c.landlock_fs else 0
    handled_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if c.landlock_net else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if c.landlock_scopes else 0
    if c.landlock_abi >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif c.landlock_abi >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    return attr, handled_fs


def _read_rights() -> int:
    return _FS_READ_FILE | _FS_READ_DIR | _FS_EXECUTE


class _Rules:
    """The part of a Landlock ruleset that is the same from run to run, kept ready.

    Opening and checking each path is most of the cost of a ruleset: here each path is
    opened once (O_PATH, close-on-exec), and each run only adds the prepared rules to a
    new ruleset (one system call each), plus its own private paths. A rule names an
    inode, not a path, so a path replaced since (a new /etc/passwd written by rename, a
    workspace deleted and made again) would be granted stale: `fresh` stats every path
    again and compares its device and inode with the open one's (which cannot have
    been reused: the fd keeps the old inode allocated), and the rules are rebuilt when
    one differs.
    """

    def __init__(self, c: Confinement) -> None:
        self.attr, handled_fs = _ruleset_attr(c)
        self.handled_fs = handled_fs
        self.rules: list[_PathBeneath] = []
        self._fds: list[int] = []  # ours: the workspace and the policy's extra paths
        self._shared: list[int] = []  # the system's, shared by every rule set
        self._stamps: list[tuple[str, tuple[int, int]]] = []
        self._absent: list[str] = []  # granted once they exist: the rules are rebuilt
        if handled_fs:
            device = _FS_READ_FILE | _FS_WRITE_FILE | (_FS_TRUNCATE & handled_fs)
            try:
                for paths, rights in (
                    (c.read_paths, _read_rights()),
                    (c.write_paths, handled_fs),
                    (c.device_paths, device),
                ):
                    for path in paths:
                        listing_only = path.endswith("/") and len(path) > 1
                        path = path.rstrip("/") if listing_only else path
                        wanted = _FS_READ_DIR if listing_only else rights
                        shared = _shared_path(path)
                        if shared:
                            opened = _shared_fds.take(path, wanted)
                        else:
                            opened = _open_rule(path, wanted)
                        if opened is None:
                            self._absent.append(path)
                        if opened is not None:
                            (self._shared if shared else self._fds).append(opened[0])
                            self.rules.append(_PathBeneath(opened[1], opened[0]))
                            st = os.fstat(opened[0])
                            self._stamps.append((path, (st.st_dev, st.st_ino)))
            except BaseException:
                self.close()
                raise

    def fresh(self) -> bool:
        if any(os.path.exists(path) for path in self._absent):
            return False
        for path, stamp in self._stamps:
            try:
                st = os.stat(path)
            except OSError:
                return False
            if (st.st_dev, st.st_ino) != stamp:
                return False
        return True

    def ruleset(self, private_paths: tuple[str, ...]) -> int:
        """A new ruleset with every prepared rule and `private_paths` read-write."""
        buf = ctypes.create_string_buffer(self.attr, len(self.attr))
        fd = _libc.syscall(ctypes.c_long(SYS_landlock_create_ruleset), buf,
                           ctypes.c_size_t(len(self.attr)), ctypes.c_uint32(0))  # fmt: skip
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        try:
            add = _libc.syscall
            for rule in self.rules:
                if add(_SYS_ADD_RULE, fd, _RULE_PATH_BENEATH_C, ctypes.byref(rule), _ZERO) < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule: {os.strerror(err)}")
            if self.handled_fs:
                for path in private_paths:
                    _add_path_rule(fd, path, self.handled_fs)
        except BaseException:
            os.close(fd)
            raise
        return int(fd)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        for fd in self._shared:
            _shared_fds.release(fd)
        self._shared.clear()
        self.rules.clear()


def _shared_path(path: str) -> bool:
    """A path every rule set grants alike: the system's directories, devices and /etc."""
    return (path in SYSTEM_READ_PATHS or path in DEVICE_PATHS or path == ETC
            or path.startswith(ETC + "/"))  # fmt: skip


class _SharedFds:
    """The O_PATH descriptors of the system paths, opened once per process and shared
    by every cached rule set: per workspace only its own paths are opened. Without this
    an agent with several workspaces held ~180 descriptors per workspace when /etc is
    granted piece by piece (no private /proc), and the sixth workspace hit the default
    limit of 1024 open files. A path replaced since (its device and inode differ) gets
    a new descriptor; the old one is closed once no rule set uses it."""

    def __init__(self) -> None:
        self._current: dict[str, tuple[int, int]] = {}  # path -> (fd, rights)
        self._refs: dict[int, int] = {}
        self._superseded: set[int] = set()
        self._lock = threading.Lock()

    def take(self, path: str, rights: int) -> tuple[int, int] | None:
        with self._lock:
            known = self._current.get(path)
            if known is not None:
                fd = known[0]
                try:
                    st, now = os.fstat(fd), os.stat(path)
                    same = (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
                except OSError:
                    same = False
                if not same:
                    del self._current[path]
                    self._superseded.add(fd)
                    self._close_if_unused(fd)
                    known = None
            if known is None:
                opened = _open_rule(path, _read_rights() | _FS_WRITE_FILE | _FS_TRUNCATE)
                if opened is None:
                    return None
                known = self._current[path] = opened
            fd = known[0]
            self._refs[fd] = self._refs.get(fd, 0) + 1
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            except OSError:
                is_dir = False
            return fd, rights if is_dir else rights & _FILE_RIGHTS

    def release(self, fd: int) -> None:
        with self._lock:
            self._refs[fd] = self._refs.get(fd, 1) - 1
            self._close_if_unused(fd)

    def _close_if_unused(self, fd: int) -> None:
        if fd in self._superseded and self._refs.get(fd, 0) <= 0:
            self._superseded.discard(fd)
            self._refs.pop(fd, None)
            os.close(fd)


_shared_fds = _SharedFds()


_SYS_ADD_RULE = ctypes.c_long(SYS_landlock_add_rule)
_RULE_PATH_BENEATH_C = ctypes.c_int(_RULE_PATH_BENEATH)
_ZERO = ctypes.c_uint32(0)


_rules_cache: dict[Confinement, _Rules] = {}
_rules_lock = threading.Lock()


def _forget_the_parents_locks() -> None:
    """In a child forked while another thread held one of these: it would wait forever."""
    global _rules_lock
    _rules_lock = threading.Lock()
    _shared_fds._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_locks)
_RULES_CACHED = 8


def _cached_rules(c: Confinement) -> _Rules:
    """The prepared rules of `c` (its private paths aside), built on first use and again
    when a path they name was replaced; at most _RULES_CACHED sets are kept open."""
    key = dataclasses.replace(c, private_paths=())
    with _rules_lock:
        rules = _rules_cache.pop(key, None)
        if rules is not None and not rules.fresh():
            rules.close()
            rules = None
        if rules is None:
            rules = _Rules(key)
        _rules_cache[key] = rules  # most recently used last
        while len(_rules_cache) > _RULES_CACHED:
            _rules_cache.pop(next(iter(_rules_cache))).close()
        return rules


def _open_rule(path: str, rights: int) -> tuple[int, int] | None:
    """An O_PATH fd of `path` and the rights that apply to it (None: it is absent)."""
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None  # absent on this machine (e.g. /lib32): nothing to grant
    try:
        if not stat.S_ISDIR(os.fstat(target).st_mode):
            rights &= _FILE_RIGHTS
    except BaseException:
        os.close(target)
        raise
    return target, rights


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    opened = _open_rule(path, rights)
    if opened is None:
        return
    target, rights = opened
    try:
        rule = _PathBeneath(rights, target)
        done = _libc.syscall(ctypes.c_long(SYS_landlock_add_rule), ctypes.c_int(ruleset),
                             ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                             ctypes.c_uint32(0))  # fmt: skip
        if done < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(target)
