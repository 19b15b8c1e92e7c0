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
- Per command, the agent makes the output pipes and a reply socket pair, and sends the
  write ends, the spawner's end of the reply pair and any descriptors the command must
  inherit, with the request, over the control socket (SCM_RIGHTS). It closes its copies
  at once. The spawner forks; the child puts the pipes on 1 and 2, /dev/null on 0, the
  inherited descriptors back on their numbers, runs ``preexec_fn(setup)`` and execs.
  The spawner answers on the reply socket with the pid and a pidfd of the child.
- The spawner reaps a child only when the agent asks (after it has killed the tree), so
  the child's pid, which is also its process group id, is not reused while the agent
  may still signal it.
- When the agent dies (any signal, SIGKILL included: the agent's pidfd becomes
  readable) or closes the control socket, the spawner kills every tree it started
  (cgroup.kill where the tree has one, SIGTERM to the main process so a subreaper or
  ``unshare --kill-child`` takes its tree down, then SIGKILL to the process group),
  reaps and exits.
- If the spawner dies, a command in flight sees its reply socket close: `reap` raises
  `SpawnerError`, never hangs; the next command starts a new spawner.
"""

from __future__ import annotations

import array
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..errors import SandboxError

__all__ = ["SpawnedProcess", "Spawner", "SpawnerError"]

_MAX_FDS = 64
_MAX_MESSAGE = 1 << 20


class SpawnerError(SandboxError):
    """The spawner process could not start a command or died while one ran."""


def _send(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > _MAX_MESSAGE:
        raise SpawnerError(f"the spawn request is too large ({len(data)} bytes)")
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], anc)


def _recv(sock: socket.socket) -> tuple[Any, list[int]]:
    fds = array.array("i")
    data, anc, _flags, _addr = sock.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    if not data:
        for fd in fds:
            os.close(fd)
        raise EOFError
    return pickle.loads(data), list(fds)


class SpawnedProcess:
    """A command the spawner started: what `BashProcess` needs of a Popen."""

    def __init__(self, pid: int, pidfd: int, reply: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.returncode: int | None = None
        self._reply = reply

    @property
    def reply_fd(self) -> int:
        """Readable before `wait` asks only when the spawner is gone (end of file)."""
        return self._reply.fileno()

    def poll_exited(self) -> bool:
        if self.returncode is not None:
            return True
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def wait(self) -> int:
        """Ask the spawner to reap the (exited) process; its exit code, Popen-style."""
        if self.returncode is not None:
            return self.returncode
        try:
            _send(self._reply, ("reap",))
            self._reply.settimeout(10)
            (kind, value), fds = _recv(self._reply)
        except (OSError, EOFError) as e:
            raise SpawnerError(
                "the spawner process died while this command ran; its result is lost "
                "(the next command starts a new spawner)") from e
        for fd in fds:
            os.close(fd)
        if kind != "status":
            raise SpawnerError(f"the spawner answered {kind!r}: {value}")
        self.returncode = os.waitstatus_to_exitcode(value)
        return self.returncode

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        self._reply.close()


class Spawner:
    """The agent's handle on its spawner process (one per agent process)."""

    _shared: Spawner | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = str(Path(__file__).resolve().parent.parent.parent)
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

    def spawn(self, argv: list[str], *, cwd: str, env: dict[str, str], setup: object,
              stdout_w: int, stderr_w: int, pass_fds: tuple[int, ...] = (),
              kill_files: tuple[str, ...] = ()) -> SpawnedProcess:
        reply, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {"argv": argv, "cwd": cwd, "env": env, "setup": setup,
                   "pass_fds": list(pass_fds), "kill_files": list(kill_files)}
        try:
            with self._lock:
                _send(self._sock, request, [stdout_w, stderr_w, theirs.fileno(), *pass_fds])
        except OSError as e:
            reply.close()
            self._broken = True
            raise SpawnerError(f"the spawner process is gone ({e})") from e
        finally:
            theirs.close()
        try:
            (kind, value), fds = _recv(reply)
        except (OSError, EOFError) as e:
            reply.close()
            self._broken = True
            raise SpawnerError("the spawner process died before starting the command") from e
        if kind != "started":
            for fd in fds:
                os.close(fd)
            reply.close()
            raise SpawnerError(str(value))
        return SpawnedProcess(value, fds[0], reply)

    def close(self) -> None:
        """Stop the spawner: it kills whatever it still runs, then exits."""
        self._sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


# The spawner's own program: loaded with -I -S, it imports the three modules it needs
# by path (no package __init__, so not pydantic, anyio or tree-sitter) and runs serve().
_BOOT = r"""
import importlib.util, sys, types
root, fd, agent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for name in ("sandbox", "sandbox.bash"):
    module = types.ModuleType(name)
    module.__path__ = [root + "/" + name.replace(".", "/")]
    sys.modules[name] = module
def load(name):
    spec = importlib.util.spec_from_file_location(name, root + "/" + name.replace(".", "/") + ".py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
load("sandbox.errors")
load("sandbox.bash.confinement")
load("sandbox.bash.child")
load("sandbox.bash.spawner")
load("sandbox.bash._spawner_main").serve(fd, agent)
"""
