"""The spawner process's loop (see `sandbox.bash.spawner`). Loaded by path under
``python -I -S``: it imports only the stdlib, `sandbox.bash.child` and the message
framing of `sandbox.bash.spawner`."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from typing import Any

from sandbox.bash.child import preexec_fn
from sandbox.bash.spawner import _recv, _send


class _Job:
    def __init__(self, pid: int, reply: socket.socket, kill_files: list[str]) -> None:
        self.pid = pid
        self.reply = reply
        self.kill_files = kill_files


def _child(request: dict[str, Any], out_w: int, err_w: int, passed: list[int],
           errpipe_w: int, preexec: Any) -> None:
    """In the forked child: descriptors, session, setup, exec. Never returns."""
    try:
        # What CPython's subprocess restores (restore_signals): Python ignores SIGPIPE
        # and SIGXFSZ, and this process ignores SIGINT and SIGHUP; the command must not
        # inherit any of that (a write past RLIMIT_FSIZE must kill it).
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # Inherited descriptors go back to the numbers the command line names: first
        # out of the way (no clash with a target), then into place.
        high = [os.dup(fd) for fd in passed]
        keep = {0, 1, 2, errpipe_w}
        for target, fd in zip(request["pass_fds"], high, strict=True):
            os.dup2(fd, target, inheritable=True)
            keep.add(target)
        os.chdir(request["cwd"])
        # As CPython's subprocess does: the setup runs before the other descriptors are
        # closed (the prepared Landlock ruleset is one of them).
        if preexec is not None:
            preexec()
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        argv = request["argv"]
        os.execve(argv[0], argv, request["env"])
    except BaseException as e:
        try:
            os.write(errpipe_w, f"{type(e).__name__}: {e}".encode()[:4000])
        finally:
            os._exit(127)


def _start(request: dict[str, Any], fds: list[int]) -> tuple[int, str | None]:
    out_w, err_w, passed = fds[0], fds[1], fds[3:]
    setup = request["setup"]
    preexec = preexec_fn(setup) if setup is not None else None
    errpipe_r, errpipe_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(errpipe_r)
        _child(request, out_w, err_w, passed, errpipe_w, preexec)
    os.close(errpipe_w)
    chunks = []
    while chunk := os.read(errpipe_r, 4096):
        chunks.append(chunk)
    os.close(errpipe_r)
    if chunks:
        os.waitpid(pid, 0)
        return -1, b"".join(chunks).decode("utf-8", "replace")
    return pid, None


def _kill(job: _Job) -> None:
    for path in job.kill_files:
        try:
            with open(path, "w") as f:
                f.write("1")
        except OSError:
            pass
    try:
        os.kill(job.pid, signal.SIGTERM)  # a subreaper or unshare takes its tree down
    except ProcessLookupError:
        return


def _finish(jobs: dict[int, _Job]) -> None:
    """Kill every tree still running, give SIGTERM handlers 50 ms, then SIGKILL."""
    for job in jobs.values():
        _kill(job)
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:
        alive = False
        for job in jobs.values():
            try:
                if os.waitpid(job.pid, os.WNOHANG) == (0, 0):
                    alive = True
            except ChildProcessError:
                pass
        if not alive:
            break
        time.sleep(0.002)
    for job in jobs.values():
        for kill in (os.killpg, os.kill):
            try:
                kill(job.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for job in jobs.values():
        try:
            os.waitpid(job.pid, 0)
        except ChildProcessError:
            pass


def serve(fd: int, agent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    control = socket.socket(fileno=fd)
    try:
        agent_fd = os.pidfd_open(agent)
    except ProcessLookupError:
        return
    _send(control, ("ready",))
    jobs: dict[int, _Job] = {}
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    poller.register(agent_fd, select.POLLIN)
    try:
        while True:
            for ready, _event in poller.poll():
                if ready == agent_fd:
                    return  # the agent died: finally kills everything
                if ready == control.fileno():
                    try:
                        request, fds = _recv(control)
                    except (EOFError, OSError):
                        return  # the agent closed us: it is exiting
                    reply = socket.socket(fileno=fds[2])
                    try:
                        pid, error = _start(request, fds)
                    finally:
                        for extra in (fds[0], fds[1], *fds[3:]):
                            os.close(extra)
                    if error is not None:
                        _send(reply, ("error", f"could not set up the child process: {error}"))
                        reply.close()
                        continue
                    job = _Job(pid, reply, request["kill_files"])
                    pidfd = os.pidfd_open(pid)
                    try:
                        _send(reply, ("started", pid), [pidfd])
                    except OSError:
                        pass
                    finally:
                        os.close(pidfd)
                    jobs[reply.fileno()] = job
                    poller.register(reply.fileno(), select.POLLIN)
                    continue
                found = jobs.get(ready)
                if found is None:
                    continue
                job = found
                try:
                    message, passed = _recv(job.reply)
                    for leftover in passed:
                        os.close(leftover)
                except (EOFError, OSError):
                    message = None
                if message != ("reap",):
                    _kill(job)  # the agent let go of the command without reaping it
                    _finish({job.pid: job})
                    status = None
                else:
                    _, status = os.waitpid(job.pid, 0)
                poller.unregister(ready)
                del jobs[ready]
                if status is not None:
                    try:
                        _send(job.reply, ("status", status))
                    except OSError:
                        pass
                job.reply.close()
    finally:
        _finish(jobs)
        sys.exit(0)
