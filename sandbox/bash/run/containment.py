"""Whole-tree containment: finding and killing every process a command started.

A process-group kill is not enough: any child can leave the group with `setsid`, and a
double-forked daemon is reparented away from the shell. What catches every such escape
is a boundary the child cannot leave by itself: a cgroup (v2 `cgroup.kill`, or v1
freezer + SIGKILL), a PID namespace, or a dedicated subreaper process that adopts every
orphan. Which of these a machine offers is detected at run time, once per process, and
the strongest is used:

    cgroup2          write "1" to cgroup.kill: the kernel kills every member (5.14+)
    cgroup1-freezer  freeze (no member can fork any more), SIGKILL each member, thaw
    pidns            `unshare --pid --fork --kill-child`: the shell is the namespace's
                     init; when it dies the kernel kills everything in the namespace
    subreaper        a small supervisor (PR_SET_CHILD_SUBREAPER) adopts every orphan
                     and kills all its descendants when the shell exits
    killpg           the fallback: SIGKILL the process group and the descendants
                     still attached to the shell; misses `setsid` + reparented escapes

`RLIMIT_NPROC` is inert for root, so `max_child_processes` is enforced by a pids cgroup
(`pids.max`) when one can be created, in addition to the rlimit.

Each mechanism is one `Tree` subclass. A tree is created per run, before the spawn; it
may wrap the command line, may ask the child to enter cgroups before any user code runs,
kills everything that is left once the main process has exited or timed out, and removes
what it created.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Protocol

import anyio
import anyio.lowlevel

from sandbox.bash.linux.cgroups import CgroupBase, RunCgroup, locate, remove_leftovers, remove_stale
from sandbox.bash.linux.child import ChildSetup, shell_prologue
from sandbox.bash.linux.spawner import Spawner
from sandbox.errors import ConfigurationError

__all__ = [
    "MECHANISMS",
    "Availability",
    "MainProcess",
    "Tree",
    "availability",
    "choose",
    "open_tree",
    "pids_cgroup_base",
]

MECHANISMS: tuple[str, ...] = ("cgroup2", "cgroup1-freezer", "pidns", "subreaper", "killpg")

SUBREAPER_SCRIPT = Path(__file__).resolve().parents[1] / "linux" / "subreaper.py"


@dataclass(frozen=True)
class Availability:
    """Whether a mechanism works here, and where (if it does) or why not."""

    available: bool
    detail: str


class MainProcess(Protocol):
    """The directly spawned process, as a tree sees it (see process.BashProcess)."""

    @property
    def pid(self) -> int: ...

    def has_exited(self) -> bool:
        """True once it has exited; never reaps it, so its pid stays reserved."""
        ...

    async def wait_exited(self) -> None:
        """Wait until it has exited (without reaping it)."""
        ...


# --------------------------------------------------------------------------- the trees


class Tree(ABC):
    """One run's containment: created before the spawn, closed after the reap."""

    name: ClassVar[str]

    def __init__(self, pids: RunCgroup | None) -> None:
        # The pids cgroup enforcing max_child_processes, if any. Its members are all
        # processes of this run, so `aclose` may kill what is left in it.
        self._pids = pids
        self._cgroups: list[RunCgroup] = [pids] if pids is not None else []

    def command(self, argv: list[str], setup: ChildSetup) -> tuple[list[str], ChildSetup]:
        """The command line to spawn, and the part of `setup` the spawner must still
        apply to the spawned process itself (a wrapper may take over some of it)."""
        return argv, replace(setup, cgroup_procs=self._placement())

    def limit_processes(self, max_processes: int, *, placed_before_exec: bool) -> None:
        """Set pids.max so the shell and its descendants are at most `max_processes`
        tasks; a wrapper placed into the cgroup with them counts on top."""
        if self._pids is not None:
            extra = self._wrapper_tasks if placed_before_exec else 0
            self._pids.write("pids.max", str(max_processes + extra))

    def unlimit_processes(self) -> None:
        """No limit for a run that asks none (a tree reserved ahead has a pids cgroup
        whichever run takes it)."""
        if self._pids is not None:
            self._pids.write("pids.max", "max")

    def discard(self) -> None:
        """Kill whatever is in the tree's cgroups and remove them, now (a tree reserved
        for a run that did not take it: never pooled, so a zygote still joining it
        fails instead of landing in another run's cgroup)."""
        for cgroup in self._cgroups:
            with contextlib.suppress(OSError):
                if cgroup.base.controller == "freezer":
                    cgroup.write("freezer.state", "THAWED")
            if not cgroup.kill_and_remove(timeout=0.5):
                cgroup.defer_removal()
        self._cgroups.clear()

    # Processes of the wrapper that enter the pids cgroup when the spawned process is
    # placed before exec (preexec_fn): unshare, for the pidns tree.
    _wrapper_tasks = 0

    def _placement(self) -> tuple[str, ...]:
        return tuple(str(c.procs_file) for c in self._cgroups)

    @property
    def placement_files(self) -> tuple[str, ...]:
        """The cgroup.procs files a run's process is placed into."""
        return self._placement()

    @property
    def limits_processes(self) -> bool:
        """Whether a pids cgroup bounds the run's processes."""
        return self._pids is not None

    @property
    def kill_files(self) -> tuple[str, ...]:
        """Files whose write of "1" kills the whole tree (cgroup v2 ``cgroup.kill``):
        the spawner uses them if the agent dies mid-command."""
        return ()

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return ()

    def spawned(self) -> None:  # noqa: B027 - a hook most trees do not need
        """Called once the process exists (or the spawn failed): close child-only fds."""

    @abstractmethod
    async def kill(self, main: MainProcess) -> int:
        """SIGKILL every process of the run that is still alive, the main one included.

        Called on timeout (main alive) and after the main process exited (to catch
        background jobs and escapes). Returns how many processes other than the main one
        were killed, as far as the mechanism can tell.
        """

    async def aclose(self) -> None:
        """Remove what the tree created, waiting briefly for killed members to exit.

        Safe to call more than once; never raises for a directory that stays busy (it
        is remembered and retried later, see cgroups.remove_leftovers).
        """
        deadline = anyio.current_time() + 1.0
        for cgroup in self._cgroups:
            while not cgroup.release():
                if anyio.current_time() > deadline:
                    cgroup.defer_removal()
                    break
                # Members get SIGKILL from `kill`; this only catches what a weaker
                # mechanism missed but the pids cgroup still holds.
                cgroup.kill_members()
                await anyio.sleep(0.001)
        self._cgroups.clear()


