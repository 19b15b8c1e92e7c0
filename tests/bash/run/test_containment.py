"""Containment, with real processes: whatever a command starts dies with it.

Every escape a shell command can attempt is run through `run_bash`, under each
containment mechanism this machine offers. Each test checks that the call returned
within its timeout (+0.5 s), that no process of the run survived, and that the test
process's own memory stayed bounded. Survivors are found by a unique marker in their
command line (a `sleep` of a unique duration, or a `: marker` comment in a shell's
`-c` text) and killed by pid at teardown, also when the test fails.

The process-group fallback ("killpg") cannot catch a child that called `setsid` and was
reparented to init: those cases are expected failures, documenting that weakness.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from sandbox.bash.linux.confinement import ConfinementRequest
from sandbox.bash.run.containment import MECHANISMS, availability
from sandbox.bash.run.doctor import detect_protections
from sandbox.bash.run.process import Limits, ProcessResult, find_bash, run_bash

pytestmark = [pytest.mark.containment, pytest.mark.anyio]

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
MiB = 1 << 20
AVAILABLE = [m for m in MECHANISMS if availability(m, find_bash()).available]
PIDS_CGROUP = availability("pids", find_bash()).available


def _mechanisms(*, setsid_escape: bool) -> list[object]:
    """All available mechanisms; the killpg fallback as an expected failure when the
    test's escape leaves the process group and is reparented away from the shell."""
    params: list[object] = []
    for name in AVAILABLE:
        if name == "killpg" and setsid_escape:
            # Not strict: killpg does catch the child when it runs before the child's
            # setsid() call, a race it usually loses.
            mark = pytest.mark.xfail(reason="killpg misses setsid escapes (documented)")
            params.append(pytest.param(name, marks=mark))
        else:
            params.append(name)
    return params


class Marker:
    """A unique token placed in the command lines of the processes a test starts."""

    def __init__(self) -> None:
        digits = "".join(secrets.choice("0123456789") for _ in range(12))
        self.duration = f"1000.{digits}"  # `sleep 1000.<digits>`: unique in /proc
        self.token = digits

    @property
    def sleep(self) -> str:
        return f"sleep {self.duration}"

    def survivors(self) -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            # Zombies have an empty cmdline: dead already, and not ours to reap.
            if self.token.encode() in cmdline:
                found.append(int(name))
        return found

    def kill_survivors(self) -> None:
        for pid in self.survivors():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def marker() -> Iterator[Marker]:
    m = Marker()
    try:
        yield m
    finally:
        m.kill_survivors()


