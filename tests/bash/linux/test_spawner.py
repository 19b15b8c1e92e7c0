"""The spawner: commands are forked by a helper process, never by the agent, and die
with the agent whatever kills it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sandbox.bash.linux.spawner import Spawner
from sandbox.bash.run.process import Limits, run_bash
from sandbox.errors import SandboxError

pytestmark = pytest.mark.anyio

_AGENT = r"""
import anyio, pathlib, sys
from sandbox.bash.linux.confinement import ConfinementRequest
from sandbox.bash.run.process import run_bash, Limits
from sandbox.bash.linux.spawner import Spawner
async def main():
    print(Spawner.shared().pid, flush=True)
    # Confined as ExecuteBashTool does by default: the spawner also holds a zygote.
    await run_bash(sys.argv[2], cwd=pathlib.Path(sys.argv[1]), env={"PATH": "/usr/bin:/bin"},
                   timeout=60, limits=Limits(), confinement=ConfinementRequest())
anyio.run(main)
"""


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry))
    return found


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_agent_takes_every_command_tree_with_it(how: int, tmp_path: Path) -> None:
    marker = f"sleep-{uuid.uuid4().hex}"
    command = f"setsid -f bash -c 'exec -a {marker} sleep 300'; exec -a {marker}-main sleep 300"
    agent = subprocess.Popen([sys.executable, "-c", _AGENT, str(tmp_path), command],
                             stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    spawner_pid = int(agent.stdout.readline())
    deadline = time.monotonic() + 20
    running = 0
    while running < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
        # Both have exec'd (a cmdline read mid-exec can come back empty).
        running = sum(_argv0(pid) in (marker, f"{marker}-main") for pid in _with_marker(marker))
    assert running == 2, "the command did not start"
    # The spawner's children: the command, and the zygote ready for the next one.
    deadline = time.monotonic() + 5
    while len(children := _children(spawner_pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    agent.send_signal(how)
    agent.wait(timeout=10)
    died_at = time.monotonic()
    while _with_marker(marker) and time.monotonic() - died_at < 2:
        time.sleep(0.005)
    assert _with_marker(marker) == [], "a command survived its agent"
    while not _gone(spawner_pid) and time.monotonic() - died_at < 5:
        time.sleep(0.01)
    assert _gone(spawner_pid), "the spawner outlived its agent"
    assert all(_gone(pid) for pid in children), "a child of the spawner outlived it"


async def test_a_spawner_killed_mid_command_is_a_clear_error_and_the_next_one_works(
    tmp_path: Path,
) -> None:
    import threading

    import anyio

    pid = Spawner.shared().pid
    threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(SandboxError, match="spawner"), anyio.fail_after(20):
        await run_bash("sleep 30", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                       timeout=60, limits=Limits())
    assert time.monotonic() - started < 5, "the command in flight waited for its own end"
    result = await run_bash("echo again", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                            timeout=10, limits=Limits())
    assert result.stdout == "again\n"


async def test_many_commands_at_once_and_no_descriptor_leaks(tmp_path: Path) -> None:
    import anyio

    await run_bash("true", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout=10,
                   limits=Limits())

    def open_fds() -> int:
        """Ours, but the 3 each zygote offered to us holds (one per reserved run)."""
        spawner = Spawner.shared()
        with spawner._lock:
            spawner._take_offers()
            offered = len(spawner._offers)
        return len(os.listdir("/proc/self/fd")) - 3 * offered

    before = open_fds()
    results: list[str] = []

    async def one(i: int) -> None:
        r = await run_bash(f"echo {i}", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                           timeout=10, limits=Limits(max_file_size_bytes=1 << 20))
        results.append(r.stdout)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)
    assert sorted(results) == sorted(f"{i}\n" for i in range(20))
    assert open_fds() <= before  # nothing left open per command


def test_the_agent_never_forks_itself_for_a_confined_command(tmp_path: Path) -> None:
    # A child forked from this process would share its pid namespace parent: the
    # command's parent is the spawner, not us.
    import anyio

    async def main() -> str:
        r = await run_bash("cat /proc/$$/stat", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                           timeout=10, limits=Limits(max_memory_bytes=1 << 30))
        return r.stdout

    stat = anyio.run(main)
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    assert ppid != os.getpid()


async def test_commands_of_different_confinements_at_once_each_run_once(tmp_path: Path) -> None:
    # The spawner prepares a zygote for the last confinement it saw and offers it to
    # the agent; commands of other confinements, at once, revoke or pass it by.
    import anyio

    from sandbox.bash.linux.confinement import ConfinementRequest

    requests = [None, ConfinementRequest(), ConfinementRequest(network="loopback"),
                ConfinementRequest(network="host")]
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        r = await run_bash(f"echo {i} >> ran; echo {i}", cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin"}, timeout=20,
                           limits=Limits(max_file_size_bytes=1 << 20),
                           confinement=requests[i % len(requests)])
        results[i] = r.stdout

    for _ in range(2):  # the second round finds zygotes ready
        (tmp_path / "ran").unlink(missing_ok=True)
        results.clear()
        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, i)
        assert results == {i: f"{i}\n" for i in range(16)}
        ran = sorted(int(line) for line in (tmp_path / "ran").read_text().split())
        assert ran == list(range(16))  # each exactly once
        await anyio.sleep(0.2)


_AGENT_WITH_RESERVATION = r"""
import anyio, pathlib, sys, time
from sandbox.bash.run import reservations
from sandbox.bash.run import process
from sandbox.bash.linux.confinement import ConfinementRequest
from sandbox.bash.run.process import run_bash, Limits
from sandbox.bash.linux.spawner import Spawner
async def main():
    one, two = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    kwargs = dict(env={"PATH": "/usr/bin:/bin"}, timeout=60, limits=Limits(),
                  confinement=ConfinementRequest())
    await run_bash("true", cwd=one, **kwargs)   # reserves the next run in `one`
    for _ in range(500):
        await anyio.sleep(0.01)
        held = [r for kept in reservations._reservations.values() for r in kept]
        if held and all(r.spawner.offered(r.key) for r in held):
            break
    print(Spawner.shared().pid, *[r.tmpdir for r in held], flush=True)
    await run_bash(sys.argv[3], cwd=two, **kwargs)  # another workspace: not that run