class Cgroup2Tree(Tree):
    """cgroup v2: one `cgroup.kill` write kills every member, forks in flight included."""

    name = "cgroup2"

    def __init__(self, base: CgroupBase, pids: RunCgroup | None) -> None:
        super().__init__(pids)
        self._cgroup = RunCgroup.create(base)
        self._cgroups.insert(0, self._cgroup)

    @property
    def kill_files(self) -> tuple[str, ...]:
        return (str(self._cgroup.path / "cgroup.kill"),)

    async def kill(self, main: MainProcess) -> int:
        members = self._cgroup.pids()
        if not members:
            return 0
        self._cgroup.write("cgroup.kill", "1")
        return len(set(members) - {main.pid})


class FreezerTree(Tree):
    """cgroup v1 freezer: freeze so nothing can fork, SIGKILL every member, thaw."""

    name = "cgroup1-freezer"

    def __init__(self, base: CgroupBase, pids: RunCgroup | None) -> None:
        super().__init__(pids)
        self._cgroup = RunCgroup.create(base)
        self._cgroups.insert(0, self._cgroup)

    async def kill(self, main: MainProcess) -> int:
        killed: set[int] = set()
        # A process in uninterruptible sleep can keep the cgroup FREEZING for long;
        # after the deadline kill whatever is listed anyway and loop.
        for _ in range(10):
            members = self._cgroup.pids()
            if not members:
                break
            self._cgroup.write("freezer.state", "FROZEN")
            deadline = anyio.current_time() + 0.1
            while (self._cgroup.path / "freezer.state").read_text().strip() != "FROZEN":
                if anyio.current_time() > deadline:
                    break
                await anyio.sleep(0.0005)
            members = self._cgroup.pids()
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed.update(members)
            # SIGKILL is delivered to frozen tasks only once they thaw.
            self._cgroup.write("freezer.state", "THAWED")
            await anyio.lowlevel.checkpoint()
        return len(killed - {main.pid})

    async def aclose(self) -> None:
        with contextlib.suppress(OSError):
            self._cgroup.write("freezer.state", "THAWED")
        await super().aclose()


