"""The spawner process's loop (see `sandbox.bash.linux.spawner`). Run under
``python -I -S``: it imports only the stdlib and the Linux layer (`sandbox.bash.linux`:
the child's set-up and the message framing of `sandbox.bash.linux.spawner`)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import pickle
import select
import signal
import socket
import sys
import time
from typing import Any

from sandbox.bash.linux.child import (
    needs_pid_namespace,
    preexec_fn,
    spawn_key,
    zygote_preparation,
    zygote_request_steps,
)
from sandbox.bash.linux.namespaces import PidNamespaceLost, fork_in_pid_namespace
from sandbox.bash.linux.spawner import RECEIVED, STALE, _recv, _send, remove_tree

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
# This process's own pidfd, readable once it has exited: inherited by each child, which
# checks it after PR_SET_PDEATHSIG (its parent may be outside its PID namespace, where
# getppid() says 0 whoever the parent is).
_SELF = os.pidfd_open(os.getpid())
# Above every descriptor the child can hold (closerange uses close_range(2)).
_MAX_FD = 1 << 30


class _Job:
    def __init__(self, pid: int, reply: socket.socket, kill_files: list[str],
                 started_r: int, held: list[int], offered: _Zygote | None = None) -> None:
        self.pid = pid
        self.held = held  # closed once the child is reaped
        # A zygote offered to the agent: its key until the agent says it took it (and
        # sends kill_files and the "started" pipe); None for a command we started.
        self.offered: Any = offered.key if offered is not None else None
        self.taken = offered is None
        # The zygote waits on this socket too: it stays open while the job lives.
        self.zygote_sock = offered.sock if offered is not None else None
        self.reply = reply
        self.kill_files = kill_files
        # The agent's "started" pipe: end of file once the child has exec'd (and so has
        # entered its cgroups) or died.
        self.started_r = started_r
        # The run's private TMPDIR: removed by the agent after the run, or by us if the
        # agent is gone before it could.
        self.tmpdirs: tuple[str, ...] = ()

    def close(self) -> None:
        self.reply.close()
        if self.zygote_sock is not None:
            self.zygote_sock.close()
        for fd in self.held:
            os.close(fd)
        self.held = []
        if self.started_r >= 0:
            os.close(self.started_r)
            self.started_r = -1


def _die_with_spawner() -> None:
    """What CPython's subprocess restores (restore_signals): Python ignores SIGPIPE and
    SIGXFSZ, and this process ignores SIGINT and SIGHUP; the command must not inherit
    any of that (a write past RLIMIT_FSIZE must kill it). Then: die with the spawner (a
    command in flight when it dies is lost: the agent says so); it may have died
    already, before the prctl."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if select.select([_SELF], [], [], 0)[0]:
        os._exit(127)


def _child(request: dict[str, Any], out_w: int, err_w: int, passed: list[int],
           errpipe_w: int, preexec: Any, zygote: bool = False) -> None:
    """In the forked child: descriptors, session, setup, exec. Never returns."""
    try:
        # Received by SCM_RIGHTS, so inheritable: it must close at exec, which is how
        # the agent learns that the child has exec'd.
        os.set_inheritable(errpipe_w, False)
        if not zygote:
            _die_with_spawner()
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
        low = 0
        for fd in sorted(keep):
            if low < fd:  # closerange(n, n) closes everything from n on (CPython 3.11)
                os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, _MAX_FD)
        argv = request["argv"]
        os.execve(argv[0], argv, request["env"])
    except BaseException as e:
        try:
            os.write(errpipe_w, f"{type(e).__name__}: {e}".encode()[:4000])
        finally:
            os._exit(127)


