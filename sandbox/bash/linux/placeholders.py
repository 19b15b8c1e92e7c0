"""Placeholders: a protected name that does not exist is made, for the run only, as an
empty directory (or, in a git directory, a file git reads as the name's absence) and
bound read-only; they are made under a per-workspace lock and removed when the last run
holding them ends (docs/protected-paths.md)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import shutil
import stat
import tempfile
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.bash.linux.protected import ProtectedPaths


_held: dict[str, int] = {}
_held_lock = threading.Lock()


class Placeholders:
    """The placeholders of one run (empty directories at absent protected names), made
    by `hold` before the command starts and removed by `release` after it ended,
    unless another run still needs them: of this process (counted), or of another
    agent on the same workspace (a shared lock, taken exclusively to remove)."""

    def __init__(self, protected: ProtectedPaths | None) -> None:
        self._protected = protected
        self._made: list[str] = []
        self._lock = -1
        self._pid = os.getpid()  # a forked child (its finalizers at exit) lets go of nothing

    def hold(self) -> None:
        """Make them. Raises OSError (the run fails closed) naming a path that could
        not be made, or that appeared meanwhile and is not one of ours."""
        protected = self._protected
        if protected is None or not (protected.placeholders or protected.placeholder_files):
            return
        self._lock = _workspace_lock(protected.workspace)
        fcntl.flock(self._lock, fcntl.LOCK_SH)
        wanted: list[tuple[str, bytes | None]] = [
            *((p, None) for p in protected.placeholders), *protected.placeholder_files]
        for path, content in wanted:
            with _held_lock:
                held = _held.get(path, 0)
                _held[path] = held + 1
                self._made.append(path)
                # Held by another confinement of ours already: there, and bound by it
                # (only the last holder removes it).
                problem = "" if held and os.path.lexists(path) else _make_placeholder(
                    path, protected.workspace, content)  # fmt: skip
            if problem:
                raise OSError(errno.EEXIST, problem)

    def release(self) -> None:
        """Let go of them; the last holder removes them, at once (about a millisecond
        each: removed only when no run and no reserved run of the workspace needs
        them, so once per run without reservations, and never between reserved ones)."""
        if self._lock < 0 or os.getpid() != self._pid:
            return
        lock, made = self._lock, list(self._made)
        self._lock = -1
        self._made.clear()
        fcntl.flock(lock, fcntl.LOCK_UN)
        assert self._protected is not None
        _let_go(made, self._protected.workspace, lock)


def _let_go(made: list[str], workspace: str, lock: int) -> None:
    try:
        for path in made:
            # Under the same lock as `hold`: a run of this process that holds the path
            # again meanwhile keeps it (an rmdir here would detach its mount).
            with _held_lock:
                _held[path] -= 1
                if _held[path] == 0:
                    del _held[path]
                    _remove_placeholder(path, workspace, lock)
    finally:
        os.close(lock)


def _workspace_lock(workspace: str) -> int:
    """The lock file of `workspace`'s placeholders, in a directory of this uid's own
    (/run/sandbox for root, else one in the temporary directory, made 0700 and checked
    to be ours: another user could otherwise plant the file, or a link there).

    Root of a user namespace (rootless Podman, `unshare --user --map-root-user`) is uid
    0 without owning /run: /run/sandbox there is the host root's, or cannot be made.
    So each place is tried in turn, and the first that is (or can be made) a private
    directory of ours is used; a place another user planted is passed over, not fatal
    (it would refuse every command)."""
    digest = hashlib.sha256(os.fsencode(workspace)).hexdigest()[:24]
    uid = os.geteuid()
    places = ["/run/sandbox"] if uid == 0 and os.path.isdir("/run") else []
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        places.append(os.path.join(runtime, "sandbox-protected"))
    places.append(os.path.join(tempfile.gettempdir(), f"sandbox-protected-{uid}"))
    home = os.environ.get("HOME", "")
    if home.startswith("/"):
        places.append(os.path.join(home, ".cache", "sandbox-protected"))
    # last: one of this process's own, made only when needed (other agents of this uid
    # on this workspace are then not kept in step; better than refusing every command)
    places.append("")
    refused = []
    for base in places:
        base = base or _private_lock_dir()
        with contextlib.suppress(OSError):
            os.mkdir(base, 0o700)
        try:
            st = os.lstat(base)
        except OSError as exc:
            refused.append(f"{base} ({exc.strerror})")
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
            refused.append(f"{base} (not a private directory of uid {uid})")
            continue
        path = os.path.join(base, f"protected-{digest}.lock")
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    raise OSError(errno.EPERM, "no private directory for the protected paths' lock: "
                  + "; ".join(refused) + ". Remove the one that is not yours, or set "
                  "XDG_RUNTIME_DIR to a directory of your own")


@functools.cache
def _private_lock_dir() -> str:
    path = tempfile.mkdtemp(prefix="sandbox-protected-")
    atexit.register(shutil.rmtree, path, True)
    return path


def _open_parent(path: str, workspace: str) -> int:
    """An O_PATH descriptor of `path`'s parent, reached from `workspace` one component
    at a time with no symbolic link followed."""
    rel = os.path.relpath(os.path.dirname(path), workspace)
    fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [] if rel == "." else rel.split("/"):
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)  # fmt: skip
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


# Placeholders are marked so that a later run (of any agent) knows them from a
# directory a user made: this mode, owned by the agent's uid.
_PLACEHOLDER_MODE = 0o1755
_FILE_PLACEHOLDER_MODE = 0o444


def _make_placeholder(path: str, workspace: str, content: bytes | None) -> str:
    try:
        parent = _open_parent(path, workspace)
    except OSError as e:
        return f"the parent of protected path {path} cannot be opened: {e.strerror}"
    try:
        name = os.path.basename(path)
        try:
            if content is None:
                os.mkdir(name, _PLACEHOLDER_MODE, dir_fd=parent)
            else:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, _FILE_PLACEHOLDER_MODE, dir_fd=parent)  # fmt: skip
                try:
                    os.write(fd, content)
                    os.fchmod(fd, _FILE_PLACEHOLDER_MODE)
                finally:
                    os.close(fd)
            if content is None:
                os.chmod(name, _PLACEHOLDER_MODE, dir_fd=parent, follow_symlinks=False)
            if os.geteuid() == 0:
                os.chown(name, *_owner(workspace), dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not _is_placeholder(st, workspace):
                return f"protected path {path} appeared while the run was set up; run again"
    except OSError as e:
        return f"protected path {path} cannot be held empty: {e.strerror}"
    finally:
        os.close(parent)
    return ""


def _owner(workspace: str) -> tuple[int, int]:
    """Who owns the placeholders: the workspace's owner (so that a directory held
    empty, .vscode say, stays usable on the host), or we when we cannot give them."""
    st = os.stat(workspace)
    return (st.st_uid, st.st_gid) if os.geteuid() == 0 else (os.geteuid(), os.getegid())


def _is_placeholder(st: os.stat_result, workspace: str, owner: int | None = None) -> bool:
    """Whether `st` is one of ours: the workspace owner's (`owner`, stat'ed here when
    None), of a mode a person rarely gives (a sticky directory with no subdirectory; a
    read-only file of at most 2 bytes)."""
    if st.st_uid != (_owner(workspace)[0] if owner is None else owner):
        return False
    if stat.S_ISDIR(st.st_mode):
        return stat.S_IMODE(st.st_mode) == _PLACEHOLDER_MODE and st.st_nlink == 2
    return (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == _FILE_PLACEHOLDER_MODE
            and st.st_nlink == 1 and st.st_size <= 2)  # fmt: skip


def _remove_placeholder(path: str, workspace: str, lock: int) -> None:
    """Remove an empty placeholder, unless a run of another process holds the lock."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another agent's run needs it; the last one out removes it
    try:
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if _is_placeholder(st, workspace):
                (os.rmdir if stat.S_ISDIR(st.st_mode) else os.unlink)(path)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