class PidNamespaceTree(Tree):
    """A PID namespace whose init is the shell: when it exits, the kernel kills the rest.

    `unshare --fork` runs the shell as pid 1 of a new namespace and waits for it;
    `--kill-child` gives that shell PR_SET_PDEATHSIG=SIGKILL, so killing unshare kills
    the shell, and the death of a namespace's init kills every other process in it. No
    process can leave a PID namespace. Host /proc stays mounted, so processes outside
    are still visible by pid (reading their files still needs the usual permissions).

    A quirk a user can notice: as a namespace's init, the shell ignores signals it has
    no handler for when they come from inside the namespace, so `kill -9 $$` or
    `kill $$` in the command does not end it.
    """

    name = "pidns"
    _wrapper_tasks = 1

    def __init__(self, prefix: tuple[str, ...], pids: RunCgroup | None) -> None:
        super().__init__(pids)
        self._prefix = prefix

    def command(self, argv: list[str], setup: ChildSetup) -> tuple[list[str], ChildSetup]:
        prefix = list(self._prefix)
        if setup.uid is not None:
            # unshare needs its privileges to create the namespace, so it drops them
            # itself, inside, just before exec'ing the shell.
            prefix += ["--setgid", str(setup.gid), "--setuid", str(setup.uid)]
        return [*prefix, "--", *argv], replace(
            setup, cgroup_procs=self._placement(), uid=None, gid=None
        )

    async def kill(self, main: MainProcess) -> int:
        # unshare -> its child (the shell, init of the namespace) -> everything else:
        # every process in the namespace descends from init, orphans included.
        return _kill_namespace(main)


class OwnPidNamespaceTree(Tree):
    """The command's own PID namespace, made by the spawner as it forks the shell (a
    confined run with a private /proc: `confinement.fork_in_pid_namespace`): the shell
    is the namespace's first process, so when it dies, on its own or by our SIGKILL,
    the kernel kills every other process in the namespace (`setsid`, double forks and
    daemons included: none can leave it) before its exit status can be read. No
    wrapper process and no privilege: an ordinary user gets it inside a user namespace
    of the command's own. Reported as "pidns".
    """

    name = "pidns"

    async def kill(self, main: MainProcess) -> int:
        return _kill_namespace(main)


