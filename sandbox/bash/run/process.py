"""Spawn, limit, supervise, capture and kill one bash command and its whole tree.

This layer knows nothing of policies or humans: it runs `bash --norc --noprofile -c
COMMAND` in a workspace, with exactly the environment it is given, stdin at EOF, in a
new session, under resource limits, and returns what happened.

The life of one run (`run_bash`):

1. Containment for the run is created (a cgroup, see containment.py), then the shell is
   spawned. A builtin-only prologue in front of the command moves the shell into its
   cgroups and sets its rlimits before any user code runs (the race analysis is on
   `child.shell_prologue`), so no `preexec_fn` is needed and CPython spawns with vfork,
   at a cost independent of the agent's size. A run that drops privileges or is
   confined (confinement.py: Landlock, namespaces, capabilities, seccomp) uses a
   `preexec_fn` instead, because the cgroup writes must precede the identity change
   and Landlock; a confined run also gets a private TMPDIR, removed in step 3.
2. Two readers copy stdout and stderr into bounded head+tail buffers while a pidfd
   tells us when the shell itself exits. We do not wait for EOF on the pipes: a
   background job (`sleep 300 & echo hi`) holds them open as long as it lives, which
   is why asyncio's `communicate()` hangs there.
3. When the shell exits, or the timeout expires, everything still alive in the tree is
   SIGKILLed, the shell is reaped, the pipes are drained with a short grace period
   (an escaped process could hold them forever), and the containment is removed.
4. If the caller is cancelled, step 3 runs anyway (shielded) and the cancellation
   propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import shutil
import signal
import socket
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread

from sandbox.bash.linux.child import ChildSetup, bash_posix_mode, shell_prologue, spawn_key
from sandbox.bash.linux.confinement import (
    Confinement,
    ConfinementRequest,
    plan,
)
from sandbox.bash.linux.confinement import detect as detect_confinement
from sandbox.bash.linux.spawner import STALE, SpawnedProcess, Spawner, SpawnerError, remove_tree
from sandbox.bash.network.allowlist import Allowlist
from sandbox.bash.network.handover import receive_listeners
from sandbox.bash.network.proxy import (
    HTTP_PORT,
    SOCKS_PORT,
    Attachment,
    proxy_environment,
    shared_proxy,
)
from sandbox.bash.run import reservations
from sandbox.bash.run.capture import BoundedCapture, decoded, drain_buffered, pump, set_pipe_size
from sandbox.bash.run.checks import (
    _check_command,
    _check_cwd,
    _check_env,
    _check_rlimits,
    _reachable,
    _unprivileged_identity,
)
from sandbox.bash.run.containment import (
    MECHANISMS,
    SUBREAPER_SCRIPT,
    Tree,
    availability,
    choose,
    high_descriptor,
    open_tree,
)
from sandbox.bash.run.protected_scan import attach_protected
from sandbox.bash.run.reservations import (
    _RESERVABLE,
    _live_spawner,
    _private_tmpdir,
    _reserve_soon,
    _take_reservation,
)
from sandbox.errors import ConfigurationError, SandboxError

# How long the child may take to hand the proxy's listeners over (its set-up, before
# exec: milliseconds unless the machine is overloaded).
_HANDOVER_SECONDS = 30.0

__all__ = [
    "BashProcess",
    "Limits",
    "NetworkAccess",
    "ProcessResult",
    "find_bash",
    "run_bash",
]

# After the shell has exited (or was killed) and the tree has been killed, how long the
# readers may still wait for EOF. Killed processes release the pipes within a
# millisecond; only a process that escaped containment can hold them longer.
DRAIN_GRACE = 0.05
# How long to wait for a SIGKILLed main process to be gone (it can be stuck in
# uninterruptible sleep, e.g. on a dead NFS server; then it is left to CPython's reaper).
KILL_GRACE = 2.0


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run; None means unlimited.

    max_memory_bytes: RLIMIT_AS of every process (address space, not RSS: runtimes that
    reserve large virtual areas, like the JVM or node, need generous values).
    max_file_size_bytes: RLIMIT_FSIZE; a write beyond it kills the writer with SIGXFSZ
    (the shell reports status 153). Pipes are not files: output is bounded separately.
    max_child_processes: processes besides the shell. RLIMIT_NPROC alone is inert for
    root, so a pids cgroup (pids.max) enforces it whenever one can be created;
    `ProcessResult.nproc_enforcement` says what did.
    RLIMIT_CORE is set to 0 whenever any limit is set.
    """

    max_memory_bytes: int | None = None
    max_file_size_bytes: int | None = None
    max_child_processes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_memory_bytes", "max_file_size_bytes", "max_child_processes"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value <= 0
            ):
                raise ConfigurationError(
                    f"Limits.{name} must be a positive int or None, got {value!r}"
                )

    @property
    def any(self) -> bool:
        return (
            self.max_memory_bytes is not None
            or self.max_file_size_bytes is not None
            or self.max_child_processes is not None
        )

    def rlimits(self) -> tuple[tuple[int, int], ...]:
        pairs = [
            (resource.RLIMIT_AS, self.max_memory_bytes),
            (resource.RLIMIT_FSIZE, self.max_file_size_bytes),
            (resource.RLIMIT_NPROC, self.max_child_processes),
        ]
        return tuple((res, value) for res, value in pairs if value is not None)


