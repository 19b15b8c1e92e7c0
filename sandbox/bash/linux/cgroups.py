"""Per-run cgroup directories: where they go, how they are created, emptied and removed.

A run's cgroup is a directory `sandbox-<owner pid>-<n>` that this process creates under
its own cgroup in one hierarchy (the v2 hierarchy, or a v1 controller's), writes the
command's shell into, and removes when the run is over. Nothing else in the system is
touched: no controller is enabled, no other cgroup is written.

Directories can outlive a run: a process stuck in uninterruptible sleep keeps its cgroup
populated, and an owner can crash. The first are retried later and at interpreter exit
(`remove_leftovers`); the second are found by name and removed when a later owner scans
the same parent (`remove_stale`), after killing whatever is still in them — processes
that a sandbox put there, never anything else.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "CgroupBase",
    "RunCgroup",
    "drain_pool",
    "locate",
    "remove_leftovers",
    "remove_stale",
]

PREFIX = "sandbox-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-[0-9a-z]+$")
_counter = itertools.count()
# Emptied run cgroups kept for the next run of this process, per base directory: making
# one costs ~0.1-0.2 ms (and removing it more), on every command's critical path.
_pool: dict[Path, list[RunCgroup]] = {}
_POOL_SIZE = 4
_leftovers: set[RunCgroup] = set()
_ours: set[Path] = set()  # every directory this process created and has not removed
_leftovers_lock = threading.Lock()


def _forget_the_parents() -> None:
    """In a child forked from this process: the pooled and leftover cgroups are the
    parent's (a pooled one taken here would be shared with a run of the parent, and a
    kill of either tree would kill both); the child makes its own."""
    global _leftovers_lock
    _pool.clear()
    _leftovers.clear()
    _ours.clear()
    _leftovers_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_the_parents)


@dataclass(frozen=True)
class CgroupBase:
    """The directory in one hierarchy under which this process creates run cgroups."""

    path: Path
    version: Literal[1, 2]
    controller: str  # "" for v2, else the v1 controller ("pids", "freezer")

    @property
    def label(self) -> str:
        return "cgroup v2" if self.version == 2 else f"cgroup v1 {self.controller}"


def _unescape_mount_field(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def locate(controller: str = "") -> tuple[CgroupBase | None, str]:
    """Where run cgroups would go for `controller` ("" = the v2 hierarchy).

    Returns the base, or None and the reason it cannot be used.
    """
    version: Literal[1, 2] = 2 if controller == "" else 1
    own_path: str | None = None
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                hierarchy_id, controllers, path = line.rstrip("\n").split(":", 2)
                if version == 2 and hierarchy_id == "0" and controllers == "":
                    own_path = path
                elif version == 1 and controller in controllers.split(","):
                    own_path = path
    except OSError as e:
        return None, f"cannot read /proc/self/cgroup: {e}"
    if own_path is None:
        what = "the cgroup v2 hierarchy" if version == 2 else f"the v1 {controller} controller"
        return None, f"this process is not in {what} (/proc/self/cgroup)"

    mount: tuple[str, str] | None = None  # (mount point, root of the mount in the hierarchy)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                fstype, super_options = fields[sep + 1], fields[sep + 3].split(",")
                if (version == 2 and fstype == "cgroup2") or (
                    version == 1 and fstype == "cgroup" and controller in super_options
                ):
                    mount = (_unescape_mount_field(fields[4]), _unescape_mount_field(fields[3]))
                    break
    except (OSError, ValueError, IndexError) as e:
        return None, f"cannot parse /proc/self/mountinfo: {e}"
    if mount is None:
        what = "cgroup2" if version == 2 else f"cgroup v1 {controller}"
        return None, f"no {what} filesystem is mounted"

    mount_point, mount_root = mount
    # In a container the mount may show only part of the hierarchy (its root is then not
    # "/"); our own cgroup must lie inside the visible part.
    relative = os.path.relpath(own_path, mount_root)
    if relative.startswith(".."):
        return None, f"our cgroup {own_path} is outside the part mounted at {mount_point}"
    base = Path(mount_point) / relative if relative != "." else Path(mount_point)
    if not base.is_dir():
        return None, f"{base} (our cgroup) does not exist in this mount namespace"
    if not os.access(base, os.W_OK):
        return None, (
            f"{base} is not writable (a read-only cgroupfs, as in an unprivileged "
            "container, or not root); run as root or delegate that cgroup to this user"
        )
    return CgroupBase(base, version, controller), str(base)


class RunCgroup:
    """One cgroup directory created by this process for one run.

    Lifetime: `create` makes the directory; the spawned shell enters it by writing its
    own pid into `procs_file` before running any user code; `try_remove` deletes it once
    no live process is left in it (zombies do not count, so the unreaped main process
    does not block removal).
    """

    def __init__(self, base: CgroupBase, path: Path) -> None:
        self.base = base
        self.path = path

    @classmethod
    def create(cls, base: CgroupBase) -> RunCgroup:
        """A new run cgroup under `base`: an emptied one kept by `release` when there
        is one, else a new directory."""
        with _leftovers_lock:
            free = _pool.get(base.path, [])
            for kept in list(free):
                # Its last run's main process may still await its reap, and count
                # against pids.max until then: take it only once it has none.
                if kept._pids_charged() == 0:
                    free.remove(kept)
                    return kept
        while True:
            path = base.path / f"{PREFIX}{os.getpid()}-{next(_counter)}"
            try:
                path.mkdir()
            except FileExistsError:
                # Left by an earlier process that had our pid; `remove_stale` removes
                # those, but never race it: just take the next number.
                continue
            with _leftovers_lock:
                _ours.add(path)
            return cls(base, path)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    # Plain os.open/os.read/os.write: these files are read and written on every run,
    # and pathlib plus a buffered text file cost ten times more than the syscalls.

    def _read(self, name: str) -> bytes:
        fd = os.open(f"{self.path}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 1 << 20)
        finally:
            os.close(fd)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self._read("cgroup.procs").split()]
        except FileNotFoundError:
            return []

    def populated(self) -> bool:
        if self.base.version == 2:
            try:
                return b"populated 1" in self._read("cgroup.events")
            except FileNotFoundError:
                return False
        return bool(self.pids())

    def write(self, name: str, value: str) -> None:
        fd = os.open(f"{self.path}/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def try_remove(self) -> bool:
        """Remove the directory; False while live processes keep it busy."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno == errno.EBUSY:
                return False
            raise
        with _leftovers_lock:
            _leftovers.discard(self)
            _ours.discard(self.path)
        return True

    def release(self) -> bool:
        """The run is over: keep the directory for a later run when no live process is
        left in it, at most _POOL_SIZE per base; otherwise remove it. False while live
        processes keep it busy (see `try_remove`).

        A kept cgroup carries nothing over: no process (`create` also waits until an
        unreaped main process no longer counts in pids.current), no limit (pids.max
        is written by every run that limits processes, and only those get a pids
        cgroup), and the cgroup.kill trigger does not stay set."""
        if self.base.controller in ("", "pids") and not self.populated():
            with _leftovers_lock:
                pool = _pool.setdefault(self.base.path, [])
                if len(pool) < _POOL_SIZE:
                    pool.append(self)
                    _leftovers.discard(self)
                    return True
        return self.try_remove()

    def _pids_charged(self) -> int:
        """pids.current (0 without the pids controller); -1 if it cannot be used."""
        try:
            return int(self._read("pids.current") or b"0")
        except FileNotFoundError:
            return 0 if os.path.isdir(self.path) else -1
        except (OSError, ValueError):
            return -1

    def defer_removal(self) -> None:
        """Remember a directory that could not be removed yet, to retry later."""
        with _leftovers_lock:
            _leftovers.add(self)

    def kill_members(self) -> int:
        """SIGKILL every process in this cgroup, without freezing it first.

        Racy against a process that forks between our read of cgroup.procs and its
        death, so callers loop until the cgroup is empty. Only used for leftovers and
        stale cgroups; live runs use `cgroup.kill` or the freezer.
        """
        if self.base.version == 2 and (self.path / "cgroup.kill").exists():
            members = self.pids()
            if members:
                self.write("cgroup.kill", "1")
            return len(members)
        members = self.pids()
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(members)

    def kill_and_remove(self, timeout: float = 1.0) -> bool:
        """Synchronously empty and remove the directory (for exit and stale cleanup)."""
        deadline = time.monotonic() + timeout
        while True:
            self.kill_members()
            if self.try_remove():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)