class SubreaperTree(Tree):
    """A dedicated supervisor process (sandbox/bash/linux/subreaper.py) between us and bash.

    It marks itself PR_SET_CHILD_SUBREAPER, so every orphan of the run, `setsid -f`
    and double forks included, is reparented to it instead of init; when bash exits,
    or when we send SIGTERM, it SIGKILLs all its descendants until none is left, then
    exits with bash's status. A subreaper must be dedicated: it adopts every orphan
    below it, which the agent process itself must not. It applies the child setup
    (placement, rlimits, uid) in its own forked child, so it is not limited itself.
    """

    name = "subreaper"

    def __init__(self, pids: RunCgroup | None) -> None:
        super().__init__(pids)
        # Report pipe: the supervisor writes how many processes it killed, then exits.
        # Read end: ours, closed in aclose. Write end: passed to the supervisor only,
        # closed here right after the spawn so that EOF follows the supervisor's exit.
        self._report_r, low = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # Passed to the child under this number: a low one can be a descriptor the
        # spawner's child needs (a prepared namespace or Landlock path), which the
        # hand-over would replace (setns then failed with EINVAL, order-dependently).
        self._report_w = high_descriptor(low)
        os.close(low)
        self._report = b""

    def command(self, argv: list[str], setup: ChildSetup) -> tuple[list[str], ChildSetup]:
        # The supervisor runs confined (the shell it forks inherits every layer); its
        # Python and its cgroup files are granted by the process layer. The placement,
        # rlimits and identity it applies to its child itself.
        return ([*_subreaper_argv(self._report_w, setup, self._placement()), *argv],
                ChildSetup(confinement=setup.confinement))

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._report_w,)

    def spawned(self) -> None:
        if self._report_w >= 0:
            os.close(self._report_w)
            self._report_w = -1

    async def kill(self, main: MainProcess) -> int:
        if not main.has_exited():
            with contextlib.suppress(ProcessLookupError):
                os.kill(main.pid, signal.SIGTERM)
            with anyio.move_on_after(0.5):
                await main.wait_exited()
            if not main.has_exited():
                # The supervisor itself is stuck: take it down, and what we still see.
                victims = _descendants(main.pid)
                for pid in victims:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                return len(victims)
        with contextlib.suppress(BlockingIOError):
            self._report += os.read(self._report_r, 64)
        try:
            return int(self._report.decode().split()[0])
        except (IndexError, ValueError):
            return 0

    async def aclose(self) -> None:
        self.spawned()
        if self._report_r >= 0:
            os.close(self._report_r)
            self._report_r = -1
        await super().aclose()



