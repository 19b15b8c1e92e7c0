"""Protected paths enforced: the bind mounts made in the command's own mount namespace
(`apply_mounts`), the Landlock rules where there is none (`landlock_paths`), and the
plan's protected-paths layer (`plan_layer`). What is protected is found by
`sandbox.bash.linux.protected.scan` (docs/protected-paths.md)."""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import tempfile
import threading
import weakref
from typing import TYPE_CHECKING

from sandbox.bash.config import ConfinementUnavailable
from sandbox.bash.linux.placeholders import Placeholders
from sandbox.bash.linux.protected import ProtectedPaths, _inside
from sandbox.bash.linux.syscalls import _libc
from sandbox.errors import ConfigurationError

if TYPE_CHECKING:
    from sandbox.bash.linux.confinement import Confinement

__all__ = [
    "apply_in_new_mount_namespace",
    "apply_mounts",
    "describe_mechanism",
    "landlock_paths",
    "mount_namespace_problem",
    "plan_layer",
    "still_protected",
]


# --------------------------------------------------------------------------- in the child

_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 1 << 18
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, 0o2000000
_AT_FDCWD, _AT_SYMLINK_NOFOLLOW, _AT_RECURSIVE = -100, 0x100, 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _bind(source: bytes, target: bytes) -> None:
    """A clone of `source` (itself, not what a symbolic link there points to) mounted on
    `target` (a symbolic link there is covered, not followed)."""
    tree = _libc.syscall(ctypes.c_long(_SYS_OPEN_TREE), ctypes.c_int(_AT_FDCWD), source,
                         ctypes.c_uint(_OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC
                                       | _AT_SYMLINK_NOFOLLOW))  # fmt: skip
    if tree < 0:
        raise OSError(ctypes.get_errno(), f"open_tree({os.fsdecode(source)})")
    try:
        if _libc.syscall(ctypes.c_long(_SYS_MOVE_MOUNT), ctypes.c_int(tree), b"",
                         ctypes.c_int(_AT_FDCWD), target,
                         ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH)) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), f"move_mount({os.fsdecode(target)})")
    finally:
        os.close(tree)


def _read_only(path: bytes) -> None:
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path,
                     ctypes.c_uint(_AT_RECURSIVE | _AT_SYMLINK_NOFOLLOW), ctypes.byref(attr),
                     ctypes.c_size_t(ctypes.sizeof(attr))) != 0:  # fmt: skip
        raise OSError(ctypes.get_errno(), f"mount_setattr({os.fsdecode(path)}, read-only)")


def apply_mounts(protected: ProtectedPaths, empty_file: bytes, *, strict: bool = True) -> None:
    """In the command's own mount namespace, after the workspace was bound writable:
    pin the directories on the way, bind every protected path read-only, cover symbolic
    links with `empty_file`. Raises OSError (the run fails closed) when a mount fails,
    but for a path gone since the scan (nothing there to protect: its name is then
    held by nothing, which `still_protected` reports in a zygote)."""
    for path in protected.pinned:
        target = os.fsencode(path)
        try:
            _bind(target, target)
        except FileNotFoundError:
            continue
    held = {*protected.placeholders, *(p for p, _ in protected.placeholder_files)}
    for path in (*protected.read_only, *sorted(held)):
        target = os.fsencode(path)
        try:
            _bind(target, target)
        except FileNotFoundError:
            # A placeholder is made before the run and kept until after it: gone, the
            # workspace was removed meanwhile. A zygote (not strict) goes on: its
            # request finds the path not read-only (`still_protected`) and is served
            # by a child set up then, which fails here.
            if path in held and strict:
                raise OSError(errno.ENOENT, f"placeholder {path} is gone") from None
            continue
        _read_only(target)
    for path in protected.links:
        target = os.fsencode(path)
        _bind(empty_file, target)
        _read_only(target)