def _owner_is_gone(path: Path, owner_pid: int) -> bool:
    if owner_pid == os.getpid():
        # Our pid: ours if we created it, else left by an earlier process that had
        # the same pid (pids are reused), whose runs are certainly over.
        with _leftovers_lock:
            return path not in _ours
    try:
        os.kill(owner_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def remove_stale(base: CgroupBase) -> list[str]:
    """Kill and remove run cgroups under `base` whose owner process no longer exists.

    Called once per base, before this process creates anything there. An owner pid that
    was reused by an unrelated process makes its directories look alive: they are left
    alone (a leak until that pid exits), never removed from under a live owner.
    Returns the names that could not be removed.
    """
    failed: list[str] = []
    try:
        entries = list(os.scandir(base.path))
    except OSError:
        return failed
    for entry in entries:
        match = _NAME.match(entry.name)
        if not match or not entry.is_dir(follow_symlinks=False):
            continue
        if not _owner_is_gone(Path(entry.path), int(match.group(1))):
            continue
        stale = RunCgroup(base, Path(entry.path))
        if base.controller == "freezer":
            # A frozen stale cgroup would never process the SIGKILLs.
            with contextlib.suppress(OSError):
                stale.write("freezer.state", "THAWED")
        try:
            if not stale.kill_and_remove(timeout=0.5):
                failed.append(entry.name)
        except OSError:
            failed.append(entry.name)
    return failed


def remove_leftovers(timeout: float = 1.0) -> None:
    """Retry removing run cgroups that were still busy when their run ended."""
    with _leftovers_lock:
        pending = list(_leftovers)
    for cgroup in pending:
        with contextlib.suppress(OSError):
            if cgroup.base.controller == "freezer":
                cgroup.write("freezer.state", "THAWED")
            cgroup.kill_and_remove(timeout)


def drain_pool() -> None:
    """Remove the emptied run cgroups kept for later runs (at interpreter exit)."""
    with _leftovers_lock:
        kept = [cgroup for pool in _pool.values() for cgroup in pool]
        _pool.clear()
    for cgroup in kept:
        with contextlib.suppress(OSError):
            cgroup.kill_and_remove(timeout=0.5)


atexit.register(remove_leftovers)
atexit.register(drain_pool)