class _Zygote:
    """A child forked ahead of its request, already in the cgroups of the run it will
    be and with its namespaces made (a PID namespace, the network, a mount namespace
    with a fresh /proc): forking, those namespaces and the cgroup moves cost ~1-2 ms of
    CPU, and a cgroup move after some idle time waits ~10-20 ms for an RCU grace
    period (the kernel's cgroup_threadgroup_rwsem); all of it is paid here while the
    agent waits for its model, not while it waits for a command. It serves one
    request, for the setup it was prepared for (`key`, a `child.spawn_key`: the cgroups,
    the private TMPDIR and the identity of a run the agent reserved ahead, see
    `process.run_bash`), then is the command: by then it has set itself up entirely,
    confinement included, but for the rlimits."""

    def __init__(self, key: Any) -> None:
        self.key = key
        self.placement = frozenset(key.cgroup_procs)
        self.prepared, ahead = zygote_preparation(key)
        confinement = key.confinement
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The agent's way in: offered to it once the zygote is ready, so that its next
        # command goes straight to the zygote, without a round trip through us.
        agents, requests = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = _fork(confinement)
            if pid == 0:
                ours.close()
                agents.close()
                _zygote_main(theirs, requests, ahead, self.prepared, key)
        except BaseException:
            ours.close()
            agents.close()
            raise
        finally:
            theirs.close()
            requests.close()
        self.pid = pid
        self.sock = ours
        self.agents: socket.socket | None = agents
        self.pidfd = os.pidfd_open(pid)
        self.held: list[int] = []  # its mount namespace, once it said it is ready
        self.ready = False
        self.token: Any = None  # what the agent knows its key by (Spawner.prepare)

    def usable_for(self, key: Any) -> bool:
        if key != self.key or select.select([self.pidfd], [], [], 0)[0]:
            return False
        return self.prepared is None or self.prepared.still_fresh()

    def shares_cgroups(self, key: Any) -> bool:
        """Whether a run for `key` would be placed in a cgroup this zygote is in."""
        return _shares_cgroups(self.placement, key)

    def discard(self) -> None:
        self.sock.close()  # it exits at end of file; SIGKILL in case it is stuck
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(self.pid, 0)
        self.close()

    def close(self) -> None:
        self.sock.close()
        self.release()

    def release(self) -> None:
        """Close our copies of its descriptors but its socket to us (an offered
        zygote, watched as a job, keeps it) and its ruleset."""
        if self.agents is not None:
            self.agents.close()
            self.agents = None
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self.prepared is not None:
            self.prepared.close()  # our copy of its ruleset
            self.prepared = None


def _zygote_main(sock: socket.socket, requests: socket.socket, ahead: Any,
                 prepared: Any, key: Any) -> None:  # fmt: skip
    """In a zygote: its run's whole setup now but the rlimits, then wait for the
    request (from us, or straight from the agent) and become the command. Never
    returns."""
    started_w = -1
    try:
        gc.disable()  # a short life, few objects: no page copied for a collection
        _die_with_spawner()
        ahead()
        # What we inherited from the spawner and do not need: its other jobs' sockets
        # and the mount namespaces it holds for them (closing the last reference to
        # one tears it down, which waits for an RCU grace period: not at exec time).
        keep = {0, 1, 2, sock.fileno(), requests.fileno(), _SELF}
        if prepared is not None:
            keep.update(prepared.zygote_fds())
        low = 0
        for fd in sorted(keep):
            if low < fd:
                os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, _MAX_FD)
        if prepared is not None:
            # Run the request's check once now: its first run in this forked process
            # copies the pages it touches (copy-on-write), which would otherwise
            # happen while the agent waits. It has no effect but its answer.
            prepared.stale_in_zygote()
        # The spawner keeps our mount namespace alive past our exit: tearing it down
        # (unmounting /proc and the covers waits for an RCU grace period) would
        # otherwise delay our exit, which the agent waits for.
        if prepared is not None and prepared.confinement.private_proc:
            mnt = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            _send(sock, ("ready",), [mnt])
            os.close(mnt)
        else:
            _send(sock, ("ready",))
        try:
            ready, _, _ = select.select([sock, requests], [], [])
            # Ours first: handing a request over, we close the agent's way in.
            source = sock if sock in ready else requests
            request, fds = _recv(source)
        except (EOFError, OSError):
            os._exit(0)  # discarded (by us, or by the agent)
        out_w, err_w, started_w, passed = fds[0], fds[1], fds[2], fds[3:]
        if source is requests:
            os.write(started_w, RECEIVED)
        if source is requests and prepared is not None:
            # Straight from the agent: check here what we would have checked before
            # handing it over (nothing it was prepared from may have changed since).
            stale = prepared.stale_in_zygote()
            if stale:
                raise OSError(f"{STALE}: {stale}")
        if source is requests:
            rlimits = request["rlimits"]  # the agent matched our key with its setup
        else:
            setup = request["setup"]
            if setup is None or spawn_key(setup) != key:
                raise OSError(f"{STALE}: prepared for another setup")
            rlimits = setup.rlimits
        try:
            # Straight from the agent, the protected paths were checked just above.
            zygote_request_steps(key, prepared, rlimits,
                                 protected_checked=source is requests)  # fmt: skip
        except (OSError, ValueError) as e:
            raise OSError(f"{STALE}: the prepared child cannot finish its setup: {e}") from e
    except BaseException as e:
        why = f"{type(e).__name__}: {e}"[:4000]
        if started_w >= 0:
            os.write(started_w, why.encode())
        else:
            with contextlib.suppress(OSError):
                _send(sock, ("failed", why))  # its setup, before any request
        os._exit(127)
    _child(request, out_w, err_w, passed, started_w, None, zygote=True)