@dataclass(frozen=True)
class ProcessResult:
    """What one run did.

    stdout/stderr: UTF-8 (invalid bytes replaced); when a stream exceeded the output
    limit, its first and last halves joined by "\\n…[N bytes omitted]…\\n".
    returncode: the shell's exit status; negative when a signal killed it (-9 after a
    timeout); None only if it could not be reaped (stuck in the kernel).
    timed_out: the timeout expired and the tree was killed; output produced until then
    is kept. truncated: some output was dropped (counts per stream).
    containment: the mechanism that enforced the whole-tree kill ("cgroup2",
    "cgroup1-freezer", "pidns", "subreaper", or "killpg", which misses setsid escapes).
    killed_processes: processes other than the shell that were still alive after it
    exited or timed out, and were killed (as far as the mechanism can count them).
    nproc_enforcement: how max_child_processes was enforced: "pids-cgroup",
    "setuid:<uid>" (RLIMIT_NPROC of an unprivileged uid), "rlimit" (already
    unprivileged) or "rlimit-only(ineffective as root)"; None when not set.
    protections: each OS confinement layer (confinement.LAYERS), "active: ..." or
    "inactive: <reason>"; None when the run was not asked to be confined.
    """

    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    truncated: bool
    stdout_bytes_dropped: int
    stderr_bytes_dropped: int
    duration_ms: float
    containment: str
    killed_processes: int
    nproc_enforcement: str | None
    protections: dict[str, str] | None = None
    # network="allowlist": what the egress proxy let through and refused for this run
    # ({"allowed": [{"destination", "connections"}], "denied": [... "reason"]}).
    network: dict[str, Any] | None = None


@dataclass(frozen=True)
class NetworkAccess:
    """What network="allowlist" needs at run time: the parsed allowed_domains, and how
    to ask about a name nobody listed (None: refuse it). ``ask(host, port)`` is awaited
    on the caller's loop."""

    allowlist: Allowlist
    ask: Callable[[str, int], Awaitable[bool]] | None = None


# --------------------------------------------------------------------------- spawning


def find_bash() -> str:
    """The bash executable, looked up on *this* process's PATH (cached per PATH).

    Never on the command's PATH: that environment may point into the workspace, where
    the command itself could have planted a `bash`.
    """
    path = os.environ.get("PATH") or os.defpath
    found = _bash_by_path.get(path)
    if found is None or not os.access(found, os.X_OK):
        which = shutil.which("bash", path=path)
        if which is None:
            raise ConfigurationError(
                f"bash was not found on PATH ({path}); install it (Debian: apt-get "
                "install bash) or add its directory to this process's PATH"
            )
        found = _bash_by_path[path] = os.path.abspath(which)
    return found


