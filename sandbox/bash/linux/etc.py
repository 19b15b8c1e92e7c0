"""What of /etc a confined command may read: the Landlock rules for its world-readable
files (`_etc_rules`), and, where the command has a mount namespace of its own, empty
placeholders over every entry that is not world-readable (`_EtcSecrets`), so that /etc
can be granted whole."""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import mmap
import os
import stat
import struct

from sandbox.bash.linux.syscalls import _libc

ETC = "/etc"
_ETC_MAX_RULES = 2000




def _etc_rules() -> tuple[str, ...]:
    """The parts of /etc whose whole content every user may read (cached).

    A root command without capabilities still owns root's files: /etc/shadow (0640)
    would be readable by its owner. Landlock grants rights to whole hierarchies, so /etc
    is granted piece by piece: a world-readable file, or a directory whose every file
    and subdirectory is world-readable; otherwise that directory's entries, recursively.
    """
    global _etc_cache
    if _etc_cache is None:
        rules: list[str] = [ETC + "/"]
        _world_readable_parts(ETC, rules, depth=0)
        _etc_cache = tuple(rules[:_ETC_MAX_RULES])
    return _etc_cache


_etc_cache: tuple[str, ...] | None = None


def _world_readable(st: os.stat_result) -> bool:
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
    return st.st_mode & need == need


def _subtree_world_readable(path: str) -> bool:
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.stat(os.path.join(top, name))
            except OSError:
                continue
            if not _world_readable(st):
                return False
    return True


def _world_readable_parts(path: str, rules: list[str], depth: int) -> None:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return
    for name in names:
        full = os.path.join(path, name)
        try:
            st = os.stat(full)
        except OSError:
            continue
        if not _world_readable(st):
            continue
        if not stat.S_ISDIR(st.st_mode) or _subtree_world_readable(full):
            rules.append(full)
        elif depth < 4:
            rules.append(full + "/")  # the directory itself: list it, read nothing below
            _world_readable_parts(full, rules, depth + 1)


class _EtcSecrets:
    """The entries of /etc that are not world-readable, kept current with inotify.

    A root command without capabilities still owns root's files, so /etc/shadow (0640)
    would be readable by it. In the command's own mount namespace each such entry is
    covered by an empty placeholder (mode 000, owned by nobody, on a read-only bind
    mount: not even its owner can change it). The list is scanned once and again
    whenever inotify reports a change under /etc (an entry created, removed, renamed or
    chmod'ed); if inotify is unavailable, on every use.
    """

    _MASK = 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800  # attrib, moves, create..
    _MAX = 4096

    def __init__(self) -> None:
        self._entries: list[tuple[bytes, bool]] | None = None
        self.generation = 0  # bumped by every scan
        # The same, in memory shared with the children forked from here (a zygote
        # compares it with the generation it was prepared with).
        self._shared = mmap.mmap(-1, 8)
        self._inotify = -1
        self.placeholders: tuple[bytes, bytes, bytes] | None = None  # root, file, dir

    def entries(self) -> list[tuple[bytes, bool]]:
        """(path, is_directory) of every entry to cover."""
        if self._entries is not None and not self._changed():
            return self._entries
        if self._inotify >= 0:
            os.close(self._inotify)
        self._inotify = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        found: list[tuple[bytes, bool]] = []
        stack = [ETC]
        while stack:
            top = stack.pop()
            # The watch before the listing: an entry made in between is an event.
            if self._inotify >= 0 and _libc.inotify_add_watch(
                    self._inotify, os.fsencode(top), self._MASK) < 0:  # fmt: skip
                os.close(self._inotify)  # out of watches: scan on every use
                self._inotify = -1
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for name in names:
                full = os.path.join(top, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    continue  # its target is checked where it lies
                if not _world_readable(st):
                    found.append((os.fsencode(full), stat.S_ISDIR(st.st_mode)))
                elif stat.S_ISDIR(st.st_mode):
                    stack.append(full)
        if len(found) > self._MAX:
            raise OSError(errno.E2BIG, f"{len(found)} entries of /etc are not world-readable "
                          f"(more than {self._MAX} to cover)")  # fmt: skip
        self._entries = found
        self.generation += 1
        self._shared[:8] = struct.pack("=Q", self.generation)
        return found

    @property
    def watch_fd(self) -> int:
        """The inotify descriptor (-1 without one)."""
        return self._inotify

    def stale_since(self, generation: int) -> bool:
        """In a forked child: whether /etc changed since `generation` was current in
        the process it was forked from (events queued, or a later scan there). Reads
        nothing off the queue."""
        if self._inotify < 0:
            return True
        # The queue first, then the generation: the forking process bumps the
        # generation before it empties the queue, so one of the two shows a change.
        pending = array.array("i", [0])
        fcntl.ioctl(self._inotify, _FIONREAD, pending, True)
        if pending[0] > 0:
            return True
        current: int = struct.unpack("=Q", self._shared[:8])[0]
        return current != generation

    def _changed(self) -> bool:
        if self._inotify < 0:
            return True
        pending = array.array("i", [0])
        fcntl.ioctl(self._inotify, _FIONREAD, pending, True)
        if pending[0] <= 0:
            return False
        # Mark every zygote prepared from the old list stale *before* emptying the
        # queue: a zygote checks the queue, then the generation, and between the two
        # (or during the rescan) it must not see an empty queue and an old generation.
        self.generation += 1
        self._shared[:8] = struct.pack("=Q", self.generation)
        changed = False
        while True:
            try:
                if not os.read(self._inotify, 65536):
                    return changed
            except BlockingIOError:
                return changed
            changed = True

    def placeholder_paths(self) -> tuple[bytes, bytes, bytes]:
        """An empty file and an empty directory, mode 000, owned by nobody (made once
        per process, removed at its exit)."""
        if self.placeholders is None or not os.path.isdir(self.placeholders[0]):
            import atexit
            import shutil
            import tempfile

            _remove_stale_placeholders(tempfile.gettempdir())
            root = tempfile.mkdtemp(prefix=f"sandbox-hidden-{os.getpid()}-")
            os.chmod(root, 0o755)
            file, directory = os.path.join(root, "file"), os.path.join(root, "dir")
            os.close(os.open(file, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0))
            os.mkdir(directory, 0)
            for path in (file, directory):
                os.chmod(path, 0)
                if os.geteuid() == 0:
                    # Not in a user namespace that does not map nobody (a rootless
                    # container): then ours, which the read-only mount keeps at 000.
                    with contextlib.suppress(OSError):
                        os.chown(path, 65534, 65534)
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            self.placeholders = (os.fsencode(root), os.fsencode(file), os.fsencode(directory))
        return self.placeholders


def _remove_stale_placeholders(tmp: str) -> None:
    """Placeholder directories of spawners that are gone (removed at exit, but not
    after a SIGKILL): named after their pid."""
    import shutil

    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 4 or parts[:2] != ["sandbox", "hidden"] or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or another process now has its pid: left alone)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


_etc_secrets = _EtcSecrets()
_FIONREAD = 0x541B