anyio.run(main)
"""


@pytest.mark.timeout(60)
def test_a_killed_agent_leaves_no_reserved_run_behind(tmp_path: Path) -> None:
    """The agent SIGKILLed while a zygote waits for a reserved run: the zygote dies with
    the spawner, and the TMPDIR reserved for that run is removed."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    marker = f"sleep-{uuid.uuid4().hex}"
    agent = subprocess.Popen([sys.executable, "-c", _AGENT_WITH_RESERVATION, str(one),
                              str(two), f"exec -a {marker} sleep 300"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert agent.stdout is not None
    spawner_pid, *reserved = agent.stdout.readline().split()
    assert reserved and all(os.path.isdir(path) for path in reserved), reserved
    deadline = time.monotonic() + 20
    while not any(_argv0(p) == marker for p in _with_marker(marker)):
        assert time.monotonic() < deadline, "the command did not start"
        time.sleep(0.02)
    children = _children(int(spawner_pid))
    assert len(children) >= 2  # the command and the zygote waiting for the reserved run
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=10)
    died_at = time.monotonic()
    while not _gone(int(spawner_pid)) and time.monotonic() - died_at < 5:
        time.sleep(0.01)
    assert _gone(int(spawner_pid)), "the spawner outlived its agent"
    assert all(_gone(pid) for pid in children), "a child of the spawner outlived it"
    assert _with_marker(marker) == []
    assert not any(os.path.exists(path) for path in reserved), reserved


_AGENT_DIES_BETWEEN_MESSAGES = r"""
import anyio, os, pathlib, signal, sys, time
from sandbox.bash.linux import spawner
from sandbox.bash.run import process, reservations
from sandbox.bash.linux.confinement import ConfinementRequest
from sandbox.bash.run.process import run_bash, Limits
def running(marker):
    found = 0
    for entry in os.listdir("/proc"):
        try:
            found += entry.isdigit() and marker in open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            pass
    return found
async def main():
    cwd, command, wait, marker = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    kwargs = dict(env={"PATH": "/usr/bin:/bin"}, timeout=5, limits=Limits(),
                  confinement=ConfinementRequest())
    await run_bash("true", cwd=cwd, **kwargs)  # reserves the next run
    for _ in range(500):
        await anyio.sleep(0.01)
        held = [r for kept in reservations._reservations.values() for r in kept]
        if held and all(r.spawner.offered(r.key) for r in held):
            break
    print(spawner.Spawner.shared().pid, flush=True)
    send = spawner._send
    def dying(sock, obj, fds=None):
        if isinstance(obj, tuple) and obj[:1] == ("taken",):
            # The zygote has the command; the spawner has not heard it was taken.
            deadline = time.monotonic() + 20
            while wait == "forked" and running(marker.encode()) < 3:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            print(running(marker.encode()), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return send(sock, obj, fds)
    spawner._send = dying
    await run_bash(command, cwd=cwd, **kwargs)
    print("not through a zygote", flush=True)  # one found itself stale (/etc changed)
anyio.run(main)
"""


@pytest.mark.timeout(120)
@pytest.mark.skipif(not __import__("sandbox.bash.linux.confinement", fromlist=["detect"])
                    .detect().has("private-proc"), reason="needs a PID namespace per command")
@pytest.mark.parametrize("wait", ["at once", "forked"])
def test_an_agent_killed_before_telling_the_spawner_its_zygote_was_taken_leaves_nothing(
        wait: str, tmp_path: Path) -> None:  # fmt: skip
    """A zygote that is the first process of its own PID namespace gets the command
    before the spawner hears it was taken: the agent dying between the two (at once,
    and once the command has forked escapes) leaves no process of the command behind:
    the spawner kills the zygote as an offer nobody took, and the kernel the rest of
    its namespace."""
    for _ in range(5):  # a zygote may find itself stale (another test changed /etc)
        marker = f"sleep-{uuid.uuid4().hex}"
        command = (f"setsid bash -c 'exec -a {marker} sleep 300' & "
                   f"(exec -a {marker} sleep 301 &); exec -a {marker} sleep 302")  # fmt: skip
        agent = subprocess.Popen([sys.executable, "-c", _AGENT_DIES_BETWEEN_MESSAGES,
                                  str(tmp_path), command, wait, marker],
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert agent.stdout is not None
        spawner_pid = int(agent.stdout.readline())
        said = agent.stdout.readline().strip()
        agent.wait(timeout=30)
        if said != "not through a zygote":
            break
    assert said.isdigit(), said
    assert agent.returncode == -signal.SIGKILL
    if wait == "forked":
        assert int(said) >= 3  # the command ran, and forked its escapes
    deadline = time.monotonic() + 10
    while not _gone(spawner_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _gone(spawner_pid)
    # The spawner reaped the zygote before it exited, and the first process of a PID
    # namespace is reaped only once every other process in it is gone: nothing may be
    # left now (not after a while: another agent on this machine would remove stale
    # cgroups, killing what they hold, and hide an escape).
    time.sleep(0.1)
    assert _with_marker(marker) == [], "a process of the command outlived its agent"


def _planted_root(tmp_path: Path) -> tuple[Path, Path]:
    """A directory holding the `sandbox` package (a symbolic link to this one) and a
    module the standard library probes for and never finds (``org``: pickle and copy
    try ``from org.python.core import PyStringMap``, Jython's). The boot code of a
    process started with ``-I -S`` appends the package's directory to sys.path; a
    workspace that is that directory (an editable install) then had the process run
    whatever an agent wrote there under such a name, outside every confinement."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "sandbox").symlink_to(Path(__import__("sandbox").__file__).parent)
    marker = tmp_path / "ran"
    (root / "org").mkdir()
    (root / "org" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').write('planted module ran')\n")
    return root, marker


def test_the_spawner_imports_nothing_but_its_package_from_the_packages_directory(
        tmp_path: Path) -> None:
    import socket

    from sandbox.bash.linux.spawner import _BOOT

    root, marker = _planted_root(tmp_path)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _BOOT, str(root), str(theirs.fileno()),
             str(os.getpid())], pass_fds=(theirs.fileno(),), cwd="/",
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        theirs.close()
        ours.settimeout(30)
        try:
            ready = ours.recv(65536)  # the spawner's "ready": it imported what it needs
        finally:
            ours.close()
            _, err = proc.communicate(timeout=30)
    assert ready, err.decode(errors="replace")
    assert not marker.exists(), marker.read_text()
