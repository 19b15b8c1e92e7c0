"""The spawner: a small helper process that forks on the agent's behalf.

Why: any ``preexec_fn`` makes CPython fork the whole agent (no vfork), which costs more
the more memory the agent holds (~60 ms per command at 1 GiB) and is unsafe in a
threaded program. Every confined command needs child-side setup (cgroups, rlimits,
namespaces, capabilities, Landlock, seccomp), so the agent hands that setup, as data
(`ChildSetup`), to a long-lived single-threaded process that forks cheaply.

Lifetimes and descriptors:

- The spawner is started on first use (`Spawner.shared`), in a new session (terminal
  signals meant for the agent do not reach it), with ``python -I -S`` and only the
  stdlib modules it needs loaded, so it stays small. It holds a pidfd of the agent.
- Per command, the agent makes the output pipes, a "started" pipe and a reply socket
  pair, and sends the write ends, the spawner's end of the reply pair and any
  descriptors the command must inherit, with the request, over the control socket
  (SCM_RIGHTS). It closes its copies at once. The spawner forks and answers on the
  reply socket at once with the pid and a pidfd of the child; the child puts the pipes
  on 1 and 2, /dev/null on 0, the inherited descriptors back on their numbers, runs
  ``preexec_fn(setup)`` and execs. The "started" pipe is close-on-exec: the agent sees
  end of file when the child has exec'd, or the reason it could not set itself up.
- The spawner reaps a child only when the agent asks (after it has killed the tree), so
  the child's pid, which is also its process group id, is not reused while the agent
  may still signal it. The agent reads the exit status of the zombie in /proc and does
  not wait for the spawner's answer.
- When the agent dies (any signal, SIGKILL included: the agent's pidfd becomes
  readable) or closes the control socket, the spawner kills every tree it started
  (cgroup.kill where the tree has one, SIGTERM to the main process so a subreaper or
  ``unshare --kill-child`` takes its tree down, then SIGKILL to the process group),
  reaps and exits.
- If the spawner dies, each command it started gets SIGKILL (PR_SET_PDEATHSIG, set in
  the child before exec; with a PID namespace of its own that takes the whole
  namespace), so a command in flight ends at once and the agent, seeing the reply
  socket closed, raises `SpawnerError`, never hangs; the next command starts a new
  spawner.
"""

from __future__ import annotations

import array
import contextlib
import io
import itertools
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from sandbox.errors import SandboxError

__all__ = ["SpawnedProcess", "Spawner", "SpawnerError", "remove_tree"]

_MAX_FDS = 64
_MAX_MESSAGE = 1 << 20
# Keys asked for and not offered yet, kept to know the offers by (more than the
# spawner keeps wanted: _spawner_main._MAX_WANTED).
_MAX_PREPARED = 64


class SpawnerError(SandboxError):
    """The spawner process could not start a command or died while one ran."""


# How a zygote that got a request straight from the agent says it was prepared from a
# state of the machine that has changed since (the command then goes through the
# spawner, see `process.run_bash`).
STALE = "stale zygote"
# What a zygote given a request straight from the agent writes first on its "started"
# pipe: it got the request (one that died before has run nothing, and says nothing).
RECEIVED = b"\0"


class _Offer:
    """A zygote the spawner made ready for the agent's next command: its pid and pidfd,
    the socket to give it the request on, and a reply socket to the spawner (to say it
    was taken, then to ask for the reap)."""

    def __init__(self, pid: int, key: object, fds: list[int]) -> None:
        self.pid = pid
        self.key = key
        self.requests = socket.socket(fileno=fds[0])
        self.reply = socket.socket(fileno=fds[1])
        self.pidfd = fds[2]

    def close(self) -> None:
        self.requests.close()
        self.reply.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


