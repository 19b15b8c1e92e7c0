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

import ctypes
import dataclasses
import os
import stat
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.bash.config import (
    DEFAULT_PROTECTED_PATHS,
    DEFAULTS,
    resolve_patterns,
)
from sandbox.bash.linux.placeholders import _is_placeholder, _owner
from sandbox.bash.linux.syscalls import _libc

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULTS",
    "DEFAULT_PROTECTED_PATHS",
    "SCAN_LIMIT",
    "ProtectedPaths",
    "resolve_patterns",
    "scan",
    "scan_if_cached",
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
