"""Protected paths: control files inside a writable workspace that no command may change.

A writable workspace holds files that programs of the *host* later run or obey: a
repository's ``.git/config`` (``core.fsmonitor``, ``core.hooksPath``, filters), its
``hooks/``, ``info/attributes``; ``.envrc`` (direnv), shell start-up files, an editor's
``.vscode/`` or ``.idea/`` (tasks that run when the folder opens), ``.claude/`` and
``.mcp.json`` (an agent's own hooks and servers). A rule on redirection targets sees
none of ``cd .git && … >> config``, ``cp``, ``mv``, ``sed -i`` or ``python``; so the
kernel refuses instead, whatever program writes.

What is protected (`resolve_patterns`): the entries of a policy's ``protected_paths``
(default `DEFAULT_PROTECTED_PATHS`). ``"@default"`` stands for the default list (so
``("@default", "Makefile")`` extends it, and a list without it replaces it),
``"!name"`` takes one entry out of the list so far, ``()`` protects nothing. An entry is
a relative path matched at any depth (``.envrc`` is every ``.envrc`` of the workspace);
with a leading ``/`` it is anchored at the workspace root (``/Makefile``). Entries that
start with ``.git/`` apply to every git directory the workspace holds: each ``.git``
directory, the directory a ``.git`` *file* points to (``gitdir:``, worktrees and
submodules), and every bare repository (``vendor/lib.git``: ``HEAD``, ``objects/``,
``refs/``), whatever its name. Git's other control files there (``config.worktree``,
``commondir``, ``gitdir``) and a ``.git`` pointer file itself are always protected with
them.

How (`scan`, then `apply_mounts` in the command's own mount namespace), before each run,
by a bounded walk of the workspace (`SCAN_LIMIT` directories):

- every existing protected path is bound onto itself read-only (writes fail with EROFS;
  ``rm``/``mv`` of it fail with EBUSY: a mount point cannot be unlinked or renamed);
- every directory on the way from the workspace root to one (``.git``, ``vendor``) is
  bound onto itself read-write: still writable, but a mount point, so ``mv .git .git2``
  and then a new ``.git`` fails (EBUSY), and a hard link across it fails (EXDEV);
- a protected name that does not exist (``.envrc`` absent, ``.git/hooks`` missing) is
  made, for the run only, as an empty directory and bound read-only: creating a file,
  directory or symbolic link of that name fails. An empty directory is invisible to
  ``git status`` and runs nothing. Where they are made: for root-level names (``.envrc``,
  ``.gitattributes``, ...), at the workspace root and at the top of every repository
  found; for ``.git/…`` names, in every git directory found. Past those, a new name at
  depth (``mkdir d && git init d``) is the command's own new file (see SECURITY.md);
- a protected name that is a symbolic link is covered by an empty read-only file (the
  link cannot be re-pointed), and its target too when that lies in the workspace;
- a protected file with more than one hard link is refused (a write through the other
  link would change it): the run fails closed, naming it.

Where the command has no mount namespace of its own (an unprivileged agent today),
`landlock_paths` builds Landlock rules around the protected paths instead: the
directories on the way to one get read rights only, and everything else in them full
rights, so protected paths (and any new name in those directories) cannot be written,
made, removed or renamed (EACCES).

A walk past `SCAN_LIMIT` directories fails closed: the run is refused, naming the fix
(anchor the entries at the root, which needs no walk, or raise the limit with
``SANDBOX_PROTECTED_SCAN_LIMIT``). The walk keeps, per directory, what it found, and
watches each directory with inotify: a later scan lists again only directories that
changed (an entry made, removed or renamed), and when none did, reuses the walk's
findings whole. Without inotify (or past a quarter of the user's watches), a
directory's inode and modification time decide, and one modified in the last two
seconds is always listed again (its timestamp may not have ticked yet).

Codex (codex-rs/linux-sandbox, ``bwrap.rs``) binds ``.git`` and ``.codex`` of each
writable root read-only, covers a missing one's first absent component with
``/dev/null`` (bubblewrap creates the mount point on the host) and a symlinked one on the
link itself; this module does the same at every depth, for a longer list, and pins the
directories on the way (which Codex does not: there ``mv .codex x && mkdir .codex``
is a rename of an unpinned parent's child).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import functools
import hashlib
import os
import shutil
import stat
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.bash.config import (
    DEFAULT_PROTECTED_PATHS,
    DEFAULTS,
    ConfinementRequest,
    ConfinementUnavailable,
    resolve_patterns,
)
from sandbox.errors import ConfigurationError

if TYPE_CHECKING:
    from sandbox.bash.linux.confinement import Confinement

__all__ = [
    "DEFAULTS",
    "DEFAULT_PROTECTED_PATHS",
    "SCAN_LIMIT",
    "Placeholders",
    "ProtectedPaths",
    "apply_in_new_mount_namespace",
    "apply_mounts",
    "attach",
    "describe_mechanism",
    "landlock_paths",
    "mount_namespace_problem",
    "plan_layer",
    "resolve_patterns",
    "scan",
    "scan_if_cached",
    "still_protected",
]

# Control files of a git directory that name other files or programs: always protected
# along with any ".git/..." entry.
_GIT_DIR_ALWAYS = ("config.worktree", "commondir")
# Absent files of a git directory are held by a file git reads as if it were absent
# (a directory there would make git fail): an empty configuration, and a commondir
# naming the git directory itself (``commondir`` pointing elsewhere would make git read
# that directory's config).
_GIT_FILE_PLACEHOLDERS = {"config": b"", "config.worktree": b"", "commondir": b".\n"}
# Inside a git directory, subtrees that hold no configuration git reads: not walked.
_GIT_DIR_SKIP = frozenset({"objects", "refs", "logs", "lfs", "rr-cache", "packed-refs"})
SCAN_LIMIT = int(os.environ.get("SANDBOX_PROTECTED_SCAN_LIMIT", "50000"))
_GITFILE_MAX = 4096
_RACY_SECONDS = 2.0


# --------------------------------------------------------------------------- the scan


@dataclass(frozen=True)
class ProtectedPaths:
    """What one run protects, found by `scan` (plain, hashable data: part of what a
    zygote was prepared for, so that a change found at the run's own scan is never
    served by a zygote prepared from an older one).

    read_only: existing paths, bound read-only. links: protected names that are
    symbolic links, covered by an empty read-only file. placeholders: missing names,
    made for the run as empty directories, bound read-only; placeholder_files: missing
    files of a git directory, made for the run with the content git reads as their
    absence, bound read-only. pinned: the directories on
    the way to any of these, bound read-write (mount points cannot be renamed).
    problem: why protection cannot be enforced ('' if it can): the run fails closed.
    """

    workspace: str
    patterns: tuple[str, ...]
    read_only: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()
    placeholder_files: tuple[tuple[str, bytes], ...] = ()
    pinned: tuple[str, ...] = ()
    problem: str = ""
    directories: int = dataclasses.field(default=0, compare=False)  # walked, for reports

    def describe(self) -> str:
        held = len(self.placeholders) + len(self.placeholder_files)
        count = len(self.read_only) + len(self.links) + held
        return (f"{count} paths read-only ({len(self.read_only)} existing, "
                f"{held} absent and held empty, {len(self.links)} "
                f"symbolic links covered) of: {', '.join(self.patterns)}")  # fmt: skip


class _Dir:
    __slots__ = ("names", "stamp", "subdirs")

    def __init__(self, stamp: tuple[int, int, int], subdirs: list[str],
                 names: frozenset[str]) -> None:  # fmt: skip
        self.stamp = stamp
        self.subdirs = subdirs
        self.names = names


_cache: dict[str, _Dir] = {}
_cache_lock = threading.Lock()


_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW = 0x1000000, 0x2000000
_WATCH_MASK = (_IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF
               | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW)  # fmt: skip
_WATCHED_WORKSPACES = 4


class _Watch:
    """Which directories of one workspace changed (an entry made, removed or renamed)
    since they were listed, from inotify: one with no event is neither listed nor even
    stat'ed again, so a scan of an unchanged tree of any size costs a walk of the cache.
    The watch is added before the listing, so an entry made meanwhile is an event. A
    queue overflow, or watches past `limit` (they are the user's too: an editor needs
    its own), leave those directories to the modification-time check."""

    def __init__(self, limit: int) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.paths: dict[int, str] = {}
        self.watched: dict[str, int] = {}
        self.clean: set[str] = set()
        self.limit = limit

    def drain(self) -> None:
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                self.close()
                return
            offset = 0
            while offset + 16 <= len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                offset += 16 + length
                if mask & _IN_Q_OVERFLOW:
                    self.clean.clear()
                    continue
                path = self.paths.get(wd)
                if path is None:
                    continue
                self.clean.discard(path)
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED):
                    self.paths.pop(wd, None)
                    if self.watched.get(path) == wd:
                        del self.watched[path]

    def watch(self, path: str) -> bool:
        if self.fd < 0 or (path not in self.watched and len(self.watched) >= self.limit):
            return False
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), ctypes.c_uint32(_WATCH_MASK))
        if wd < 0:
            return False
        old = self.paths.get(wd)
        if old is not None and old != path:  # the same directory, renamed
            self.watched.pop(old, None)
            self.clean.discard(old)
        self.paths[wd] = path
        self.watched[path] = wd
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.clean.clear()


_watches: dict[str, _Watch] = {}


def _watch_of(workspace: str) -> _Watch:
    watch = _watches.pop(workspace, None)
    if watch is None:
        watch = _Watch(min(SCAN_LIMIT, _max_user_watches() // 4))
    _watches[workspace] = watch  # most recently used last
    while len(_watches) > _WATCHED_WORKSPACES:
        _watches.pop(next(iter(_watches))).close()
    return watch


def _max_user_watches() -> int:
    try:
        with open("/proc/sys/fs/inotify/max_user_watches") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 8192


class _Unlistable(Exception):
    """A directory that cannot be listed, but could be written by the command."""


def _listing(path: str, now: float, watch: _Watch | None = None) -> _Dir | None:
    """The subdirectories and names of `path`, from the cache when it has not changed
    (no inotify event since it was listed, or else the same modification time).
    None when it is gone; raises _Unlistable when what is in it cannot be known (a
    path too long, a directory of ours we may not read: a command could chmod it)."""
    if watch is not None and path in watch.clean:
        kept = _cache.get(path)
        if kept is not None:
            return kept
    watched = watch is not None and watch.watch(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _Unlistable(f"{path}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        return None
    stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
    kept = _cache.get(path)  # a dict read is atomic; writes take the lock
    if kept is not None and kept.stamp == stamp:
        if watched and watch is not None:
            watch.clean.add(path)
        return kept
    subdirs: list[str] = []
    names: list[str] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                names.append(entry.name)
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                except OSError:
                    continue
    except FileNotFoundError:
        return None
    except PermissionError:
        if st.st_uid != os.geteuid():
            return None  # not ours: a command (our uid) cannot open it up either
        raise _Unlistable(f"{path}: permission denied") from None
    except OSError as e:
        raise _Unlistable(f"{path}: {e.strerror}") from None
    listing = _Dir(stamp, subdirs, frozenset(names))
    if watched or now - st.st_mtime_ns / 1e9 > _RACY_SECONDS:
        with _cache_lock:
            if len(_cache) > 4 * SCAN_LIMIT:
                _cache.clear()
            _cache[path] = listing
        if watched and watch is not None:
            watch.clean.add(path)
    return listing


def _is_bare_repository(path: str, names: frozenset[str]) -> bool:
    """A git directory by its contents (what git itself checks): HEAD, and objects/
    with refs/, or a commondir file (a worktree's or submodule's git directory)."""
    if "HEAD" not in names or not ({"objects", "refs"} <= names or "commondir" in names):
        return False
    return os.path.isfile(os.path.join(path, "HEAD"))


def _gitfile_target(path: str, workspace: str) -> str | None:
    """The git directory a ``.git`` file points to, if it lies in the workspace."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = os.read(fd, _GITFILE_MAX)
    except OSError:
        return None
    finally:
        os.close(fd)
    line = data.split(b"\n", 1)[0].strip()
    if not line.startswith(b"gitdir:"):
        return None
    target = os.fsdecode(line[len(b"gitdir:"):].strip())
    target = os.path.realpath(os.path.join(os.path.dirname(path), target))
    return target if _inside(target, workspace) else None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def scan(workspace: str, patterns: tuple[str, ...], *, limit: int | None = None) -> ProtectedPaths:
    """Find, under `workspace` (an absolute, resolved path), what `patterns` protect.

    Walks at most `limit` directories (default `SCAN_LIMIT`), symbolic links not
    followed; past the limit the result carries a `problem` (the run is refused)
    unless every pattern is anchored at the root, which needs no walk."""
    limit = SCAN_LIMIT if limit is None else limit
    if not patterns:
        return ProtectedPaths(workspace=workspace, patterns=patterns)
    now = time.time()
    with _cache_lock:
        watch = _watch_of(workspace)
    with _scan_lock:
        watch.drain()
        return _timed_scan(workspace, patterns, limit, now, watch)