def apply_in_new_mount_namespace(protected: ProtectedPaths, empty_file: bytes, *,
                                 strict: bool = True) -> None:  # fmt: skip
    """In a child that has just made a mount namespace of its own (no private /proc):
    nothing propagates back to the host's, then `apply_mounts`."""
    if _libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
        raise OSError(ctypes.get_errno(), "mount(/, MS_REC|MS_PRIVATE)")
    apply_mounts(protected, empty_file, strict=strict)


def still_protected(protected: ProtectedPaths) -> str:
    """In a process that applied `apply_mounts` earlier (a zygote, at its request): ''
    if every protected path is still a read-only mount here, else which one is not (a
    placeholder removed and made again, a path replaced since)."""
    for path in (*protected.read_only, *protected.placeholders, *protected.links,
                 *(p for p, _ in protected.placeholder_files)):  # fmt: skip
        try:
            flags = os.statvfs(path).f_flag
        except OSError:
            return f"protected path {path} is gone"
        if not flags & os.ST_RDONLY:
            return f"protected path {path} is no longer read-only here"
    return ""


# --------------------------------------------------------------------------- Landlock


def landlock_paths(protected: ProtectedPaths) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Without a mount namespace: the workspace's write grant split around the protected
    paths. Returns (read-only paths, read-write paths) that replace the workspace's
    read-write rule: every directory on the way to a protected path, and the protected
    paths themselves, read-only (no entry can be made, removed or renamed in such a
    directory); every other entry of those directories read-write."""
    ws = protected.workspace
    protected_set = {*protected.read_only, *protected.links, *protected.placeholders}
    ancestors = {ws, *protected.pinned}
    for path in protected_set:
        parent = os.path.dirname(path)
        while _inside(parent, ws):
            ancestors.add(parent)
            if parent == ws:
                break
            parent = os.path.dirname(parent)
    read: list[str] = sorted(ancestors)
    write: list[str] = []
    for directory in sorted(ancestors):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            full = os.path.join(directory, name)
            if full in ancestors or full in protected_set or os.path.islink(full):
                continue  # a link is not followed to grant its target
            write.append(full)
    read += sorted(p for p in protected_set if os.path.lexists(p))
    return tuple(read), tuple(write)


# --------------------------------------------------------------------------- planning


def plan_layer(confinement: Confinement, report: dict[str, str], *,
               protected: ProtectedPaths | None, filesystem: str, mode: str,
               own_mounts: bool, root: bool) -> Confinement:  # fmt: skip
    """The protected paths of one run, in `confinement` (mounts in the command's own
    mount namespace: private_proc's (`own_mounts`), else one made for them, in a user
    namespace when unprivileged; else Landlock rules around them) and in `report`
    ("protected-paths"). Raises ConfigurationError when they cannot be enforced (a walk
    past its bound, a hard link), and ConfinementUnavailable under mode="required"
    when neither mechanism is there."""
    layer = "protected-paths"
    if filesystem != "read-write":
        report[layer] = "active: the whole workspace is read-only"
        return confinement
    if protected is None or not protected.patterns:
        report[layer] = "inactive: no protected paths for this run (protected_paths is empty)"
        return confinement
    if protected.problem:
        raise ConfigurationError(f"protected paths cannot be enforced: {protected.problem}")
    if own_mounts:
        report[layer] = ("active: read-only mounts in the command's own mount namespace; "
                         + protected.describe())  # fmt: skip
        planned = dataclasses.replace(confinement, protected=protected)
        # The placeholders live as long as this confinement: the run's, or a reserved
        # run's whose zygote binds them ahead (so that they are there, the same, when
        # the next run comes), and go when the last one is dropped.
        return _with_placeholders(planned, protected)
    problem = mount_namespace_problem()
    if not problem:
        report[layer] = (
            "active: read-only mounts in a mount namespace of the command's own"
            + ("" if root else " (in a user namespace)") + "; " + protected.describe())
        planned = dataclasses.replace(
            confinement, protected=protected, protected_mount_ns=True,
            new_userns=confinement.new_userns or not root)  # fmt: skip
        return _with_placeholders(planned, protected)
    if confinement.landlock_fs:
        read, write = landlock_paths(protected)
        ws = protected.workspace
        report[layer] = (
            f"active: Landlock rules around them (no mount namespace: {problem}); "
            f"{protected.describe()}; no entry can be made, removed or renamed in "
            f"{len([p for p in read if os.path.isdir(p)])} directories on the way, {ws} "
            "among them"
        )
        return dataclasses.replace(
            confinement,
            read_paths=(*confinement.read_paths, *read),
            write_paths=(*(p for p in confinement.write_paths if p != ws), *write),
        )
    why = f"no mount namespace ({problem}) and no Landlock"
    if mode == "required":
        raise ConfinementUnavailable(
            f"confinement='required' but protected paths cannot be enforced: {why}. Run "
            "`sandbox doctor` for details; use confinement='best-effort' to run without"
        )
    report[layer] = f"inactive: {why}"
    missing = report.get("missing")
    report["missing"] = (f"{missing}; " if missing else "") + f"{layer} ({why})"
    return confinement


def _with_placeholders(planned: Confinement, protected: ProtectedPaths) -> Confinement:
    """`planned`, its placeholders made: they live as long as it does (the run's, or a
    reserved run's whose zygote binds them ahead, so that they are there, the same,
    when the next run comes) and go when the last confinement holding them is dropped."""
    holder = Placeholders(protected)
    holder.hold()
    weakref.finalize(planned, holder.release)
    return planned


_probed: str | None = None
_probe_lock = threading.Lock()


def mount_namespace_problem() -> str:
    """'' if a command can have a mount namespace of its own here (in a user namespace
    when unprivileged) and bind a path read-only in it; else why not. Probed once per
    process, in a test child."""
    global _probed
    with _probe_lock:
        if _probed is None:
            _probed = _probe_mount_namespace()
        return _probed


def _probe_mount_namespace() -> str:
    import subprocess

    if os.environ.get("SANDBOX_CONFINEMENT_UNAVAILABLE", "") in ("all",) or "mount-ns" in (
            os.environ.get("SANDBOX_CONFINEMENT_UNAVAILABLE", "").split(",")):  # fmt: skip
        return "simulated: SANDBOX_CONFINEMENT_UNAVAILABLE names mount-ns"
    true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
    scratch = tempfile.mkdtemp(prefix="sandbox-mntprobe-")
    empty = ProtectedPaths(workspace=scratch, patterns=("x",), read_only=(scratch,))
    maps = (b"%d %d 1" % (os.geteuid(), os.geteuid()), b"%d %d 1" % (os.getegid(), os.getegid()))
    root = os.geteuid() == 0

    def child() -> None:
        if _libc.unshare(ctypes.c_int(0x00020000 | (0 if root else 0x10000000))) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        if not root:
            for path, data in (("/proc/self/setgroups", b"deny"),
                               ("/proc/self/uid_map", maps[0]), ("/proc/self/gid_map", maps[1])):
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
        apply_in_new_mount_namespace(empty, b"")

    try:
        done = subprocess.run([true], preexec_fn=child, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as e:
        return f"a test child could not make one: {e}" + (
            "" if root else " (an unprivileged agent needs user namespaces)")
    finally:
        os.rmdir(scratch)
    if done.returncode != 0:
        return f"a test child exited with status {done.returncode}"
    return ""


def describe_mechanism(*, private_proc: bool, landlock: bool) -> str:
    """For `sandbox doctor`: how protected paths are enforced on this machine."""
    if private_proc:
        return "available: read-only mounts in each command's own mount namespace"
    problem = mount_namespace_problem()
    if not problem:
        return ("available: read-only mounts in a mount namespace made for each command"
                + ("" if os.geteuid() == 0 else " (in a user namespace)"))
    if landlock:
        return (f"available: Landlock rules around them (no mount namespace: {problem}); "
                "no new entry can be made at the workspace root or in a git directory")
    return f"unavailable: no mount namespace ({problem}) and no Landlock"