def _send(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > _MAX_MESSAGE:
        raise SpawnerError(f"the spawn request is too large ({len(data)} bytes)")
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


def _recv(sock: socket.socket, flags: int = 0) -> tuple[Any, list[int]]:
    fds = array.array("i")
    # Close-on-exec: descriptors of the spawner, a zygote or a command must never reach
    # a program the agent (or the spawner) execs. Whoever holds a zygote's request
    # socket runs code in it before it dropped its privileges, and an offer's reply
    # socket names files the spawner writes as root.
    data, anc, _flags, _addr = sock.recvmsg(
        _MAX_MESSAGE, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize),
        socket.MSG_CMSG_CLOEXEC | flags)  # fmt: skip
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        for fd in fds:
            os.close(fd)
        raise EOFError
    try:
        return _Unpickler(io.BytesIO(data)).load(), list(fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


class _Unpickler(pickle.Unpickler):
    """Messages carry plain data and the two setup dataclasses, nothing else: a
    message naming any other class (code to run, for pickle) is refused."""

    _ALLOWED = frozenset({("sandbox.bash.linux.child", "ChildSetup"),
                          ("sandbox.bash.linux.confinement", "Confinement"),
                          ("sandbox.bash.linux.protected", "ProtectedPaths")})  # fmt: skip

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refused in a spawner message: {module}.{name}")
        return super().find_class(module, name)


class SpawnedProcess:
    """A command the spawner started: what `BashProcess` needs of a Popen.

    The spawner answers as soon as it has forked, before the child has set itself up
    and exec'd: the child's setup and the agent's own work overlap. `started_fd` (the
    read end of a close-on-exec pipe the child holds until its exec) tells when the
    child has exec'd (end of file) or failed to set up (the reason, then end of file);
    the process layer waits for it before killing a tree, since until then the child
    may not be in its cgroups yet.
    """

    def __init__(self, pid: int, pidfd: int, reply: socket.socket, started_fd: int,
                 *, acknowledges: bool = False) -> None:  # fmt: skip
        # A zygote writes RECEIVED on the "started" pipe once it has the request.
        self.acknowledges = acknowledges
        self.pid = pid
        self.pidfd = pidfd
        self.started_fd = started_fd
        self.returncode: int | None = None
        self._reply = reply
        self._setup_error: bytes = b""
        self._started = False

    @property
    def reply_fd(self) -> int:
        """Readable before `wait` asks only when the spawner is gone (end of file)."""
        return self._reply.fileno()

    def poll_exited(self) -> bool:
        if self.returncode is not None:
            return True
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def spawner_gone(self) -> bool:
        """Whether the spawner has died (the reply socket is at end of file)."""
        return self.returncode is None and bool(select.select([self.reply_fd], [], [], 0)[0])

    def poll_started(self) -> bool:
        """True once the child has exec'd or given up (see `setup_error`)."""
        while not self._started:
            try:
                chunk = os.read(self.started_fd, 4096)
            except BlockingIOError:
                return False
            if not chunk:
                self._started = True
            self._setup_error += chunk
        return True

    def setup_error(self) -> str | None:
        """Why the child could not set itself up (it then exited with status 127), or
        None if it exec'd. Meaningful once `poll_started` is True (and, for a zygote,
        once it has exited: one that died before it received the request ran nothing
        and says so: STALE)."""
        if not self.poll_started():
            return None
        error = self._setup_error
        if self.acknowledges:
            if not error.startswith(RECEIVED):
                return (f"{STALE}: the prepared child died before it received the command"
                        if self.poll_exited() else None)  # fmt: skip
            error = error[len(RECEIVED):]
        return error.decode("utf-8", "replace") if error else None

    def wait(self) -> int:
        """The (exited) process's exit code, Popen-style; the spawner reaps it.

        The status is read from /proc/PID/stat (its exit_code field, as waitpid reports
        it) while the process is still an unreaped zombie, so its pid cannot have been
        reused; the spawner is told to reap without waiting for its answer. Without that
        field (Linux < 3.5) the spawner's answer is awaited.
        """
        if self.returncode is not None:
            return self.returncode
        status = _zombie_status(self.pid)
        try:
            _send(self._reply, ("reap",))
            if status is None:
                self._reply.settimeout(10)
                (kind, value), fds = _recv(self._reply)
                for fd in fds:
                    os.close(fd)
                if kind != "status":
                    raise SpawnerError(f"the spawner answered {kind!r}: {value}")
                status = value
        except (OSError, EOFError) as e:
            if status is None:
                raise SpawnerError(
                    "the spawner process died while this command ran; its result is lost "
                    "(the next command starts a new spawner)") from e
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self.started_fd >= 0:
            os.close(self.started_fd)
            self.started_fd = -1
        self._reply.close()


def needs_own_pid_namespace(key: object) -> bool:
    """Whether a child set up for `key` (a ChildSetup) is the first process of a PID
    namespace of its own (its confinement asks for a private /proc)."""
    confinement = getattr(key, "confinement", None)
    return bool(getattr(confinement, "private_proc", False))


def _zombie_status(pid: int) -> int | None:
    """The wait status of exited, unreaped `pid` from /proc/PID/stat, or None."""
    try:
        # os.open, not open(): a buffered file costs 4 more system calls (fstat, ioctl,
        # two lseeks) on every run.
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
        finally:
            os.close(fd)
    except (OSError, IndexError):
        return None
    # fields[0] is field 3 (state); exit_code is field 52.
    if len(fields) < 50 or fields[0] not in (b"Z", b"X"):
        return None
    return int(fields[49])


class Spawner:
    """The agent's handle on its spawner process (one per agent process)."""

    _shared: Spawner | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = str(Path(__file__).resolve().parents[3])  # holds the sandbox package
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, root, str(theirs.fileno()),
                 str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None,
                pass_fds=(theirs.fileno(),), start_new_session=True, cwd="/", close_fds=True,
            )
        except OSError as e:
            ours.close()
            raise SpawnerError(f"cannot start the spawner process: {e}") from e
        finally:
            theirs.close()
        self._sock = ours
        self._lock = threading.Lock()
        self._owner = os.getpid()  # a forked copy of the agent must start its own
        # Set when the control socket failed: the kernel closes a dying process's
        # sockets before its parent can see it exit, so poll() may not know yet.
        self._broken = False
        try:
            ready, _ = _recv(ours)
        except (OSError, EOFError) as e:
            self.close()
            raise SpawnerError("the spawner process exited at start (see its stderr)") from e
        if ready != ("ready",):
            self.close()
            raise SpawnerError(f"the spawner process said {ready!r} at start")
        # Zygotes the spawner made ready, by the key they were prepared for.
        self._offers: dict[object, _Offer] = {}
        # The keys asked for (`prepare`) by the token the spawner's offer names them
        # by: an offer carries the token, not the key (a key holds every path of a
        # run's confinement: ~1.6 KB to unpickle, and a copy compares field by field).
        self._prepared: dict[int, object] = {}
        self._tokens = itertools.count(1)

    @classmethod
    def shared(cls) -> Spawner:
        """This process's spawner, started on first use and again if it died."""
        with cls._shared_lock:
            spawner = cls._shared
            if (spawner is None or spawner._broken or spawner._proc.poll() is not None
                    or spawner._pid_changed()):
                if spawner is not None:
                    spawner.close()
                spawner = cls._shared = cls()
            return spawner

    def _pid_changed(self) -> bool:
        return self._owner != os.getpid()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _take_offers(self) -> None:
        """Read the offers the spawner queued (the newest per key is kept); under
        _lock."""
        if self._sock.fileno() < 0:
            self._broken = True  # closed (replaced by a new spawner)
            return
        while True:
            try:
                message, fds = _recv(self._sock, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except (OSError, EOFError):
                self._broken = True
                return
            key = None
            if (isinstance(message, tuple) and message[:1] == ("offer",)
                    and len(fds) == 3 and isinstance(message[2], int)):  # fmt: skip
                # The very object `prepare` was given: looked up by identity first.
                key = self._prepared.pop(message[2], None)
            if key is not None:
                old = self._offers.pop(key, None)
                if old is not None:
                    old.close()  # the spawner sees it let go
                self._offers[key] = _Offer(message[1], key, fds)
            else:
                for fd in fds:
                    os.close(fd)

    def prepare(self, key: object) -> None:
        """Ask for a zygote made ahead for `key` (a `child.spawn_key`: the setup of a
        run reserved for it): the spawner makes it when idle and offers it."""
        with self._lock:
            token = next(self._tokens)
            self._prepared[token] = key
            while len(self._prepared) > _MAX_PREPARED:
                del self._prepared[next(iter(self._prepared))]
        self._tell(("prepare", key, token))

    def forget(self, key: object) -> None:
        """The run reserved for `key` will not come: its zygote goes (offered or not)."""
        with self._lock:
            offer = self._offers.pop(key, None)
            if offer is not None:
                offer.close()  # the spawner revokes it
            for token in [t for t, k in self._prepared.items() if k is key]:
                del self._prepared[token]
        self._tell(("forget", key))

    def _tell(self, message: tuple[object, ...]) -> None:
        with self._lock:
            try:
                _send(self._sock, message)
            except OSError:
                self._broken = True

    def offered_keys(self) -> set[object]:
        """The keys of the zygotes offered now (empty once this spawner is closed or
        gone)."""
        with self._lock:
            if self._broken or self._sock.fileno() < 0:
                return set()
            self._take_offers()
            return set(self._offers)

    def offered(self, key: object) -> bool:
        """Whether a zygote made for `key` is offered now (and so `spawn` with it is
        taken straight by that zygote, unless it has found itself stale). False once
        this spawner is closed or gone."""
        return key in self.offered_keys()

    def _spawn_offered(self, key: object, request: dict[str, Any], fds: list[int],
                       started_r: int, kill_files: tuple[str, ...]
                       ) -> SpawnedProcess | None:  # fmt: skip
        """Give the request straight to the offered zygote, if it was made for `key`;
        under _lock. None when there is none (or it is gone: the spawner revoked it)."""
        self._take_offers()
        offer = self._offers.pop(key, None)
        if offer is None:
            return None
        # The zygote is set up for `key` already: it needs the rlimits only.
        compact = {name: value for name, value in request.items() if name != "setup"}
        compact["rlimits"] = request["setup"].rlimits
        # Should we die between the two messages, the spawner must know what to kill:
        # told first, unless the zygote is the first process of a PID namespace of its
        # own (then the spawner kills it as an offer not taken, and the kernel every
        # other process of the namespace with it). Told second, the spawner, woken by
        # it, no longer holds a CPU the zygote needs right then (2 cores: ~0.3 ms).
        first = not needs_own_pid_namespace(key)
        if first:
            try:
                _send(offer.reply, ("taken", list(kill_files)), [started_r])
            except OSError:
                offer.close()  # an offer the spawner revoked: it sees us let go
                return None
        try:
            _send(offer.requests, compact, fds)
        except OSError:
            # The zygote is gone (it ran nothing). It is reaped as it is: not killed as
            # a run, whose cgroups the run made afresh is about to enter.
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(offer.pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                _send(offer.reply, ("reap",))
            offer.close()
            return None
        if not first:
            # The command is the zygote's now: never handed to anyone else. Should the
            # spawner be gone, its zygote died with it (PR_SET_PDEATHSIG) and waiting
            # for it says the result is lost.
            with contextlib.suppress(OSError):
                _send(offer.reply, ("taken", list(kill_files)), [started_r])
        offer.requests.close()
        pidfd, offer.pidfd = offer.pidfd, -1
        return SpawnedProcess(offer.pid, pidfd, offer.reply, started_r, acknowledges=True)

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], setup: object,
              stdout_w: int, stderr_w: int, pass_fds: tuple[int, ...] = (),
              kill_files: tuple[str, ...] = (), zygote_key: object = None,
              use_offer: bool = True) -> SpawnedProcess:
        """Start a command: through the zygote the spawner offered for `zygote_key`
        (the request goes straight to it), else through the spawner."""
        # Plain str (a str subclass, an enum member say, would name its class in the
        # message, which the spawner refuses), exactly the text exec would pass.
        argv = [str.__str__(arg) for arg in argv]
        env = {str.__str__(k): str.__str__(v) for k, v in env.items()}
        cwd = str.__str__(cwd)
        reply, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        started_r, started_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        request = {"argv": argv, "cwd": cwd, "env": env, "setup": setup,
                   "pass_fds": list(pass_fds), "kill_files": list(kill_files)}
        if use_offer and setup is not None:
            try:
                with self._lock:
                    spawned = self._spawn_offered(
                        zygote_key, request, [stdout_w, stderr_w, started_w, *pass_fds],
                        started_r, kill_files)
            except BaseException:
                reply.close()
                theirs.close()
                os.close(started_r)
                os.close(started_w)
                raise
            if spawned is not None:
                reply.close()
                theirs.close()
                os.close(started_w)
                return spawned
        try:
            with self._lock:
                _send(self._sock, request, [stdout_w, stderr_w, theirs.fileno(), started_w,
                                            started_r, *pass_fds])
        except OSError as e:
            reply.close()
            os.close(started_r)
            self._broken = True
            raise SpawnerError(f"the spawner process is gone ({e})") from e
        finally:
            theirs.close()
            os.close(started_w)
        try:
            (kind, value), fds = _recv(reply)
        except (OSError, EOFError) as e:
            reply.close()
            os.close(started_r)
            self._broken = True
            raise SpawnerError("the spawner process died before starting the command") from e
        if kind != "started":
            for fd in fds:
                os.close(fd)
            reply.close()
            os.close(started_r)
            raise SpawnerError(str(value))
        return SpawnedProcess(value, fds[0], reply, started_r)

    def close(self) -> None:
        """Stop the spawner: it kills whatever it still runs, then exits."""
        if not self._pid_changed():
            # Said before closing: a socket closed without a word means the agent died
            # (and the spawner removes the TMPDIRs of the runs it let go of). A forked
            # copy of the agent only lets go of its copy of the socket.
            with contextlib.suppress(OSError):
                self._sock.settimeout(1.0)
                _send(self._sock, ("close",))
        for offer in getattr(self, "_offers", {}).values():
            offer.close()
        self._offers = {}
        self._sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def remove_tree(path: str) -> None:
    """Remove a run's TMPDIR whatever the command left in it. shutil.rmtree recurses
    once per directory level and works on whole paths: 1,500 nested directories raised
    RecursionError out of the tool call and left the directory behind, and deeper trees
    pass PATH_MAX. GNU rm walks any depth with openat (fts): it is the fallback."""
    try:
        os.rmdir(path)  # most commands leave their TMPDIR empty
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    import shutil

    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.lexists(path):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["rm", "-rf", "--one-file-system", "--", path],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60, check=False)