# A scan whose walk is cached whole (no directory of it changed since, by inotify) only
# examines what that walk found: it runs on the caller's event loop, which saves the
# hop to a worker thread and back (~0.5-1 ms of a `true` of ~5 ms), when the walk holds
# at most this many directories and the last scan of the workspace took at most this
# long (the examination reads git configurations and lists protected directories:
# bounded, but not by the walk).
_LOOP_SCAN_DIRECTORIES = 1024
_LOOP_SCAN_SECONDS = 0.002
_scan_seconds: dict[tuple[str, tuple[str, ...], int], float] = {}
_walk_seconds = [0.0]  # of the last scan's walk (under _scan_lock)


def scan_if_cached(workspace: str, patterns: tuple[str, ...]) -> ProtectedPaths | None:
    """`scan(workspace, patterns)` if it needs no walk (see above) and is cheap, else
    None (then call `scan`, in a worker thread). Never blocks: None also when another
    thread is scanning. The result is the one `scan` returns: the same examination of
    every protected path, from the same cached walk, which any entry made, removed or
    renamed in a walked directory invalidates."""
    if not patterns:
        return ProtectedPaths(workspace=workspace, patterns=patterns)
    key = (workspace, patterns, SCAN_LIMIT)
    kept = _walks.get(key)
    if (kept is None or kept.directories > _LOOP_SCAN_DIRECTORIES
            or _scan_seconds.get(key, 1.0) > _LOOP_SCAN_SECONDS):  # fmt: skip
        return None
    watch = _watches.get(workspace)
    if watch is None or not _scan_lock.acquire(blocking=False):
        return None
    try:
        watch.drain()
        if kept is not _walks.get(key) or not kept.walked <= watch.clean:
            return None  # a directory changed: a walk, in a thread
        return _timed_scan(workspace, patterns, SCAN_LIMIT, time.time(), watch)
    finally:
        _scan_lock.release()