def high_descriptor(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` numbered at least 3/4 of the way up to the
    descriptor limit (at most 1000). A descriptor the agent passes to a command keeps
    its number in the spawner's child, where the spawner's own descriptors (prepared
    namespaces, Landlock paths) hold the low numbers: a high one clashes with none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    floor = 1000 if soft == resource.RLIM_INFINITY else min(1000, max(64, soft * 3 // 4))
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)

def _subreaper_argv(report_fd: int, setup: ChildSetup, cgroup_procs: Sequence[str],
                    parent: int | None = None) -> list[str]:  # fmt: skip
    """The supervisor's command line, up to and including "--" (see _subreaper.py).
    parent: the process that starts it (it checks, and dies with it): the spawner by
    default."""
    rlimits = ",".join(f"{res}={value}" for res, value in setup.rlimits) or "-"
    uid = "-" if setup.uid is None else str(setup.uid)
    gid = "-" if setup.gid is None else str(setup.gid)
    return [
        sys.executable,
        "-I",
        "-S",
        str(SUBREAPER_SCRIPT),
        str(report_fd),
        # Its parent: the spawner that forks it (it dies with that parent).
        str(Spawner.shared().pid if parent is None else parent),
        uid,
        gid,
        rlimits,
        *cgroup_procs,
        "--",
    ]


class ProcessGroupTree(Tree):
    """The fallback: SIGKILL the process group, plus the shell's current descendants.

    The shell leads its own session and group (start_new_session), so background jobs
    share its group. A child that called `setsid` leaves the group; it is still caught
    while it is a descendant of a live shell (found through /proc), but not once it has
    been reparented to init, as `setsid -f` and double forks are.
    """

    name = "killpg"

    async def kill(self, main: MainProcess) -> int:
        victims: set[int] = set()
        if not main.has_exited():
            victims |= _descendants(main.pid)
        # While the main process is an unreaped zombie its pid cannot be reused, as a
        # pid or as a group id, so this killpg reaches our group and nothing else.
        victims |= {pid for pid, _ppid, pgrp in _processes() if pgrp == main.pid}
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(main.pid, signal.SIGKILL)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(victims - {main.pid})


# ----------------------------------------------------------------- /proc helpers


def _processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgrp) of every live, non-zombie process."""
    result = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ")".
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        result.append((int(name), int(fields[1]), int(fields[2])))
    return result


def _kill_namespace(main: MainProcess) -> int:
    """SIGKILL the first process of a PID namespace (the kernel then kills every other
    member); return how many others there were, 0 when it had exited already (its exit
    status is readable only once every other member is gone: not observable now)."""
    if main.has_exited():
        return 0
    members = _descendants(main.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(main.pid, signal.SIGKILL)
    return max(len(members) - 1, 0)


def _descendants(pid: int) -> set[int]:
    """`pid` and every live descendant of it (a snapshot: racy against forks)."""
    children: dict[int, list[int]] = {}
    for child, parent, _pgrp in _processes():
        children.setdefault(parent, []).append(child)
    found = {pid}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


# ----------------------------------------------------------------- detection


@dataclass
class _Detected:
    availability: dict[str, Availability] = field(default_factory=dict)
    bases: dict[str, CgroupBase] = field(default_factory=dict)
    unshare_prefix: tuple[str, ...] = ()


_detected = _Detected()
_detect_lock = threading.Lock()


def _forget_the_parents_lock() -> None:
    """In a child forked while another thread held it (its first command's probes)."""
    global _detect_lock
    _detect_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_the_parents_lock)


def _run_probe(argv: list[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError) as e:
        return False, str(e)
    stderr = done.stderr.decode(errors="replace").strip()
    return done.returncode == 0, stderr or f"exit status {done.returncode}"


def _probe_cgroup(key: str, controller: str, required_file: str, shell: str) -> Availability:
    base, where = locate(controller)
    if base is None:
        return Availability(False, where)
    remove_stale(base)
    remove_leftovers()
    try:
        probe = RunCgroup.create(base)
    except OSError as e:
        return Availability(False, f"cannot create a cgroup under {base.path}: {e}")
    try:
        if not (probe.path / required_file).exists():
            why = {
                "cgroup.kill": "cgroup.kill is missing (needs Linux 5.14 or later)",
                "pids.max": "the pids controller is not enabled for children of "
                f"{base.path} (add +pids to its cgroup.subtree_control)",
            }.get(required_file, f"{required_file} is missing")
            return Availability(False, why)
        # The real thing, once: a shell moves itself in with the same prologue as a run.
        ok, err = _run_probe(
            [
                shell,
                "--norc",
                "--noprofile",
                "-c",
                shell_prologue(ChildSetup(cgroup_procs=(str(probe.procs_file),))),
            ]
        )
        if not ok:
            return Availability(False, f"a process cannot be moved into {probe.path}: {err}")
    finally:
        if not probe.kill_and_remove():
            probe.defer_removal()
    _detected.bases[key] = base
    return Availability(True, str(base.path))


def _probe_pidns(shell: str) -> Availability:
    unshare = shutil.which("unshare")
    if unshare is None:
        return Availability(False, "unshare (util-linux) is not installed")
    base: tuple[str, ...] = (unshare, "--pid", "--fork", "--kill-child")
    attempts = [base]
    if os.geteuid() != 0:
        # Without CAP_SYS_ADMIN a PID namespace needs a user namespace around it.
        attempts = [(*base, "--user", "--map-root-user")]
    last = ""
    for prefix in attempts:
        ok, last = _run_probe([*prefix, "--", shell, "-c", "exit 0"])
        if ok:
            _detected.unshare_prefix = prefix
            return Availability(True, " ".join(prefix))
    return Availability(False, f"unshare --pid failed: {last}")


def _probe_subreaper(shell: str) -> Availability:
    if not sys.executable:
        return Availability(False, "sys.executable is unknown: cannot start the supervisor")
    r, w = os.pipe()
    try:
        # Started by us here, not by the spawner: we are its parent. (It checks that
        # its parent is the one named, which made this probe fail everywhere before.)
        argv = _subreaper_argv(w, ChildSetup(), (), parent=os.getpid())
        try:
            done = subprocess.run(
                [*argv, shell, "-c", "exit 0"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                pass_fds=(w,),
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as e:
            return Availability(False, f"the supervisor did not start: {e}")
    finally:
        os.close(r)
        os.close(w)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        return Availability(False, f"the supervisor failed: {err or done.returncode}")
    return Availability(True, f"{sys.executable} {SUBREAPER_SCRIPT.name}")


def availability(name: str, shell: str) -> Availability:
    """Probe (once per process, then cached) whether mechanism `name` works here.

    Besides the five tree mechanisms, "pids" is the pids cgroup for max_child_processes.
    """
    with _detect_lock:
        known = _detected.availability.get(name)
        if known is not None:
            return known
        if name == "cgroup2":
            result = _probe_cgroup(name, "", "cgroup.kill", shell)
        elif name == "cgroup1-freezer":
            result = _probe_cgroup(name, "freezer", "freezer.state", shell)
        elif name == "pids":
            result = _probe_cgroup("pids", "pids", "pids.max", shell)
            if not result.available and "is not in" in result.detail:
                # Pure v2 machines: the pids controller lives in the v2 hierarchy.
                v2 = _probe_cgroup("pids", "", "pids.max", shell)
                result = v2 if v2.available else result
        elif name == "pidns":
            result = _probe_pidns(shell)
        elif name == "subreaper":
            result = _probe_subreaper(shell)
        elif name == "killpg":
            result = Availability(True, "process-group kill; misses setsid escapes")
        else:
            raise ConfigurationError(
                f"unknown containment {name!r}; use 'auto' or one of {', '.join(MECHANISMS)}"
            )
        _detected.availability[name] = result
        return result


def choose(requested: str, shell: str) -> str:
    """The mechanism a run uses: the strongest available for "auto", else `requested`
    if it works here (a ConfigurationError saying why not, otherwise)."""
    if requested == "auto":
        for name in MECHANISMS:
            if availability(name, shell).available:
                return name
        return "killpg"
    found = availability(requested, shell)
    if not found.available:
        raise ConfigurationError(
            f"containment {requested!r} is not available on this machine: {found.detail}; "
            "pass containment='auto' to use the strongest one that is"
        )
    return requested


def pids_cgroup_base(shell: str) -> CgroupBase | None:
    if availability("pids", shell).available:
        return _detected.bases["pids"]
    return None


def open_tree(name: str, *, limit_processes: bool, shell: str,
              own_pid_namespace: bool = False) -> Tree:  # fmt: skip
    """Create the containment for one run (its cgroups exist from here on: the caller
    must `aclose` the tree, also when the spawn fails). With `limit_processes`, a pids
    cgroup is part of it when the machine has one (`Tree.limit_processes` sets it).
    own_pid_namespace (with name "pidns"): the spawner forks the shell into a PID
    namespace of its own (a confined run with a private /proc), no `unshare` wrapper."""
    pids: RunCgroup | None = None
    if limit_processes:
        base = pids_cgroup_base(shell)
        if base is not None:
            pids = RunCgroup.create(base)
    try:
        if name == "cgroup2":
            return Cgroup2Tree(_detected.bases["cgroup2"], pids)
        if name == "cgroup1-freezer":
            return FreezerTree(_detected.bases["cgroup1-freezer"], pids)
        if name == "pidns" and own_pid_namespace:
            return OwnPidNamespaceTree(pids)
        if name == "pidns":
            return PidNamespaceTree(_detected.unshare_prefix, pids)
        if name == "subreaper":
            return SubreaperTree(pids)
        return ProcessGroupTree(pids)
    except BaseException:
        if pids is not None and not pids.kill_and_remove():
            pids.defer_removal()
        raise


def _reset_detection_for_tests() -> None:
    """Forget what was probed (tests that change the environment)."""
    global _detected
    with _detect_lock:
        _detected = _Detected()