def _start(request: dict[str, Any], fds: list[int]) -> tuple[int, str | None]:
    """Fork the child; returns its pid at once (it sets itself up and execs on its own,
    reporting a failure on the "started" pipe), or -1 and why it could not start."""
    out_w, err_w, started_w, passed = fds[0], fds[1], fds[3], fds[5:]
    setup = request["setup"]
    try:
        preexec = preexec_fn(setup) if setup is not None else None
    except OSError as e:
        return -1, f"{type(e).__name__}: {e}"
    try:
        pid = _fork(setup.confinement if setup is not None and needs_pid_namespace(setup)
                    else None)  # fmt: skip
    except PidNamespaceLost:
        raise  # serve() stops: we must not fork on
    except OSError as e:
        return -1, f"private /proc: {e.strerror or e}"
    if pid == 0:
        _child(request, out_w, err_w, passed, started_w, preexec)
    del preexec  # the per-run Landlock ruleset: closed now, not at the next collection
    return pid, None


def _fork(confinement: Any) -> int:
    """os.fork, or, for a confinement with a private /proc, a fork whose child is the
    first process of a PID namespace of its own (in a user namespace of its own when
    we lack CAP_SYS_ADMIN: see `confinement.fork_in_pid_namespace`)."""
    if confinement is not None and confinement.private_proc:
        return fork_in_pid_namespace(confinement)
    return os.fork()