def _timed_scan(workspace: str, patterns: tuple[str, ...], limit: int, now: float,
                watch: _Watch) -> ProtectedPaths:  # fmt: skip
    """Under _scan_lock, the inotify queue drained."""
    anchored = [p[1:] for p in patterns if p.startswith("/")]
    floating = [p for p in patterns if not p.startswith("/")]
    git_entries = sorted({p.split("/", 1)[1] for p in floating if p.startswith(".git/")} | (
        set(_GIT_DIR_ALWAYS) if any(p.startswith(".git/") for p in floating) else set()))
    tops = [p for p in floating if not p.startswith(".git/")]  # matched in every directory
    firsts: dict[str, list[str]] = {}
    for pattern in tops:
        firsts.setdefault(pattern.split("/", 1)[0], []).append(pattern)
    protect_git = bool(git_entries)
    started = time.perf_counter()
    _walk_seconds[0] = 0.0
    found = _scan(workspace, patterns, limit, anchored, floating, git_entries, tops,
                  firsts, protect_git, now, watch)  # fmt: skip
    key = (workspace, patterns, limit)
    _scan_seconds.pop(key, None)
    # What a scan without a walk costs: the examination alone.
    _scan_seconds[key] = time.perf_counter() - started - _walk_seconds[0]
    while len(_scan_seconds) > 4 * _WATCHED_WORKSPACES:
        _scan_seconds.pop(next(iter(_scan_seconds)))
    return found


