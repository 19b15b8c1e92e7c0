"""Run one command as a child subreaper, and kill everything it leaves behind.

Usage (by sandbox.bash.run.containment.SubreaperTree, never by hand):

    python -I -S _subreaper.py REPORT_FD PARENT_PID UID GID RLIMITS [CGROUP_PROCS...] -- ARGV...

UID and GID are "-" to keep ours; RLIMITS is "-" or "RESOURCE=VALUE,..."; each
CGROUP_PROCS is a cgroup.procs file. This process marks itself PR_SET_CHILD_SUBREAPER,
forks, and the child enters the cgroups, sets the rlimits (soft = hard, and
RLIMIT_CORE=0), drops to UID/GID with no supplementary groups, and execs ARGV.

Every orphan below it (a `setsid -f` daemon, a double fork) is reparented here rather
than to init. When the
child exits, or when SIGTERM arrives (the caller's timeout), or when the caller dies
(PR_SET_PDEATHSIG), it SIGKILLs all its descendants until none is left, writes how many
it killed (besides the child) to REPORT_FD, and exits with the child's status: a child
killed by signal N makes this process die of signal N too.

Standard library only, started with -I -S (it must not depend on the environment), and
no json: its import alone would add 5 ms to every run.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs 3.5 ms to import, on every run
    from typing import NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
WATCHED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> None:
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def _live_descendants() -> list[int]:
    children = _children_map()
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _reap(main_pid: int, status: int | None) -> int | None:
    """Reap every exited child; returns the main child's status once known."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == main_pid:
            status = st


def _kill_all(main_pid: int, status: int | None) -> tuple[int, int]:
    killed: set[int] = set()
    quiet = 0
    while True:
        victims = _live_descendants()
        if not victims:
            # An orphan in transit (its parent exiting, the kernel handing it to us)
            # can be missing from every children list during one scan: look again,
            # briefly, before believing the tree is empty.
            quiet += 1
            if quiet >= 3:
                break
            signal.sigtimedwait({signal.SIGCHLD}, 0.002)
            status = _reap(main_pid, status)
            continue
        quiet = 0
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed.update(victims)
        # Killed processes become our zombies (we are their subreaper or parent);
        # reap them, then look again: a fork that raced the kill shows up next pass.
        signal.sigtimedwait({signal.SIGCHLD}, 0.001)
        status = _reap(main_pid, status)
    while status is None:
        signal.sigtimedwait({signal.SIGCHLD}, 0.01)
        status = _reap(main_pid, status)
    _reap(main_pid, status)
    killed.discard(main_pid)
    return len(killed), status


def _exec_child(config: list[str], argv: list[str]) -> NoReturn:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        uid, gid, rlimits, *cgroup_procs = config
        pid = str(os.getpid()).encode()
        for path in cgroup_procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if rlimits != "-":
            for pair in rlimits.split(","):
                res, value = pair.split("=")
                resource.setrlimit(int(res), (int(value), int(value)))
        if uid != "-":
            os.setgroups([])
            os.setgid(int(gid))
            os.setuid(int(uid))
        os.execv(argv[0], argv)
    except BaseException as e:
        os.write(2, f"sandbox supervisor: cannot run {argv[0]}: {e}\n".encode())
    os._exit(127)


def main() -> None:
    separator = sys.argv.index("--")
    report_fd, parent = int(sys.argv[1]), int(sys.argv[2])
    config = sys.argv[3:separator]
    argv = sys.argv[separator + 1 :]
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
    # Block the signals we wait for before anything can send them, then ask for one if
    # the caller dies. It may have died already, before the prctl: check.
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _prctl(libc, PR_SET_PDEATHSIG, signal.SIGTERM)
    # 0: our parent is outside our PID namespace (a confined run's private /proc); the
    # parent-death signal the spawner's child set before exec covered the gap then.
    if os.getppid() not in (parent, 0):
        os.write(2, f"sandbox supervisor: started by {os.getppid()}, not {parent}\n".encode())
        sys.exit(1)

    main_pid = os.fork()
    if main_pid == 0:
        _exec_child(config, argv)

    # Stop holding the caller's output pipes: they must reach EOF as soon as the tree is
    # gone, not when this process exits. Keep a copy of stderr for our own errors.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)

    status = None
    while status is None:
        info = signal.sigwaitinfo(WATCHED)
        status = _reap(main_pid, status)
        if info.si_signo != signal.SIGCHLD:
            break
    killed, status = _kill_all(main_pid, status)
    try:
        os.write(report_fd, f"{killed}\n".encode())
    except OSError:
        pass
    os.close(report_fd)

    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child's crash, not ours
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot be handled anyway
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
