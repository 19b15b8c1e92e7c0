"""What happens in the child before the user's command: cgroups, rlimits, identity,
OS confinement.

Two ways to do it, chosen per run by the process layer:

- A **shell prologue** (`shell_prologue`): builtin-only bash code put in front of the
  command. It needs no `preexec_fn`, so CPython spawns with vfork, whose cost does not
  depend on the size of the agent process. Measured here: `bash -c true` takes 1.1 ms
  with vfork, 2.0 ms with any `preexec_fn` from a small interpreter, and 7.7 ms from a
  500 MiB one (fork copies the page tables). `preexec_fn` is also documented as unsafe
  in a process with threads, which agents usually have.
- A **preexec_fn** (`preexec_fn`), when the command must run as another user (the
  cgroup writes need root, so they must happen before the identity changes, which a
  prologue in the unprivileged shell cannot do) and whenever the run is confined
  (Landlock, namespaces, capabilities and seccomp can only be applied between fork and
  exec; once Landlock applies, the cgroup files are out of reach, so placement moves
  here too). Everything it needs is plain data in `ChildSetup`, so a spawner process
  can run the very same function in its own fork.

Both set rlimits as soft = hard, and RLIMIT_CORE to 0 whenever anything is set. Without
confinement neither stops a root command from raising its own limits again or leaving
its cgroup; the confinement's dropped capabilities and Landlock rules do (SECURITY.md).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import resource
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sandbox.bash.linux.apply import Prepared, prepare
from sandbox.bash.linux.confinement import Confinement, cached_hash, state_without_hash
from sandbox.bash.linux.namespaces import initial_user_namespace

__all__ = ["PROLOGUE_FAILED", "ChildSetup", "needs_pid_namespace", "preexec_fn",
           "shell_prologue", "spawn_key", "zygote_preparation", "zygote_request_steps"]

# Exit status of the shell when its prologue failed: it printed why and ran nothing.
PROLOGUE_FAILED = 125

# bash `ulimit` options per resource, and the unit of its values. -c and -f count
# 1024-byte blocks, or 512-byte blocks when bash runs in POSIX mode.
_ULIMIT: dict[int, tuple[str, str]] = {
    resource.RLIMIT_AS: ("-v", "KiB"),
    resource.RLIMIT_FSIZE: ("-f", "blocks"),
    resource.RLIMIT_NPROC: ("-u", "count"),
    resource.RLIMIT_CORE: ("-c", "blocks"),
}


@dataclass(frozen=True)
class ChildSetup:
    """What must happen in the child before the user's command runs.

    cgroup_procs: cgroup.procs files the child writes its own pid into (placement).
    rlimits: (resource, value) pairs, set as both soft and hard limit.
    uid/gid: the identity to drop to, with no supplementary groups.
    confinement: the OS confinement (Landlock, namespaces, capabilities, seccomp),
    applied by `preexec_fn` only: a shell prologue cannot.
    """

    cgroup_procs: tuple[str, ...] = ()
    rlimits: tuple[tuple[int, int], ...] = ()
    uid: int | None = None
    gid: int | None = None
    confinement: Confinement | None = None

    # The key of a zygote, looked up several times a run: hashed once (see there).
    def __hash__(self) -> int:
        return cached_hash(self)

    def __getstate__(self) -> dict[str, object]:
        return state_without_hash(self)


def bash_posix_mode(env: Mapping[str, str]) -> bool:
    """Whether bash will start in POSIX mode with this environment."""
    return "POSIXLY_CORRECT" in env or "POSIX_PEDANTIC" in env


def shell_prologue(setup: ChildSetup, *, posix_mode: bool = False) -> str:
    """Bash code that applies `setup` (not the identity) to the shell itself, before
    any user code runs.

    Why this is race-free: until the prologue has run, the only process of the run is
    the shell, which has not forked. The prologue uses builtins only (`builtin echo`
    with a redirection, `builtin ulimit`: no fork), and the user's text follows on the
    same line after `;`, so a syntax error anywhere in that first line stops bash before
    it runs anything at all. What bash could run *before* it is code it runs at
    startup: `BASH_ENV`, exported functions (`BASH_FUNC_*`, which could also redefine
    `builtin`), `SHELLOPTS` (xtrace expanding `PS4`) or `BASHOPTS`, and libraries the
    loader is told to load (`LD_PRELOAD`, `LD_AUDIT`, `LD_LIBRARY_PATH`, any `LD_*`);
    the process layer refuses environments that set any of them. `>|` writes even
    under `noclobber`.

    Limits are rounded down to bash's units (KiB for memory, 1 KiB or, in POSIX mode,
    512-byte blocks for file size): never looser than asked. If any step fails, bash
    prints why and exits with status 125 before the command.
    """
    steps = [
        f'builtin echo "$$" >| {shlex.quote(path)} || builtin exit {PROLOGUE_FAILED}; '
        for path in setup.cgroup_procs
    ]
    if setup.rlimits:
        block = 512 if posix_mode else 1024
        options = ["-c", "0"]
        for res, value in setup.rlimits:
            flag, unit = _ULIMIT[res]
            amount = (
                value // 1024 if unit == "KiB" else value // block if unit == "blocks" else value
            )
            options += [flag, str(amount)]
        steps.append(f"builtin ulimit {' '.join(options)} || builtin exit {PROLOGUE_FAILED}; ")
    return "".join(steps)


def needs_pid_namespace(setup: ChildSetup) -> bool:
    """Whether the process that forks must do so inside `confinement.pid_namespace()`
    (the confinement asks for a private /proc)."""
    return setup.confinement is not None and setup.confinement.private_proc


def preexec_fn(setup: ChildSetup) -> Callable[[], None]:
    """The function run in the forked child before exec.

    Called in the process that will fork (the agent, or a spawner given the same
    `ChildSetup`): the confinement is prepared here, before the fork, so that the
    returned function only makes system calls. Order matters, each step needing a
    privilege that a later one removes:

    1. cgroups: the child must be contained before anything else can fail or fork, and
       the cgroup files are unreachable once Landlock applies;
    2. rlimits (soft = hard; RLIMIT_CORE 0);
    3. namespaces (network; a user namespace around it for an unprivileged agent; a
       mount namespace with a fresh /proc when the child is the first process of its
       own PID namespace, see `needs_pid_namespace`);
    4. the capability bounding set is emptied (needs CAP_SETPCAP);
    5. the identity change (needs CAP_SETUID/CAP_SETGID);
    6. every remaining capability cleared, ambient included;
    7. no_new_privs, Landlock, then seccomp last (it denies `unshare`, used in 3).
    """
    prepared = prepare(setup.confinement) if setup.confinement is not None else None
    return _steps(setup, prepared, namespaces=True)


def spawn_key(setup: ChildSetup) -> ChildSetup:
    """What a child forked ahead of time (a zygote) must have been prepared for, to
    serve `setup`: all of it but the rlimits, which it sets once the request came
    (lowering a limit needs no privilege)."""
    return dataclasses.replace(setup, rlimits=())


def zygote_preparation(key: ChildSetup) -> tuple[Prepared | None, Callable[[], None]]:
    """For a zygote prepared for `key` (a `spawn_key`): what to prepare before its
    fork, and what it runs right after, ahead of its request: the whole setup
    `preexec_fn` would run (cgroups, namespaces, read-only mounts, capabilities,
    Landlock, seccomp) but the rlimits, and but the identity change when there is one
    (`zygote_request_steps`): a zygote waiting as that uid would count against its
    RLIMIT_NPROC and could be signalled by its other processes."""
    prepared = prepare(key.confinement) if key.confinement is not None else None
    if prepared is not None:
        prepared.ahead = True  # checked again at its request: protected.still_protected
    return prepared, _steps(key, prepared, namespaces=True, identity_later=True,
                            yield_cpu=_can_raise_priority())  # fmt: skip


_CAP_SYS_NICE = 23


@functools.cache
def _can_raise_priority() -> bool:
    """Whether this process holds CAP_SYS_NICE (root in a container may not) in the
    first user namespace (root of a rootless container holds it in its own only, which
    does not let it raise a priority): what a zygote needs to give back the priority it
    lowered."""
    if not initial_user_namespace():
        return False
    try:
        with open("/proc/self/status") as f:
            caps = next(line for line in f if line.startswith("CapEff:"))
        return bool(int(caps.split()[1], 16) >> _CAP_SYS_NICE & 1)
    except (OSError, StopIteration, ValueError):
        return False


def zygote_request_steps(setup: ChildSetup, prepared: Prepared | None,
                         rlimits: tuple[tuple[int, int], ...], *,
                         protected_checked: bool = False) -> None:  # fmt: skip
    """In a zygote, once a request came: the run's rlimits (soft = hard), then the
    identity change and the capabilities it kept for it, as `preexec_fn` orders them.
    Raises OSError when a limit is above the zygote's hard limit, or when a protected
    path is no longer read-only in its mount namespace (sandbox/bash/linux/protected.py;
    `protected_checked`: the caller has just checked that, with `stale_in_zygote`)."""
    stale = prepared.protected_stale() if prepared is not None and not (
        protected_checked) else ""  # fmt: skip
    if stale:
        raise OSError(stale)
    for res, value in rlimits:
        resource.setrlimit(res, (value, value))
    if setup.uid is not None and setup.gid is not None:
        _become(setup.uid, setup.gid)
        if prepared is not None:
            prepared.drop_capabilities()


def _become(uid: int, gid: int) -> None:
    """The identity change: no supplementary groups, then gid, then uid."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def _steps(setup: ChildSetup, prepared: Prepared | None, *, namespaces: bool,
           identity_later: bool = False, yield_cpu: bool = False) -> Callable[[], None]:  # fmt: skip
    cgroup_procs = setup.cgroup_procs
    rlimits = ((resource.RLIMIT_CORE, 0), *setup.rlimits)
    uid, gid = setup.uid, setup.gid
    # A zygote changes identity once its request came (zygote_request_steps): it keeps
    # CAP_SETUID/CAP_SETGID until then, under Landlock and seccomp already.
    later = identity_later and uid is not None

    def preexec() -> None:
        if yield_cpu:
            # A zygote sets itself up while commands may be running: at a lower
            # priority, given back (CAP_SYS_NICE, as root) before its capabilities go.
            priority = os.getpriority(os.PRIO_PROCESS, 0)
            os.setpriority(os.PRIO_PROCESS, 0, min(priority + 10, 19))
        pid = b"%d" % os.getpid()
        for path in cgroup_procs:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        for res, value in rlimits:
            resource.setrlimit(res, (value, value))
        if prepared is not None:
            if namespaces:
                prepared.apply_namespaces()
            prepared.lock_mounts()  # after the cgroup files are written
            prepared.drop_bounding_set()
        if uid is not None and gid is not None and not later:
            _become(uid, gid)
        if yield_cpu:
            os.setpriority(os.PRIO_PROCESS, 0, priority)
        if prepared is not None:
            if not later:
                prepared.drop_capabilities()
            prepared.restrict()

    return preexec