_scan_lock = threading.Lock()


@dataclass(frozen=True)
class _Walked:
    walked: frozenset[str]
    targets: frozenset[str]
    git_dirs: frozenset[str]
    repo_roots: frozenset[str]
    gitfiles: frozenset[str]
    directories: int


_walks: dict[tuple[str, tuple[str, ...], int], _Walked] = {}


def _walk(workspace: str, limit: int, anchored: list[str], floating: list[str],
          firsts: dict[str, list[str]], first_names: frozenset[str], protect_git: bool,
          now: float, watch: _Watch
          ) -> tuple[set[str], set[str], set[str], set[str], int, str, list[str]]:  # fmt: skip
    walked: list[str] = []
    targets: set[str] = set()  # protected, existing or not
    git_dirs: set[str] = set()
    repo_roots: set[str] = {workspace}
    gitfiles: set[str] = set()
    directories = 0
    problem = ""

    for rel in anchored:
        targets.add(os.path.join(workspace, rel))
        if rel == ".git" or rel.startswith(".git/"):
            protect_git = True

    walk = bool(floating)
    stack = [workspace] if walk else []
    while stack:
        top = stack.pop()
        walked.append(top)
        directories += 1
        if directories > limit:
            problem = (
                f"the workspace holds more than {limit} directories: protected paths at any "
                "depth cannot be found within the bound, so none is promised. Anchor "
                "protected_paths at the workspace root (e.g. ['/.git/config', '/.git/hooks', "
                "'/.envrc']), which needs no walk, or raise SANDBOX_PROTECTED_SCAN_LIMIT"
            )
            break
        try:
            listing = _listing(top, now, watch)
        except _Unlistable as e:
            problem = (f"a directory of the workspace cannot be examined ({e}), so a "
                       "protected path in it could not be protected: make it readable "
                       "or remove it")  # fmt: skip
            break
        if listing is None:
            continue
        names = listing.names
        in_git_dir = top in git_dirs
        if not in_git_dir and _is_bare_repository(top, names):  # the root itself too
            git_dirs.add(top)
            in_git_dir = True
        if ".git" in names and protect_git:
            dot_git = os.path.join(top, ".git")
            try:
                st = os.lstat(dot_git)
            except OSError:
                st = None
            if st is not None:
                repo_roots.add(top)
                if stat.S_ISDIR(st.st_mode):
                    git_dirs.add(dot_git)
                else:
                    gitfiles.add(dot_git)
                    target = _gitfile_target(dot_git, workspace)
                    if target is not None and os.path.isdir(target):
                        git_dirs.add(target)
        if not in_git_dir:
            for first in first_names & names:
                for pattern in firsts[first]:
                    targets.add(os.path.join(top, pattern))
        for name in listing.subdirs:
            if in_git_dir and name in _GIT_DIR_SKIP:
                continue
            stack.append(os.path.join(top, name))

    return targets, git_dirs, repo_roots, gitfiles, directories, problem, walked