_bash_by_path: dict[str, str] = {}


class BashProcess:
    """One spawned command: its Popen, its pidfd and the read ends of its output pipes.

    File descriptors and their lifetimes:

    - stdout/stderr read ends: created close-on-exec before the spawn, non-blocking,
      owned here; `close` closes them, which the caller does only after the readers
      have stopped (closing an fd that an event loop still watches is undefined).
    - their write ends: the child's only. Closed in the parent right after the spawn,
      whether it succeeded or not: a copy kept here would hold back EOF forever.
    - pidfd: opened right after the spawn. The pid cannot have been reused by then,
      because only we reap this child and have not. Readable once the process has
      exited; closed by `close`, after the reap. Without pidfd (Linux < 5.3) the exit
      is polled with waitid(WNOWAIT), which does not reap either.

    The main process is reaped only after the tree was killed: while it is an unreaped
    zombie its pid, which is also its process group id, cannot be reused, so a
    process-group kill cannot hit a stranger.
    """

    def __init__(
        self, popen: SpawnedProcess, stdout_fd: int, stderr_fd: int, pidfd: int | None
    ) -> None:
        self._popen = popen
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self._pidfd = pidfd
        self._exited = False

    @classmethod
    def spawn(
        cls,
        argv: list[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        setup: ChildSetup | None,
        pass_fds: tuple[int, ...] = (),
        kill_files: tuple[str, ...] = (),
        use_offer: bool = True,
    ) -> BashProcess:
        """Start ``argv`` through this process's spawner (`sandbox.bash.linux.spawner`): the
        agent never forks itself, and the spawner kills the tree if the agent dies.
        With `use_offer`, a zygote the spawner has ready for this setup takes it
        straight from us."""
        key = spawn_key(setup) if setup is not None else None
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            set_pipe_size(out_w)
            set_pipe_size(err_w)
            os.set_blocking(out_r, False)
            os.set_blocking(err_r, False)
            try:
                spawned = Spawner.shared().spawn(
                    argv, cwd=cwd, env=dict(env), setup=setup, stdout_w=out_w,
                    stderr_w=err_w, pass_fds=pass_fds, kill_files=kill_files,
                    zygote_key=key, use_offer=use_offer)
            except SpawnerError:
                # One retry with a new spawner: the old one may have died between
                # commands (it is restarted on the next use).
                spawned = Spawner.shared().spawn(
                    argv, cwd=cwd, env=dict(env), setup=setup, stdout_w=out_w,
                    stderr_w=err_w, pass_fds=pass_fds, kill_files=kill_files)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return cls(spawned, out_r, err_r, spawned.pidfd)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def has_exited(self) -> bool:
        if not self._exited:
            self._exited = self._popen.poll_exited()
        return self._exited

    async def wait_exited(self, *, check_spawner: bool = True) -> None:
        """Wait until the process has exited, without reaping it. If the spawner died
        meanwhile (the process then died too: it gets SIGKILL when its parent, the
        spawner, dies), raise `SpawnerError` (unless `check_spawner` is False): its
        result is lost."""
        if self._exited:
            return
        assert self._pidfd is not None
        await anyio.wait_readable(self._pidfd)
        self._exited = True
        if check_spawner and self._popen.spawner_gone():
            raise SpawnerError(
                "the spawner process died while this command ran; its result is lost "
                "(the next command starts a new spawner)")

    async def wait_started(self, limit: float = KILL_GRACE) -> None:
        """Wait (at most `limit` seconds) until the child has exec'd or given up: before
        that it may not be in its cgroups yet, and a tree kill could miss it."""
        if self._popen.poll_started():
            return
        with anyio.move_on_after(limit):
            while not self._popen.poll_started():
                await anyio.wait_readable(self._popen.started_fd)
        if not self._popen.poll_started():
            # Stuck before exec (no user code ran): it has no children to miss.
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._popen.pidfd, signal.SIGKILL)

    def setup_error(self) -> str | None:
        """Why the child could not set itself up (cgroups, rlimits, confinement,
        identity), or None; known once it has exited."""
        return self._popen.setup_error()

    def reap(self) -> int | None:
        """Collect the exit status (the process must have exited)."""
        if not self.has_exited():
            return None
        return self._popen.wait()

    def close(self) -> None:
        for fd in (self.stdout_fd, self.stderr_fd):
            if fd >= 0:
                os.close(fd)
        self.stdout_fd = self.stderr_fd = -1
        self._pidfd = None
        self._popen.close()  # the pidfd and the reply socket