def _reap_strays(known: set[int]) -> None:
    """Reap the exited children we do not know of: as a child subreaper (see
    `confinement.fork_in_pid_namespace`) we adopt the orphans of commands run without
    a PID namespace of their own (`setsid -f` under confinement='none')."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            children = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return
    for pid in children:
        if pid not in known:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _kill(job: _Job) -> None:
    if job.pid < 0:
        return  # a revoked zygote, already reaped
    # Until it has exec'd, the child may not be in its cgroups yet: a cgroup.kill now
    # would miss it. Its setup is short and runs no user code.
    if job.started_r >= 0:
        select.select([job.started_r], [], [], 0.05)
    for path in job.kill_files:  # resolved when received: no link followed now
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.write(fd, b"1")
        except OSError:
            pass
        finally:
            os.close(fd)
    try:
        os.kill(job.pid, signal.SIGTERM)  # a subreaper or unshare takes its tree down
    except ProcessLookupError:
        return


def _finish(jobs: dict[int, _Job]) -> None:
    """Kill every tree still running, give SIGTERM handlers 50 ms, then SIGKILL."""
    for job in jobs.values():
        _check_taken(job)  # its cgroups to kill, if the agent took it
    jobs = {key: job for key, job in jobs.items() if job.pid > 0}
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
    # Every object made so far (the modules) out of the collector's reach: a collection
    # writes into each object it visits, and while a zygote shares our pages each
    # such write copies a page, in us and in it.
    gc.freeze()
    control = socket.socket(fileno=fd)
    try:
        agent_fd = os.pidfd_open(agent)
    except ProcessLookupError:
        return
    try:
        _send(control, ("ready",))
    except OSError:
        return  # the agent is gone already (it exited right after starting us)
    jobs: dict[int, _Job] = {}
    agent_died = False
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    poller.register(agent_fd, select.POLLIN)
    # A child subreaper adopts orphans (see _reap_strays): SIGCHLD wakes the loop.
    strays_r, strays_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(strays_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    poller.register(strays_r, select.POLLIN)
    # Zygotes being made, or ready and not offered yet, by their socket's descriptor.
    zygotes: dict[int, _Zygote] = {}
    # The keys of the zygotes to make when idle, oldest first: the agent asks for one
    # ("prepare") once it has reserved a run, and lets go of it ("forget").
    wanted: list[Any] = []
    tokens: dict[Any, Any] = {}  # the agent's token of each wanted key
    loose: list[str] = []  # TMPDIRs of jobs the agent let go of (see below)
    failed: list[str] = []  # why the zygotes made since the last one offered failed

    def drop(zygote: _Zygote) -> None:
        poller.unregister(zygote.sock.fileno())
        del zygotes[zygote.sock.fileno()]
        zygote.discard()

    try:
        while True:
            events = poller.poll(0 if wanted else None)
            if any(ready == strays_r for ready, _ in events):
                with contextlib.suppress(BlockingIOError):
                    os.read(strays_r, 4096)
                known = {job.pid for job in jobs.values()} | {z.pid for z in zygotes.values()}
                _reap_strays(known)
                events = [event for event in events if event[0] != strays_r]
                if not events:
                    continue
            if not events and wanted:
                key = wanted.pop(0)
                token = tokens.pop(key, None)
                try:
                    zygote = _Zygote(key)
                    zygote.token = token
                except PidNamespaceLost:
                    raise
                except OSError:
                    continue  # the run forks the usual way
                zygotes[zygote.sock.fileno()] = zygote
                poller.register(zygote.sock.fileno(), select.POLLIN)
                continue
            # One event per poll: handling one closes and makes descriptors, so the
            # numbers in the rest of this batch may already name something else.
            if any(ready == agent_fd for ready, _ in events):
                agent_died = True
                return  # the agent died: finally kills everything
            for ready, _event in events[:1]:
                if ready in zygotes:
                    poller.unregister(ready)
                    job = _offer(control, zygotes.pop(ready), failed)
                    if job is not None:
                        jobs[job.reply.fileno()] = job
                        poller.register(job.reply.fileno(), select.POLLIN)
                        failed.clear()
                    elif len(failed) == _MAX_FAILED:
                        # Set up afresh from now on (the same, between fork and exec),
                        # said once: a zygote that cannot set itself up here will not.
                        print("sandbox spawner: zygotes keep failing their setup "
                              f"({failed[-1]}); commands are set up when they come",
                              file=sys.stderr)  # fmt: skip
                        wanted.clear()
                    continue
                if ready == control.fileno():
                    try:
                        request, fds = _recv(control)
                    except (EOFError, OSError):
                        # Closed without a word: the agent is dying (the kernel closes
                        # its sockets before its pidfd says it exited), so the TMPDIRs
                        # of the runs it let go of are ours to remove.
                        agent_died = True
                        return
                    except pickle.UnpicklingError as e:
                        # Never from the agent's own code (it sends plain data): not a
                        # reason to end the commands running.
                        print(f"sandbox spawner: a message was refused: {e}", file=sys.stderr)
                        continue
                    if request == ("close",):
                        return  # Spawner.close(): the agent lives on and cleans up
                    if isinstance(request, tuple) and request[:1] in (("prepare",),
                                                                      ("forget",)):
                        for extra in fds:
                            os.close(extra)
                        kind, key = request[0], request[1]
                        made = [z for z in zygotes.values() if z.key == key]
                        offered = [j for j in jobs.values() if not j.taken and j.offered == key]
                        if kind == "prepare":
                            if len(failed) >= _MAX_FAILED:
                                pass  # zygotes fail here: see above
                            elif not made and not offered and key not in wanted:
                                wanted.append(key)
                                del wanted[:-_MAX_WANTED]
                                # What the agent knows the key by (see _offer).
                                tokens[key] = request[2] if len(request) > 2 else None
                                for gone in [k for k in tokens if k not in wanted]:
                                    del tokens[gone]
                        else:
                            if key in wanted:
                                wanted.remove(key)
                                tokens.pop(key, None)
                            for zygote in made:
                                drop(zygote)
                            for job in offered:
                                _revoke(job)
                        continue
                    reply = socket.socket(fileno=fds[2])
                    setup = request["setup"]
                    key = _key(setup)
                    # Whatever was prepared in this run's cgroups must not stay there
                    # (an offer that came too late, or one whose zygote found itself
                    # stale): revoked, its sending then fails.
                    for other in jobs.values():
                        if not other.taken and _shares_cgroups(
                                frozenset(other.offered.cgroup_procs), key):  # fmt: skip
                            _revoke(other)
                    try:
                        held: list[int] = []
                        error: str | None = "no zygote"
                        for zygote in list(zygotes.values()):
                            if error is not None and zygote.usable_for(key):
                                poller.unregister(zygote.sock.fileno())
                                del zygotes[zygote.sock.fileno()]
                                pid, error, held = _hand_over(zygote, request, fds)
                                if error is not None:
                                    zygote.discard()
                                else:
                                    zygote.close()
                            elif zygote.shares_cgroups(key):
                                drop(zygote)  # stale, in this run's cgroups
                        # Nothing may be made later into this run's cgroups.
                        wanted[:] = [k for k in wanted
                                     if not _shares_cgroups(frozenset(k.cgroup_procs), key)]
                        if error is not None:
                            pid, error = _start(request, fds)
                    finally:
                        for extra in (fds[0], fds[1], fds[3], *fds[5:]):
                            os.close(extra)
                    if error is not None:
                        os.close(fds[4])
                        try:
                            _send(reply, ("error", f"could not set up the child process: "
                                                   f"{error}"))  # fmt: skip
                        except OSError:
                            pass
                        reply.close()
                        continue
                    job = _Job(pid, reply, _kill_files(request["kill_files"]), fds[4], held)
                    job.tmpdirs = _tmpdirs(setup)
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
                except (EOFError, OSError):
                    message, passed = None, []
                if _note_taken(job, message, passed):
                    continue  # the agent gave its command straight to our offer
                for leftover in passed:
                    os.close(leftover)
                if message is None:
                    # End of file: the agent let go of this job, or is dying (its
                    # sockets close before its pidfd says so): if it dies, its TMPDIR
                    # is ours to remove, and whether it does is not known yet.
                    loose[:] = [p for p in loose if os.path.lexists(p)][-_MAX_LOOSE:]
                    loose.extend(job.tmpdirs)
                if not job.taken:
                    _revoke(job)  # an offer the agent let go of
                    status = None
                elif message != ("reap",):
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
                        pass  # the agent read the status itself and went on
                job.close()
    except PidNamespaceLost as e:
        print(f"sandbox spawner: {e}; stopping (the agent starts a new spawner)",
              file=sys.stderr)  # fmt: skip
    finally:
        tmpdirs = [path for key in (*wanted, *(z.key for z in zygotes.values()))
                   for path in _tmpdirs(key)]  # fmt: skip
        tmpdirs += [path for job in jobs.values() for path in job.tmpdirs]
        if agent_died:
            tmpdirs += loose
        for zygote in zygotes.values():
            zygote.discard()
        _finish(jobs)
        # The agent is gone (or exiting): the TMPDIRs of its runs in flight and of those
        # it reserved go too (their cgroups are removed at the next start).
        for path in tmpdirs:
            remove_tree(path)
        sys.exit(0)


# Requests without a setup (nothing to do between fork and exec) need no zygote.
_NO_ZYGOTE = object()
# At most this many zygotes asked for and not made yet (the agent keeps as many
# reservations: process._MAX_RESERVATIONS signatures, _RESERVED_PER_SIGNATURE each).
_MAX_WANTED = 8
# TMPDIRs of jobs let go of, kept in case the agent turns out to have died.
_MAX_LOOSE = 64
# Zygotes that failed their setup in a row, after which none is made.
_MAX_FAILED = 3


def _key(setup: Any) -> Any:
    """What a zygote must have been prepared for to serve `setup` (see `_Zygote`)."""
    return _NO_ZYGOTE if setup is None else spawn_key(setup)


def _tmpdirs(setup: Any) -> tuple[str, ...]:
    if setup is None or setup.confinement is None:
        return ()
    return tuple(setup.confinement.private_paths)


def _shares_cgroups(placement: frozenset[str], key: Any) -> bool:
    return key is not _NO_ZYGOTE and not placement.isdisjoint(key.cgroup_procs)


def _offer(control: socket.socket, zygote: _Zygote, failed: list[str]) -> _Job | None:
    """The zygote said it is ready: offer it to the agent (its request socket, a reply
    socket to us, its pidfd), and watch it as a job not taken yet. One that failed its
    setup says why: appended to `failed`."""
    try:
        ready, held = _recv(zygote.sock)
        if ready != ("ready",) or zygote.agents is None:
            raise OSError(f"it said {ready!r}")
    except (EOFError, OSError) as e:
        failed.append(str(e))
        zygote.discard()
        return None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job = _Job(zygote.pid, ours, [], -1, held, offered=zygote)
    job.tmpdirs = _tmpdirs(zygote.key)
    try:
        # The agent's token of the key, which it maps back to the key it holds.
        _send(control, ("offer", zygote.pid, zygote.token),
              [zygote.agents.fileno(), theirs.fileno(), zygote.pidfd])  # fmt: skip
    except OSError:
        _revoke(job)
        job.close()
        zygote.close()
        return None
    finally:
        theirs.close()
    zygote.release()
    return job


def _note_taken(job: _Job, message: Any, passed: list[int]) -> bool:
    """Whether `message` says the agent took the offered zygote (then noted)."""
    if (job.taken or not isinstance(message, tuple) or message[:1] != ("taken",)
            or len(passed) != 1):  # fmt: skip
        return False
    job.taken = True
    job.kill_files = _kill_files(message[1])
    job.started_r = passed[0]
    return True


def _kill_files(paths: Any) -> list[str]:
    """The cgroup.kill files among `paths`: the only files we write "1" into, as root,
    whoever sent them."""
    resolved = (os.path.realpath(path) for path in paths if isinstance(path, str))
    return [path for path in resolved if os.path.basename(path) == "cgroup.kill"
            and path.startswith("/sys/fs/cgroup/")]  # fmt: skip


def _check_taken(job: _Job) -> None:
    """Read, without waiting, whether the agent took this offered zygote: it says so
    right after giving it a request, before anything else it sends us, but on another
    socket, which poll may report later."""
    if job.taken:
        return
    try:
        job.reply.setblocking(False)
        message, passed = _recv(job.reply)
    except (BlockingIOError, EOFError, OSError):
        return
    finally:
        with contextlib.suppress(OSError):
            job.reply.setblocking(True)
    if not _note_taken(job, message, passed):
        for fd in passed:
            os.close(fd)


def _revoke(job: _Job) -> None:
    """Kill an offered zygote the agent has not taken (it runs no user code)."""
    _check_taken(job)
    if job.taken or job.pid < 0:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(job.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(job.pid, 0)
    job.pid = -1


def _hand_over(zygote: _Zygote, request: dict[str, Any], fds: list[int]
               ) -> tuple[int, str | None, list[int]]:  # fmt: skip
    """Give the request to the zygote, which sets itself up and execs. Returns its pid
    and the descriptors to hold until it is reaped (its mount namespace)."""
    held: list[int] = []
    try:
        zygote.sock.settimeout(5)
        ready, held = _recv(zygote.sock)  # at once, unless it was made a moment ago
        if ready != ("ready",):
            raise OSError(f"it said {ready!r}")
        _send(zygote.sock, request, [fds[0], fds[1], fds[3], *fds[5:]])
    except (OSError, EOFError) as e:
        for fd in held:
            os.close(fd)
        return -1, f"the prepared child did not take the request: {e}", []
    return zygote.pid, None, held