def _scan(workspace: str, patterns: tuple[str, ...], limit: int, anchored: list[str],
          floating: list[str], git_entries: list[str], tops: list[str],
          firsts: dict[str, list[str]], protect_git: bool, now: float, watch: _Watch
          ) -> ProtectedPaths:  # fmt: skip
    first_names = frozenset(firsts)

    key = (workspace, patterns, limit)
    kept = _walks.get(key)
    if kept is not None and kept.walked <= watch.clean:
        # Not a directory of the last walk changed since (inotify): its findings stand.
        # What they lead to (configs, links, placeholders) is examined again below.
        targets, git_dirs = set(kept.targets), set(kept.git_dirs)
        repo_roots, gitfiles = set(kept.repo_roots), set(kept.gitfiles)
        directories, problem = kept.directories, ""
    else:
        walk_started = time.perf_counter()
        targets, git_dirs, repo_roots, gitfiles, directories, problem, walked = _walk(
            workspace, limit, anchored, floating, firsts, first_names, protect_git, now,
            watch)  # fmt: skip
        _walk_seconds[0] = time.perf_counter() - walk_started
        if not problem:
            _walks.pop(key, None)
            _walks[key] = _Walked(frozenset(walked), frozenset(targets), frozenset(git_dirs),
                                  frozenset(repo_roots), frozenset(gitfiles), directories)
            while len(_walks) > _WATCHED_WORKSPACES:
                _walks.pop(next(iter(_walks)))
    if any(rel == ".git" or rel.startswith(".git/") for rel in anchored):
        protect_git = True

    if problem:
        return ProtectedPaths(workspace=workspace, patterns=patterns, problem=problem,
                              directories=directories)  # fmt: skip

    # Missing names: held empty at the root and at the top of every repository.
    for root in repo_roots:
        for pattern in tops:
            targets.add(os.path.join(root, pattern))
    for git_dir in git_dirs:
        for entry in git_entries:
            targets.add(os.path.join(git_dir, entry))
    if protect_git:
        for gitfile in gitfiles:
            targets.add(gitfile)
        if workspace not in {os.path.dirname(g) for g in git_dirs | gitfiles}:
            # No repository at the root: none may be made there (the host's git would
            # take it for the workspace's, above any repository it lies in).
            for entry in git_entries:
                targets.add(os.path.join(workspace, ".git", entry))

    # What a protected configuration names inside the workspace is as good as it:
    # core.hooksPath (husky's .husky/), include.path, includeIf.*.path.
    for git_dir in sorted(git_dirs):
        worktree = os.path.dirname(git_dir) if os.path.basename(git_dir) == ".git" else git_dir
        targets.update(_named_by_config(os.path.join(git_dir, "config"), worktree, workspace))

    read_only: set[str] = set()
    links: set[str] = set()
    placeholders: set[str] = set()
    files: dict[str, bytes] = {}
    try:
        owner: int | None = _owner(workspace)[0]
    except OSError:
        owner = None  # each placeholder check stats it again (and says why it fails)
    for target in sorted(targets):
        if not _inside(target, workspace) or target == workspace:
            continue
        found = _classify(target, workspace, owner)
        if isinstance(found, str):
            problem = found
            break
        kind, path = found
        content = _GIT_FILE_PLACEHOLDERS.get(os.path.basename(path))
        if kind == "absent" and content is not None and os.path.dirname(path) in git_dirs:
            files[path] = content
            placeholders.add(path)
        elif kind == "absent":
            placeholders.add(path)
        elif kind == "link":
            links.add(path)
            resolved = os.path.realpath(path)
            if _inside(resolved, workspace) and resolved != workspace and os.path.exists(
                    resolved):  # fmt: skip
                read_only.add(resolved)
        elif kind == "exists":
            read_only.add(path)
        # "inside": under a placeholder or a link already covered
    # A path under another protected one is covered by it.
    keep: set[str] = set()
    for path in sorted(read_only | links | placeholders):
        parent = os.path.dirname(path)
        while _inside(parent, workspace) and parent != workspace and parent not in keep:
            parent = os.path.dirname(parent)
        if parent in keep:
            continue
        keep.add(path)
    if not problem:
        problem = _hard_links(sorted(p for p in read_only if p in keep))
    # A symbolic link inside a protected directory (.git/hooks/pre-commit ->
    # ../../scripts/pre-commit) makes its target in the workspace protected too.
    for target in _link_targets(sorted(read_only & keep), workspace):
        if not any(_inside(target, k) for k in keep) and os.path.lexists(target):
            keep.add(target)
            read_only.add(target)
    pinned: set[str] = set()
    for path in keep:
        parent = os.path.dirname(path)
        while _inside(parent, workspace) and parent != workspace:
            pinned.add(parent)
            parent = os.path.dirname(parent)
    return ProtectedPaths(
        workspace=workspace, patterns=patterns,
        read_only=tuple(sorted(read_only & keep)), links=tuple(sorted(links & keep)),
        placeholders=tuple(sorted((placeholders & keep) - set(files))),
        placeholder_files=tuple(sorted((p, c) for p, c in files.items() if p in keep)),
        pinned=tuple(sorted(pinned - keep, key=lambda p: (p.count("/"), p))),
        problem=problem, directories=directories,
    )  # fmt: skip