def _forget_the_parents_spawner() -> None:
    """In a child forked from the agent: another thread may have held these locks at
    the fork; the child starts its own spawner (`shared` sees the pid changed)."""
    Spawner._shared_lock = threading.Lock()
    if Spawner._shared is not None:
        Spawner._shared._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_spawner)


# The spawner's own program, run with -I -S (no site hooks, no current directory, no
# PYTHONPATH): it loads the `sandbox` package from the directory holding it and nothing
# else from there (`_PACKAGE_ONLY`: that directory on sys.path let a module planted
# beside the package under a name the standard library probes for, pickle's
# ``org.python.core``, run in this process), imports the Linux layer the usual way (the
# package's top levels import nothing themselves, so not pydantic, anyio or
# tree-sitter) and runs serve().
_PACKAGE_ONLY = (
    "import importlib.util\n"
    "from importlib.machinery import PathFinder\n"
    "_spec = PathFinder.find_spec('sandbox', [root])\n"
    "assert _spec is not None and _spec.loader is not None, root\n"
    "sys.modules['sandbox'] = _module = importlib.util.module_from_spec(_spec)\n"
    "_spec.loader.exec_module(_module)\n"
)
_BOOT = r"""
import sys
root, fd, agent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
""" + _PACKAGE_ONLY + r"""
from sandbox.bash.linux.spawner_main import serve
serve(fd, agent)
"""