def _no_survivors(marker: Marker) -> list[int]:
    # A SIGKILLed process can take a moment to leave /proc: give it 0.5 s.
    deadline = time.monotonic() + 0.5
    while (found := marker.survivors()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return found


class PeakRss:
    """Samples this process's RSS in a thread while a run is in flight."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.before = int(self._process.memory_info().rss)
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, int(self._process.memory_info().rss))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, int(self._process.memory_info().rss))

    @property
    def growth(self) -> int:
        return self.peak - self.before


async def _run(
    command: str,
    workspace: Path,
    *,
    timeout: float,
    containment: str = "auto",
    max_output_bytes: int = MiB,
    **kwargs: object,
) -> tuple[ProcessResult, float, PeakRss]:
    with PeakRss() as rss:
        started = time.monotonic()
        result = await run_bash(
            command,
            cwd=workspace,
            env=ENV,
            timeout=timeout,
            containment=containment,
            max_output_bytes=max_output_bytes,
            **kwargs,  # type: ignore[arg-type]
        )
        elapsed = time.monotonic() - started
    # Both streams may be full, plus interpreter noise.
    assert rss.growth <= 2 * max_output_bytes + 16 * MiB, f"RSS grew by {rss.growth} bytes"
    return result, elapsed, rss


# ------------------------------------------------------------------ escapes


@pytest.mark.timeout(30)
@pytest.mark.parametrize("containment", _mechanisms(setsid_escape=True))
async def test_setsid_background_child_dies_when_the_shell_exits(
    containment: str, marker: Marker, tmp_path: Path
) -> None:
    result, elapsed, _ = await _run(
        f"setsid {marker.sleep} & echo started", tmp_path, timeout=10, containment=containment
    )
    assert result.stdout == "started\n"
    assert elapsed < 10.5
    assert _no_survivors(marker) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("containment", _mechanisms(setsid_escape=True))
async def test_setsid_fork_daemon_dies_when_the_shell_exits(
    containment: str, marker: Marker, tmp_path: Path
) -> None:
    result, elapsed, _ = await _run(
        f"setsid -f {marker.sleep}; echo started", tmp_path, timeout=10, containment=containment
    )
    assert result.stdout == "started\n"
    assert elapsed < 10.5
    assert _no_survivors(marker) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("containment", _mechanisms(setsid_escape=True))
async def test_double_forked_daemon_dies_when_the_shell_exits(
    containment: str, marker: Marker, tmp_path: Path
) -> None:
    # The classic daemon: fork, setsid, fork again, parents exit, stdio detached.
    command = f"( setsid bash -c '( {marker.sleep} </dev/null >/dev/null 2>&1 & )' & ); exit 0"
    result, elapsed, _ = await _run(command, tmp_path, timeout=10, containment=containment)
    assert result.returncode == 0
    assert elapsed < 10.5
    assert _no_survivors(marker) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("containment", _mechanisms(setsid_escape=False))
async def test_background_job_holding_stdout_does_not_delay_the_result(
    containment: str, marker: Marker, tmp_path: Path
) -> None:
    result, elapsed, _ = await _run(
        f"{marker.sleep} & echo hi", tmp_path, timeout=30, containment=containment
    )
    assert result.stdout == "hi\n"
    assert result.returncode == 0
    assert not result.timed_out
    assert elapsed < 15, "waited for the pipe holder instead of the shell"
    assert _no_survivors(marker) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("containment", _mechanisms(setsid_escape=True))
async def test_timeout_kills_every_escape_and_keeps_the_output(
    containment: str, marker: Marker, tmp_path: Path
) -> None:
    command = (
        f"setsid -f {marker.sleep}; (setsid {marker.sleep} &); {marker.sleep} & "
        f"echo before; {marker.sleep}"
    )
    result, elapsed, _ = await _run(command, tmp_path, timeout=1, containment=containment)
    assert result.timed_out
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == "before\n"
    assert elapsed < 15  # the timeout, not the sleeps (a margin for a loaded machine)
    assert _no_survivors(marker) == []


@pytest.mark.timeout(60)
@pytest.mark.needs_pids_cgroup  # without it a fork bomb as root is unbounded
@pytest.mark.parametrize("containment", _mechanisms(setsid_escape=False))
async def test_fork_bomb_is_bounded_by_max_child_processes_and_killed_at_timeout(
    containment: str, marker: Marker, tmp_path: Path
) -> None:
    # Every bomb process is a bash fork whose cmdline still holds the marker comment;
    # each waits for its two children, so the bomb grows until the limit and stays.
    command = f": {marker.token}; bomb() {{ bomb | bomb; }}; bomb"
    result, elapsed, _ = await _run(
        command,
        tmp_path,
        timeout=2,
        containment=containment,
        limits=Limits(max_child_processes=30),
    )
    assert result.timed_out
    assert elapsed < 15  # ended at the timeout, not at the test's
    assert result.nproc_enforcement == "pids-cgroup"
    assert _no_survivors(marker) == []


@pytest.mark.timeout(30)
@pytest.mark.needs_pids_cgroup
async def test_fork_bomb_never_exceeds_the_process_limit(marker: Marker, tmp_path: Path) -> None:
    command = f": {marker.token}; bomb() {{ bomb | bomb; }}; bomb"
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(marker.survivors()))
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await _run(command, tmp_path, timeout=1.5, limits=Limits(max_child_processes=20))
        tg.cancel_scope.cancel()
    assert 0 < peak <= 21  # the shell and at most 20 more
    assert _no_survivors(marker) == []


# ------------------------------------------------------------------ resources


@pytest.mark.timeout(30)
async def test_memory_bomb_is_stopped_by_max_memory_bytes(tmp_path: Path) -> None:
    command = f"{sys.executable} -I -S -c 'b = bytearray(1 << 31)'"
    result, elapsed, _ = await _run(
        command, tmp_path, timeout=10, limits=Limits(max_memory_bytes=256 * MiB)
    )
    assert result.returncode != 0
    assert "MemoryError" in result.stderr
    assert elapsed < 10.5


@pytest.mark.timeout(30)
async def test_disk_filling_write_is_stopped_by_max_file_size_bytes(tmp_path: Path) -> None:
    result, elapsed, _ = await _run(
        "head -c 10000000 /dev/zero > big; echo $? >&2",
        tmp_path,
        timeout=10,
        limits=Limits(max_file_size_bytes=MiB),
    )
    # `head` died of SIGXFSZ: 128 + 25 as the shell reports it.
    assert result.stderr.strip().endswith("153")
    assert (tmp_path / "big").stat().st_size <= MiB
    assert elapsed < 10.5


@pytest.mark.timeout(30)
async def test_yes_is_captured_bounded_and_killed_at_timeout(tmp_path: Path) -> None:
    result, elapsed, _ = await _run("yes", tmp_path, timeout=3, max_output_bytes=64 * 1024)
    assert result.timed_out
    assert result.truncated
    assert result.stdout_bytes_dropped > 100 * MiB  # the reader kept up with the writer
    assert result.stdout.startswith("y\ny\n") and result.stdout.endswith("y\n")
    assert elapsed < 15  # ended at the timeout


@pytest.mark.timeout(60)
async def test_multi_gigabyte_output_is_read_to_the_end_in_bounded_memory(
    tmp_path: Path,
) -> None:
    size = 3 * 1024 * MiB
    result, _, rss = await _run("head -c 3G /dev/zero", tmp_path, timeout=40)
    assert result.returncode == 0
    assert not result.timed_out
    assert result.stdout_bytes_dropped == size - MiB
    assert rss.growth <= 2 * MiB + 16 * MiB


@pytest.mark.timeout(30)
async def test_reading_stdin_sees_end_of_file_at_once(tmp_path: Path) -> None:
    result, elapsed, _ = await _run(
        "read -r line; echo read=$?; cat; echo cat=$?", tmp_path, timeout=10
    )
    assert result.stdout == "read=1\ncat=0\n"
    assert elapsed < 2


# ------------------------------------------------------------------ secrets


@pytest.fixture
def agent_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    secret = "s3cr3t-" + secrets.token_hex(8)
    monkeypatch.setenv("SANDBOX_TEST_SECRET", secret)
    return secret


@pytest.mark.timeout(30)
@pytest.mark.parametrize("containment", AVAILABLE)
async def test_agent_environment_is_not_inherited(
    containment: str, agent_secret: str, tmp_path: Path
) -> None:
    result, _, _ = await _run(
        "env; echo ${SANDBOX_TEST_SECRET:-unset}", tmp_path, timeout=10, containment=containment
    )
    assert agent_secret not in result.stdout
    assert result.stdout.endswith("unset\n")


@pytest.fixture
def agent_startup_variable() -> str:
    """A NAME=value of this process's environment at exec time: what
    /proc/PID/environ shows (it never reflects later os.environ changes, which is why
    the `agent_secret` set by the test cannot be used for this)."""
    with open("/proc/self/environ", "rb") as f:
        entries = [e.decode(errors="replace") for e in f.read().split(b"\0") if e]
    return max(entries, key=len)


@pytest.mark.timeout(30)
@pytest.mark.needs_root  # to drop privileges
async def test_agent_environ_in_proc_is_unreadable_after_dropping_privileges(
    agent_startup_variable: str, request: pytest.FixtureRequest
) -> None:
    # Not under tmp_path: pytest makes its parents 0700, unreachable for another uid.
    parent = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir="/tmp"))
    os.chmod(parent, 0o755)
    workspace = parent / "w"
    workspace.mkdir()
    os.chown(workspace, 12345, 12345)
    request.addfinalizer(lambda: shutil.rmtree(parent, ignore_errors=True))
    result, _, _ = await _run(
        f"id -u; cat /proc/{os.getpid()}/environ; cat /proc/$PPID/environ",
        workspace,
        timeout=10,
        drop_privileges=True,
    )
    assert result.stdout.startswith("12345\n")
    assert agent_startup_variable not in result.stdout
    assert "Permission denied" in result.stderr


@pytest.mark.timeout(30)
async def test_report_on_agent_environ_exposure_is_honest(
    agent_startup_variable: str, tmp_path: Path
) -> None:
    """Under the default OS confinement (what ExecuteBashTool applies) a command reads
    the agent's environment through /proc only when Landlock is missing (as root without
    a privilege drop), and `detect_protections` says which is the case here."""
    result, _, _ = await _run(
        f"cat /proc/{os.getpid()}/environ", tmp_path, timeout=10,
        confinement=ConfinementRequest(),
    )
    readable = agent_startup_variable in result.stdout.replace("\0", "\n").splitlines()
    reported = detect_protections()["agent_environment_readable_by_command"]
    assert readable == reported.startswith("yes")