def _classify(target: str, workspace: str, owner: int | None = None
              ) -> tuple[str, str] | str:  # fmt: skip
    """("exists" | "link" | "absent", path), or why the path cannot be protected. An
    absent path's first missing component is what is held (``.git/hooks`` when ``.git``
    is absent: ``.git``); a symbolic link on the way is covered itself. `target` lies
    inside `workspace` (both normalised); `owner`: the workspace owner's uid, if known."""
    # What os.path.relpath would say, without its normalisations (~10 µs a path).
    rel = target[len(workspace.rstrip("/")) + 1:].split("/")
    current = workspace
    for i, part in enumerate(rel):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return "absent", current
        except OSError as e:
            return f"protected path {current} cannot be examined: {e.strerror}"
        if _is_placeholder(st, workspace, owner):
            return "absent", current  # held by a run (or a reserved one) of ours
        if stat.S_ISLNK(st.st_mode):
            return "link", current
        last = i == len(rel) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            return "exists", current  # a file where a directory was expected: keep it
    return "exists", current


_CONFIG_MAX = 1 << 20
_PATH_KEYS = ("core.hookspath", "include.path")


def _named_by_config(config: str, worktree: str, workspace: str, depth: int = 0
                     ) -> set[str]:  # fmt: skip
    """Paths inside `workspace` that git configuration file `config` names as hooks or
    as more configuration (followed up to three includes deep)."""
    found: set[str] = set()
    try:
        fd = os.open(config, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return found
    try:
        text = os.read(fd, _CONFIG_MAX).decode("utf-8", "replace")
    except OSError:
        return found
    finally:
        os.close(fd)
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and "]" in line:
            section = line[1:line.index("]")].split()[0].split(".")[0].lower() if (
                line[1:line.index("]")].split()) else ""  # fmt: skip
            line = line[line.index("]") + 1:].strip()
            if not line:
                continue
        if "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        value = value.split(" #")[0].split(" ;")[0].strip().strip('"')
        name = f"{section}.{key.lower()}"
        if name not in _PATH_KEYS and not (section == "includeif" and key.lower() == "path"):
            continue
        if not value or value.startswith("~"):
            continue
        base = worktree if name == "core.hookspath" else os.path.dirname(config)
        path = os.path.normpath(os.path.join(base, value))
        if _inside(path, workspace) and path != workspace:
            found.add(path)
            if name != "core.hookspath" and depth < 3:
                found |= _named_by_config(path, worktree, workspace, depth + 1)
    return found


def _link_targets(paths: list[str], workspace: str) -> set[str]:
    found: set[str] = set()
    for path in paths:
        for file in _files_under(path):
            if os.path.islink(file):
                target = os.path.realpath(file)
                if _inside(target, workspace) and target != workspace:
                    found.add(target)
    return found


def _hard_links(paths: list[str]) -> str:
    """Why a protected file (or one in a protected directory) cannot be protected: it
    has another hard link, through which it could be written."""
    seen = 0
    for path in paths:
        for file in _files_under(path):
            seen += 1
            if seen > 10000:
                return (f"protected directory {path} holds more than 10000 files; a hard "
                        "link among them cannot be ruled out")  # fmt: skip
            try:
                st = os.lstat(file)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                return (
                    f"protected file {file} has {st.st_nlink} hard links: a write through "
                    "another one would change it. Replace it by a copy (cp --remove-"
                    f"destination \"{file}\" x && mv x \"{file}\") or remove the other links"
                )
    return ""


def _files_under(path: str) -> Iterator[str]:
    yield path
    if os.path.isdir(path) and not os.path.islink(path):
        for top, dirs, files in os.walk(path):
            for name in files:
                yield os.path.join(top, name)
            for name in dirs:
                yield os.path.join(top, name)


# --------------------------------------------------------------------------- placeholders

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


# --------------------------------------------------------------------------- in the child

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
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


async def attach(request: ConfinementRequest, workspace: str) -> ConfinementRequest:
    """`request` with the scan of `workspace` for its protected_paths: here when its
    walk is cached and small (`scan_if_cached`), else in a worker thread (a large
    workspace must not hold up the caller's event loop)."""
    if request.mode == "none" or request.filesystem != "read-write" or (
            not request.protected_paths):  # fmt: skip
        return request
    found = scan_if_cached(workspace, request.protected_paths)
    if found is None:
        import anyio.to_thread

        found = await anyio.to_thread.run_sync(scan, workspace, request.protected_paths)
    return dataclasses.replace(request, protected=found)