# --------------------------------------------------------------------------- running


async def _remove_tmpdir(path: str) -> None:
    """Remove a run's TMPDIR: here when it is empty (one rmdir), else in a worker
    thread. A command that left 200,000 files in it kept the event loop busy for 9 s
    when they were removed here."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    await anyio.to_thread.run_sync(remove_tree, path)


async def _pump_until_eof(fd: int, capture: BoundedCapture, done: anyio.Event) -> None:
    try:
        await pump(fd, capture)
    finally:
        done.set()


_P = ParamSpec("_P")
_R = TypeVar("_R")

# Descriptors a run holds in this process while it runs (its pipes, the spawner's
# reply, the tree's handles: about 6 measured), with room to spare.
_FDS_PER_RUN = 8


def _concurrent_runs() -> int:
    """How many runs may be under way at once: half the soft RLIMIT_NOFILE, the rest
    is the agent's own (its model client's sockets, its files)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft > 1 << 20:
        soft = 1 << 20
    return max(1, soft // 2 // _FDS_PER_RUN)


class _NoLoop:
    """The key of runs outside asyncio (trio)."""


_NO_LOOP = _NoLoop()
_gates: weakref.WeakKeyDictionary[object, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _descriptor_gate() -> anyio.CapacityLimiter:
    try:
        key: object = asyncio.get_running_loop()
    except RuntimeError:
        key = _NO_LOOP
    gate = _gates.get(key)
    if gate is None:
        gate = _gates[key] = anyio.CapacityLimiter(_concurrent_runs())
    return gate


def _gated(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """Runs past `_concurrent_runs` wait their turn: a burst of parallel tool calls
    (60 at once under a soft limit of 256 failed 20 with "Too many open files", and
    any other descriptor the agent opened meanwhile failed as well) never takes the
    agent's descriptors. The wait is part of no command's timeout."""

    @functools.wraps(fn)
    async def gated(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        async with _descriptor_gate():
            return await fn(*args, **kwargs)

    return gated


async def _spawner_started() -> None:
    if _live_spawner() is None:
        await anyio.to_thread.run_sync(Spawner.shared)


@_gated
async def run_bash(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    # The command's wall-clock budget, not a cancel scope: expiry is a result
    # (timed_out=True with the output so far), never an exception.
    timeout: float | None,  # noqa: ASYNC109
    limits: Limits = Limits(),
    max_output_bytes: int = 1 << 20,
    drop_privileges: bool = False,
    containment: str = "auto",
    rlimits_via: str = "preexec_fn",
    confinement: ConfinementRequest | None = None,
    network: NetworkAccess | None = None,
) -> ProcessResult:
    """Run `bash --norc --noprofile -c command` and return what happened.

    cwd: the workspace (must exist). env: the command's entire environment; nothing is
    inherited, and variables that run code at bash startup are refused. timeout:
    seconds of wall-clock time, None for none; on expiry the whole tree is SIGKILLed
    and the output so far is returned with timed_out=True. max_output_bytes: per
    stream; beyond it the middle of the stream is dropped and counted.
    drop_privileges: when running as root, run the command as the workspace's owner
    (or nobody if root owns it, which then needs a workspace writable by nobody); this
    also hides the agent's /proc/PID/environ from the command. containment: "auto"
    (the strongest available) or one of containment.MECHANISMS, which then must work.
    confinement: the OS confinement to apply (see confinement.py), None for none. A
    confined run gets a private temporary directory (TMPDIR, removed afterwards) and
    is set up entirely by a preexec_fn: the cgroup placement must precede Landlock.
    Raises confinement.ConfinementUnavailable when it is "required" and the kernel
    lacks a layer. network: with confinement.network == "allowlist", the names the
    agent's egress proxy lets through (sandbox/bash/network/).

    Raises ConfigurationError for a missing workspace, a missing bash, a forbidden env
    variable or an unusable limit; OSError if the kernel refuses the spawn. When the
    calling task is cancelled, the whole tree is killed and the containment removed
    before the cancellation propagates.
    """
    started = time.perf_counter()
    _check_command(command)
    workdir = _check_cwd(cwd)
    _check_env(env)
    if timeout is not None and timeout <= 0:
        raise ConfigurationError(f"timeout must be > 0 seconds or None, got {timeout}")
    if max_output_bytes < 0:
        raise ConfigurationError(f"max_output_bytes must be >= 0, got {max_output_bytes}")
    if rlimits_via not in ("preexec_fn", "prologue"):
        raise ConfigurationError(
            f"rlimits_via must be 'preexec_fn' or 'prologue', got {rlimits_via!r}"
        )
    if containment != "auto" and containment not in MECHANISMS:
        raise ConfigurationError(
            f"unknown containment {containment!r}; use 'auto' or one of {', '.join(MECHANISMS)}"
        )
    shell = find_bash()
    rlimits = limits.rlimits()
    _check_rlimits(rlimits)
    uid = gid = None
    if drop_privileges and os.geteuid() == 0:
        uid, gid = _unprivileged_identity(workdir)
    confined = confinement is not None and confinement.mode != "none"
    mechanism = choose(containment, shell)
    # A confined run with a private /proc is the first process of a PID namespace of its
    # own (the spawner forks it so, in a user namespace of its own without CAP_SYS_ADMIN):
    # the whole tree dies with it. Better than any mechanism but the cgroups (which also
    # bound the run's processes and memory as a whole).
    own_pidns = confined and containment in ("auto", "pidns") and mechanism in (
        "pidns", "subreaper", "killpg") and detect_confinement().has("private-proc")  # fmt: skip
    if own_pidns:
        mechanism = "pidns"
    elif confined and mechanism == "pidns":
        # `unshare --pid` needs the capabilities the confinement has dropped by then.
        if containment != "auto":
            raise ConfigurationError(
                "containment='pidns' cannot be combined with OS confinement (unshare "
                "needs the capabilities it drops); use containment='auto' or confinement="
                "'none'"
            )
        mechanism = "subreaper" if availability("subreaper", shell).available else "killpg"
    if confined and mechanism == "subreaper" and uid is not None:
        raise ConfigurationError(
            "the subreaper containment cannot drop privileges under OS confinement; "
            "run the agent as the unprivileged user, or use confinement='none'"
        )

    tmpdir: str | None = None
    protections: dict[str, str] | None = None
    attachment: Attachment | None = None
    network_report: dict[str, Any] | None = None
    limited = limits.max_child_processes is not None
    # The subreaper's supervisor needs its cgroups granted: that tree comes first.
    tree = open_tree(mechanism, limit_processes=limited, shell=shell) if (
        mechanism == "subreaper") else None  # fmt: skip
    process: BashProcess | None = None
    plan_confinement: Confinement | None = None
    plan_request: ConfinementRequest | None = None
    try:
        if confinement is not None:
            extra_read: tuple[str, ...] = ()
            extra_write: tuple[str, ...] = ()
            if tree is not None:
                # The supervisor is Python, and places its child into the cgroups.
                extra_read = (sys.base_prefix, sys.prefix, str(SUBREAPER_SCRIPT.parent))
                extra_write = tuple(tree.placement_files)
            plan_request = replace(
                confinement,
                readable_paths=(*confinement.readable_paths, *extra_read),
                writable_paths=(*confinement.writable_paths, *extra_write),
            )
            # Scanned for each run: part of the signature, so that a reservation made
            # before a protected path appeared is not taken (sandbox/bash/linux/protected.py).
            plan_request = await attach_protected(plan_request, workdir)
        # A run set up in the child (all of it, below, once it takes a reservation)
        # can take a run reserved ahead (its tree and TMPDIR), whose zygote has set
        # itself up for it already; not one that asked for its rlimits in a prologue.
        proxied = plan_request is not None and plan_request.network == "allowlist"
        if proxied and network is None:
            raise ConfigurationError(
                "network='allowlist' needs the allowed names: pass network=NetworkAccess("
                "Allowlist.parse([...])) to run_bash (ExecuteBashTool does)"
            )
        # Not with the egress proxy: its listeners are made at exec time, in the
        # command's own namespace, which a zygote would have made ahead.
        reservable = tree is None and (mechanism in _RESERVABLE or own_pidns) and (
            not proxied) and (uid is not None or confined or rlimits_via == "preexec_fn")
        signature = (mechanism, shell, plan_request, workdir, uid, gid)
        if reservable:
            reservations._last_signature = signature
        held = _take_reservation(signature) if reservable else None
        reserved = held is not None
        if held is not None:
            tree, tmpdir = held.tree, held.tmpdir
            plan_confinement, protections = held.confinement, held.protections
            if tmpdir is not None and uid is not None and gid is not None:
                os.chown(tmpdir, uid, gid)
        else:
            tmpdir = _private_tmpdir(uid, gid) if confined else None
            if plan_request is not None:
                plan_confinement, protections = plan(
                    plan_request, workspace=workdir, tmpdir=tmpdir, drops_to_uid=uid is not None
                )
        if tmpdir is not None:
            env = {**env, "TMPDIR": tmpdir}
        proxy_ready = proxied and plan_confinement is not None and plan_confinement.loopback_up
        if proxy_ready:
            env = {**env, **proxy_environment()}
        home = env.get("HOME")
        if (
            plan_confinement is not None
            and plan_confinement.landlock_fs
            and tmpdir is not None
            and home is not None
            and not _reachable(home, plan_confinement.read_paths + plan_confinement.write_paths)
        ):
            # A HOME the command cannot read breaks programs that read their
            # configuration there (git dies on EACCES): give it an empty private one.
            env = {**env, "HOME": tmpdir}
            protections = {**(protections or {}), "home": f"active: HOME={home} is out "
                           "of the command's reach; it is the private TMPDIR instead"}  # fmt: skip
        setup = ChildSetup(rlimits=rlimits, uid=uid, gid=gid, confinement=plan_confinement)
        if tree is None:
            tree = open_tree(mechanism, limit_processes=limited, shell=shell,
                             own_pid_namespace=own_pidns)  # fmt: skip
        argv, setup = tree.command([shell, "--norc", "--noprofile", "-c", command], setup)
        # Placement must precede an identity change, which a prologue running in the
        # unprivileged shell cannot do, and Landlock, after which the cgroup files are
        # out of reach: then the preexec_fn does everything. Otherwise the cgroup
        # placement stays in the builtin prologue and a preexec_fn, if the rlimits go
        # that way, only calls setrlimit: every line of Python run in the forked child
        # touches copy-on-write pages of the agent, which is what makes a preexec_fn
        # expensive, so it does as little as possible.
        prologue: ChildSetup | None
        child_setup: ChildSetup | None
        if uid is not None or setup.confinement is not None or reserved:
            child_setup, prologue = setup, None
        elif rlimits and rlimits_via == "preexec_fn":
            child_setup = replace(setup, cgroup_procs=())
            prologue = replace(setup, rlimits=())
        else:
            child_setup, prologue = None, setup
        if limits.max_child_processes is not None:
            # pids.max also counts the shell itself.
            tree.limit_processes(
                limits.max_child_processes + 1, placed_before_exec=prologue is None
            )
        elif reserved:
            tree.unlimit_processes()
        if prologue is not None:
            # The command string is always last: wrappers only prepend.
            argv[-1] = shell_prologue(prologue, posix_mode=bash_posix_mode(env)) + argv[-1]
        # A zygote given the command straight from us may find that what it was
        # prepared from changed since (/etc, a workspace made again): it runs nothing
        # and says so, and the command goes through the spawner instead. Not with
        # descriptors to pass (the subreaper's), which are ours only once.
        offer = not tree.pass_fds and not proxy_ready
        # Starting the spawner (the first run, or after it died) waits ~100-250 ms for
        # it to say it is ready: in a thread, not on the caller's event loop.
        await _spawner_started()
        for attempt in (1, 2):
            channel: socket.socket | None = None
            spawn_setup, extra_fds = child_setup, tuple[int, ...]()
            if proxy_ready and child_setup is not None and child_setup.confinement is not None:
                # The child hands the proxy's listeners over from inside its namespace.
                channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                # A passed descriptor keeps its number in the child, where the spawner's
                # own descriptors (the prepared Landlock rules' paths among them) hold
                # the low numbers: a number from the top of the range clashes with none.
                high = high_descriptor(theirs.fileno())
                theirs.close()
                extra_fds = (high,)
                spawn_setup = replace(child_setup, confinement=replace(
                    child_setup.confinement, proxy_ports=(HTTP_PORT, SOCKS_PORT),
                    proxy_channel=high))  # fmt: skip
            try:
                try:
                    process = BashProcess.spawn(
                        argv, cwd=workdir, env=env, setup=spawn_setup,
                        pass_fds=(*tree.pass_fds, *extra_fds),
                        kill_files=tree.kill_files, use_offer=offer and attempt == 1,
                    )
                except BaseException:
                    if channel is not None:
                        channel.close()
                    raise
            except SpawnerError as e:
                raise SandboxError(
                    f"{e}: moving it into its cgroups, setting rlimits, confining it or "
                    "dropping privileges failed; run `sandbox doctor` to see what works "
                    "here"
                ) from None
            finally:
                tree.spawned()
                if extra_fds:
                    os.close(extra_fds[0])
            if channel is not None:
                assert network is not None
                with channel:
                    try:
                        listeners = await receive_listeners(channel, 2, _HANDOVER_SECONDS)
                    except OSError:
                        listeners = []  # its set-up failed first: setup_error says why
                if listeners:
                    # The proxy's loop is another thread's: wait for it off this loop.
                    attachment = await anyio.to_thread.run_sync(functools.partial(
                        shared_proxy().attach, listeners, network.allowlist,
                        command=command, ask=network.ask,
                        ask_loop=asyncio.get_running_loop()))  # fmt: skip
            out, err, returncode, timed_out, killed = await _supervise(
                process, tree, timeout, max_output_bytes
            )
            if attachment is not None:
                network_report = await anyio.to_thread.run_sync(
                    shared_proxy().detach, attachment)
                attachment = None
            setup_error = process.setup_error()
            if setup_error is None or STALE not in setup_error or attempt == 2:
                break
            try:
                process.reap()
            finally:
                process.close()
                process = None
    finally:
        with anyio.CancelScope(shield=True):
            if attachment is not None:  # cancelled while it ran: its connections go too
                await anyio.to_thread.run_sync(shared_proxy().detach, attachment)
            try:
                if process is not None:
                    assert tree is not None  # a process is spawned into a tree
                    if not process.has_exited():
                        await process.wait_started()
                        await tree.kill(process)
                        with anyio.move_on_after(KILL_GRACE):
                            await process.wait_exited(check_spawner=False)
                    try:
                        process.reap()
                    finally:
                        process.close()
            finally:
                # Also when the spawner is gone (reap raised): nothing may be left.
                if tree is not None:
                    await tree.aclose()
                if tmpdir is not None:
                    await _remove_tmpdir(tmpdir)
    if setup_error is not None:
        raise SandboxError(
            f"the spawner could not set up the child process: {setup_error}: moving it "
            "into its cgroups, setting rlimits, confining it or dropping privileges "
            "failed; run `sandbox doctor` to see what works here"
        )

    if reservable and reservations.reserve_ahead:
        _reserve_soon(signature, plan_request)
    if limits.max_child_processes is None:
        nproc = None
    elif tree.limits_processes:
        nproc = "pids-cgroup"
    elif uid is not None:
        nproc = f"setuid:{uid}"
    elif (plan_confinement is not None and plan_confinement.new_userns
          and plan_confinement.private_proc):  # fmt: skip
        # RLIMIT_NPROC counts per user namespace and uid (Linux 5.14+ ucounts): in the
        # command's own, it counts the command's processes only.
        nproc = "rlimit-userns"
    elif os.geteuid() != 0:
        nproc = "rlimit"
    else:
        nproc = "rlimit-only(ineffective as root)"
    return ProcessResult(
        stdout=await decoded(out),
        stderr=await decoded(err),
        returncode=returncode,
        timed_out=timed_out,
        truncated=bool(out.dropped or err.dropped),
        stdout_bytes_dropped=out.dropped,
        stderr_bytes_dropped=err.dropped,
        duration_ms=(time.perf_counter() - started) * 1000,
        containment=mechanism,
        killed_processes=killed,
        nproc_enforcement=nproc,
        protections=protections,
        network=network_report if proxied else None,
    )


async def _supervise(
    process: BashProcess,
    tree: Tree,
    timeout: float | None,  # noqa: ASYNC109 - see run_bash
    max_output_bytes: int,
) -> tuple[BoundedCapture, BoundedCapture, int | None, bool, int]:
    out = BoundedCapture(max_output_bytes)
    err = BoundedCapture(max_output_bytes)
    out_done, err_done = anyio.Event(), anyio.Event()
    lost: SpawnerError | None = None
    async with anyio.create_task_group() as readers:
        readers.start_soon(_pump_until_eof, process.stdout_fd, out, out_done)
        readers.start_soon(_pump_until_eof, process.stderr_fd, err, err_done)
        try:
            with anyio.move_on_after(timeout):
                await process.wait_exited()
            exited, killed, returncode = await _end(process, tree, out_done, err_done)
        except SpawnerError as e:
            # The spawner died: raised below, plainly (not in an exception group);
            # run_bash's cleanup kills what is left.
            lost = e
        if not (out_done.is_set() and err_done.is_set()):
            # (Not when both are at end of file: anyio's cancel() formats the repr of
            # the current task for its reason, ~50 µs a run.)
            readers.cancel_scope.cancel()
    if lost is not None:
        raise lost
    for fd, capture, done in (
        (process.stdout_fd, out, out_done),
        (process.stderr_fd, err, err_done),
    ):
        if not done.is_set():
            drain_buffered(fd, capture)
    return out, err, returncode, not exited, killed


async def _end(process: BashProcess, tree: Tree, out_done: anyio.Event,
               err_done: anyio.Event) -> tuple[bool, int, int | None]:
    """Once the shell has exited or timed out: kill the tree, reap, wait briefly for the
    readers to reach end of file. Returns (exited, killed, returncode)."""
    exited = process.has_exited()
    if not exited:
        await process.wait_started()
    # Also after a normal exit: background jobs and escapes die with the shell.
    killed = await tree.kill(process)
    if not exited:
        with anyio.move_on_after(KILL_GRACE):
            await process.wait_exited(check_spawner=False)
    returncode = process.reap()
    with anyio.move_on_after(DRAIN_GRACE):
        await out_done.wait()
        await err_done.wait()
    return exited, killed, returncode
