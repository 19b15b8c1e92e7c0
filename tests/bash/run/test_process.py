"""The process layer as a specification: what `run_bash` gives a command, and returns."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.bash.linux import cgroups
from sandbox.bash.run import containment, reservations
from sandbox.bash.run.capture import BoundedCapture
from sandbox.bash.run.doctor import detect_protections
from sandbox.bash.run.process import (
    Limits,
    ProcessResult,
    find_bash,
    run_bash,
)
from sandbox.errors import ConfigurationError

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C"}
STRONGEST = containment.choose("auto", find_bash())


async def bash(command: str, workspace: Path, **kwargs: object) -> ProcessResult:
    options: dict[str, object] = {"env": ENV, "timeout": 10.0, **kwargs}
    return await run_bash(command, cwd=workspace, **options)  # type: ignore[arg-type]


def our_cgroup_dirs(pid: int | None = None) -> list[Path]:
    found = []
    for controller in ("", "pids", "freezer"):
        base, _ = cgroups.locate(controller)
        if base is not None:
            found += sorted(base.path.glob(f"sandbox-{pid or os.getpid()}-*"))
    return found


def leftover_cgroup_dirs() -> list[Path]:
    """Our run cgroups that hold a process, or that are not kept emptied for the next
    run (at most cgroups._POOL_SIZE per hierarchy, removed at exit)."""
    dirs = our_cgroup_dirs()
    # The next runs' reservations: their cgroups hold at most the zygote made for each.
    reserved = {Path(f).parent for kept in reservations._reservations.values()
                for held in kept for f in held.tree.placement_files}
    for d in reserved:
        assert len((d / "cgroup.procs").read_text().split()) <= 1, d
    busy = [d for d in dirs if (d / "cgroup.procs").read_text().strip() and d not in reserved]
    kept = {path for pool in cgroups._pool.values() for path in (c.path for c in pool)}
    assert all(len(pool) <= cgroups._POOL_SIZE for pool in cgroups._pool.values())
    return busy + [d for d in dirs if d not in kept and d not in reserved]


@pytest.fixture(autouse=True)
def sleep_marker() -> Iterator[str]:
    """A unique duration for long `sleep`s in a test (`sleep 1000.<digits>`); any such
    process still alive at teardown is killed by pid, also when the test failed."""
    marker = f"1000.{time.monotonic_ns() % 10**12:012d}"
    try:
        yield marker
    finally:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and marker.encode() in _cmdline(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# ------------------------------------------------------------------ bounded capture


@given(
    chunks=st.lists(st.binary(max_size=300), max_size=30),
    limit=st.integers(min_value=0, max_value=200),
)
@settings(max_examples=300, deadline=None)
def test_capture_keeps_exactly_the_first_and_last_halves(chunks: list[bytes], limit: int) -> None:
    capture = BoundedCapture(limit)
    for chunk in chunks:
        capture.feed(chunk)
    whole = b"".join(chunks)
    head, tail = limit // 2, limit - limit // 2
    assert capture.total == len(whole)
    if len(whole) <= limit:
        assert capture.dropped == 0
        assert capture.text() == whole.decode("utf-8", "replace")
    else:
        assert capture.dropped == len(whole) - limit
        kept_tail = whole[len(whole) - tail :] if tail else b""
        assert capture.text() == (
            whole[:head].decode("utf-8", "replace")
            + f"\n…[{len(whole) - limit} bytes omitted]…\n"
            + kept_tail.decode("utf-8", "replace")
        )


def test_capture_never_holds_more_than_its_limit() -> None:
    capture = BoundedCapture(1000)
    for _ in range(100):
        capture.feed(b"x" * 777)
    assert len(capture._head) + len(capture._tail) == 1000


# ------------------------------------------------------------------ what the command gets


@pytest.mark.anyio
async def test_stdout_and_stderr_are_captured_separately(tmp_path: Path) -> None:
    result = await bash("echo out; echo err >&2; exit 7", tmp_path)
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 7)
    assert not result.timed_out and not result.truncated
    assert result.killed_processes == 0


@pytest.mark.anyio
async def test_runs_in_the_workspace(tmp_path: Path) -> None:
    result = await bash("pwd", tmp_path)
    assert result.stdout == f"{tmp_path}\n"


@pytest.mark.anyio
async def test_environment_is_exactly_the_given_one(tmp_path: Path) -> None:
    result = await bash("env", tmp_path, env={"ONLY": "this"})
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    # bash itself adds PWD, SHLVL and _ ; nothing comes from the agent.
    assert names <= {"ONLY", "PWD", "SHLVL", "_"}
    assert "ONLY=this\n" in result.stdout


@pytest.mark.anyio
async def test_stdin_is_at_end_of_file(tmp_path: Path) -> None:
    result = await bash("cat; read -r x; echo $?", tmp_path)
    assert result.stdout == "1\n"


@pytest.mark.anyio
async def test_command_leads_a_new_session(tmp_path: Path) -> None:
    result = await bash("read -r stat < /proc/self/stat; echo $$ ${stat#*) }", tmp_path)
    pid, _state, _ppid, pgrp, session, *_ = result.stdout.split()
    assert pid == pgrp == session


@pytest.mark.anyio
async def test_no_startup_files_are_read(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("echo bashrc\n")
    (home / ".bash_profile").write_text("echo profile\n")
    result = await bash("echo ran", tmp_path, env={**ENV, "HOME": str(home)})
    assert result.stdout == "ran\n"


@pytest.mark.anyio
async def test_signal_death_is_a_negative_returncode(tmp_path: Path) -> None:
    result = await bash("kill -TERM $$", tmp_path)
    assert result.returncode == -signal.SIGTERM


@pytest.mark.anyio
async def test_shell_exit_is_detected_without_waiting_for_background_jobs(
    tmp_path: Path, sleep_marker: str
) -> None:
    started = time.monotonic()
    result = await bash(f"sleep {sleep_marker} & echo hi", tmp_path, timeout=60)
    # The sleep lasts 1000 s: well under that is "not waited for" (a margin for a
    # loaded CI machine; how fast is bench/'s business).
    assert time.monotonic() - started < 15
    assert result.stdout == "hi\n"
    assert result.killed_processes == 1


@pytest.mark.anyio
async def test_timeout_returns_the_output_produced_so_far(
    tmp_path: Path, sleep_marker: str
) -> None:
    result = await bash(f"echo before; echo err >&2; sleep {sleep_marker}", tmp_path, timeout=0.5)
    assert result.timed_out
    assert result.returncode == -signal.SIGKILL
    assert (result.stdout, result.stderr) == ("before\n", "err\n")


@pytest.mark.anyio
async def test_long_output_keeps_head_and_tail_and_counts_the_rest(tmp_path: Path) -> None:
    result = await bash("seq 1 100000", tmp_path, max_output_bytes=100)
    everything = "".join(f"{i}\n" for i in range(1, 100001))
    assert result.truncated
    assert result.stdout_bytes_dropped == len(everything) - 100
    assert result.stdout == (
        everything[:50] + f"\n…[{len(everything) - 100} bytes omitted]…\n" + everything[-50:]
    )


@pytest.mark.anyio
async def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    result = await bash(r"printf 'a\377b'", tmp_path)
    assert result.stdout == "a\ufffdb"


# ------------------------------------------------------------------ limits


@pytest.mark.anyio
@pytest.mark.parametrize("rlimits_via", ["preexec_fn", "prologue"])
async def test_limits_are_set_as_soft_and_hard_rlimits(tmp_path: Path, rlimits_via: str) -> None:
    limits = Limits(max_memory_bytes=512 * 2**20, max_file_size_bytes=2**20, max_child_processes=50)
    command = "ulimit -Sv; ulimit -Hv; ulimit -Sf; ulimit -Hf; ulimit -Su; ulimit -Hu; ulimit -c"
    result = await run_bash(command, cwd=tmp_path, env=ENV, timeout=10, limits=limits,
                            rlimits_via=rlimits_via)
    # bash prints -v in KiB, -f in 1024-byte blocks
    assert result.stdout.split() == ["524288", "524288", "1024", "1024", "50", "50", "0"]


@pytest.mark.anyio
async def test_no_limits_means_inherited_rlimits(tmp_path: Path) -> None:
    result = await bash("ulimit -v", tmp_path)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    expected = "unlimited" if soft == resource.RLIM_INFINITY else str(soft // 1024)
    assert result.stdout.strip() == expected


@pytest.mark.anyio
async def test_nproc_enforcement_is_reported(tmp_path: Path) -> None:
    result = await bash("true", tmp_path, limits=Limits(max_child_processes=10))
    protections = detect_protections()
    # These runs are not confined: without a cgroup, only a confined run has a user
    # namespace of its own (where RLIMIT_NPROC counts its processes only).
    assert result.nproc_enforcement == protections["max_child_processes"][
        "enforcement_unconfined"]
    unlimited = await bash("true", tmp_path)
    assert unlimited.nproc_enforcement is None


@pytest.mark.anyio
@pytest.mark.needs_pids_cgroup
async def test_max_child_processes_bounds_processes_even_as_root(
    tmp_path: Path, sleep_marker: str
) -> None:
    marker = sleep_marker
    peak = 0

    async def count_sleeps() -> None:
        nonlocal peak
        while True:
            alive = [
                p for p in os.listdir("/proc") if p.isdigit() and marker.encode() in _cmdline(p)
            ]
            peak = max(peak, len(alive))
            await anyio.sleep(0.02)

    command = f"for i in 1 2 3 4 5 6 7 8 9 10; do sleep {marker} & done"
    async with anyio.create_task_group() as tg:
        tg.start_soon(count_sleeps)
        result = await bash(command, tmp_path, timeout=1.5, limits=Limits(max_child_processes=5))
        tg.cancel_scope.cancel()
    assert result.nproc_enforcement == "pids-cgroup"
    assert "Resource temporarily unavailable" in result.stderr
    # The marker is also in the shell's own command line: the shell plus 5 children.
    assert 0 < peak <= 6


# ------------------------------------------------------------------ containment


@pytest.mark.anyio
@pytest.mark.needs_cgroup_v2
@pytest.mark.parametrize("how", ["prologue", "prologue-with-limits", pytest.param(
    "preexec-dropping-privileges", marks=pytest.mark.needs_root)])
async def test_the_shell_is_inside_its_run_cgroups_before_user_code(
    public_workspace: Path, how: str
) -> None:
    if how == "preexec-dropping-privileges":
        os.chown(public_workspace, 4242, 4242)
    limits = Limits() if how == "prologue" else Limits(max_child_processes=10)
    result = await bash(
        "cat /proc/self/cgroup",
        public_workspace,
        limits=limits,
        drop_privileges=how.endswith("privileges"),
    )
    lines = result.stdout.splitlines()
    v2 = [line for line in lines if line.startswith("0::")]
    assert v2 and f"/sandbox-{os.getpid()}-" in v2[0]
    if limits.max_child_processes is not None and result.nproc_enforcement == "pids-cgroup":
        pids = [line for line in lines if ":pids:" in line]
        assert not pids or f"/sandbox-{os.getpid()}-" in pids[0]
    assert result.containment == "cgroup2"


@pytest.mark.anyio
async def test_file_size_limit_is_never_looser_than_asked_in_posix_mode(tmp_path: Path) -> None:
    # In POSIX mode bash counts `ulimit -f` in 512-byte blocks, not 1024.
    limits = Limits(max_file_size_bytes=10_000)
    for env in (ENV, {**ENV, "POSIXLY_CORRECT": "1"}):
        result = await bash(
            "head -c 20000 /dev/zero > f; wc -c < f", tmp_path, env=env, limits=limits
        )
        assert 0 < int(result.stdout) <= 10_000


@pytest.mark.anyio
async def test_cgroups_are_removed_after_every_run(tmp_path: Path, sleep_marker: str) -> None:
    await bash(f"sleep {sleep_marker} & setsid -f sleep {sleep_marker}; true", tmp_path)
    await bash(f"sleep {sleep_marker}", tmp_path, timeout=0.2, limits=Limits(max_child_processes=5))
    assert leftover_cgroup_dirs() == []


def test_kept_cgroups_are_removed_when_the_agent_exits(tmp_path: Path) -> None:
    agent = (
        "import anyio, pathlib, sys\n"
        "from sandbox.bash.run.process import Limits, run_bash\n"
        "async def main():\n"
        "    for _ in range(3):\n"
        "        await run_bash('true', cwd=pathlib.Path(sys.argv[1]), env={}, timeout=10,\n"
        "                       limits=Limits(max_child_processes=5))\n"
        "anyio.run(main)\n"
        "import os; print(os.getpid())\n"
    )
    done = subprocess.run([sys.executable, "-c", agent, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=True)
    assert our_cgroup_dirs(int(done.stdout)) == []


@pytest.mark.anyio
async def test_cancellation_kills_the_tree_and_removes_the_cgroups(
    tmp_path: Path, sleep_marker: str
) -> None:
    marker = sleep_marker
    with anyio.move_on_after(0.5):
        await bash(f"setsid -f sleep {marker}; sleep {marker}", tmp_path, timeout=None)
    await anyio.sleep(0.05)
    alive = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and marker.encode() in _cmdline(pid)
    ]
    for pid in alive:
        os.kill(int(pid), signal.SIGKILL)
    assert alive == []
    assert leftover_cgroup_dirs() == []


@pytest.mark.anyio
async def test_concurrent_runs_are_independent(tmp_path: Path, sleep_marker: str) -> None:
    results: dict[int, ProcessResult] = {}

    async def one(i: int) -> None:
        results[i] = await bash(f"sleep 0.{i}; echo {i}; sleep {sleep_marker} &", tmp_path)

    async with anyio.create_task_group() as tg:
        for i in range(1, 6):
            tg.start_soon(one, i)
    assert {i: r.stdout for i, r in results.items()} == {i: f"{i}\n" for i in range(1, 6)}
    assert all(r.killed_processes == 1 for r in results.values())
    assert leftover_cgroup_dirs() == []


@pytest.mark.anyio
async def test_exit_is_detected_by_polling_without_pidfd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleep_marker: str
) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    started = time.monotonic()
    result = await bash(f"sleep {sleep_marker} & echo hi", tmp_path)
    assert result.stdout == "hi\n"
    assert time.monotonic() - started < 15  # not the 1000 s sleep


def _dead_pid() -> int:
    """A pid that certainly belongs to no process: a child we started and reaped."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


@pytest.mark.anyio
@pytest.mark.needs_cgroup_v2
async def test_stale_cgroups_of_dead_owners_are_removed(tmp_path: Path) -> None:
    base, _ = cgroups.locate("")
    assert base is not None  # needs_cgroup_v2
    stale = base.path / f"sandbox-{_dead_pid()}-7"
    stale.mkdir()
    containment._reset_detection_for_tests()
    try:
        await bash("true", tmp_path)
    finally:
        if stale.exists():
            stale.rmdir()
    assert not stale.exists()


def test_detect_protections_names_the_mechanism_in_use() -> None:
    report = detect_protections()
    assert report["containment"] in containment.MECHANISMS
    assert report["mechanisms"][report["containment"]]["available"]
    for name, entry in report["mechanisms"].items():
        assert name in containment.MECHANISMS
        assert entry["detail"], f"{name} must say where, or why not"
    assert report["running_as_root"] == (os.geteuid() == 0)


# ------------------------------------------------------------------ errors


@pytest.mark.anyio
async def test_missing_workspace_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigurationError, match=f"{missing} does not exist"):
        await bash("true", missing)


@pytest.mark.anyio
async def test_workspace_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ConfigurationError, match="not a directory"):
        await bash("true", file)


@pytest.mark.anyio
async def test_missing_bash_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigurationError, match="bash was not found on PATH"):
        await bash("true", tmp_path)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "name", ["BASH_ENV", "SHELLOPTS", "BASH_FUNC_builtin%%", "LD_PRELOAD", "LD_LIBRARY_PATH"]
)
async def test_environment_that_runs_code_at_startup_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigurationError, match=f"env sets {name}"):
        await bash("true", tmp_path, env={name: "x"})


@pytest.mark.anyio
async def test_nul_in_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="NUL"):
        await bash("echo a\0b", tmp_path)


@pytest.mark.anyio
async def test_oversized_command_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="write long scripts to a file"):
        await bash("#" * 200_000, tmp_path)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_limits_must_be_positive_ints(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="positive int"):
        Limits(max_memory_bytes=bad)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_unknown_containment_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown containment"):
        await bash("true", tmp_path, containment="chroot")


@pytest.fixture
def public_workspace() -> Iterator[Path]:
    """A workspace whose parents any uid can traverse (pytest's tmp_path is 0700)."""
    parent = Path(tempfile.mkdtemp(prefix="sandbox-test-", dir="/tmp"))
    os.chmod(parent, 0o755)
    workspace = parent / "w"
    workspace.mkdir()
    try:
        yield workspace
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.anyio
@pytest.mark.needs_root
async def test_drop_privileges_refuses_a_root_owned_private_workspace(
    public_workspace: Path,
) -> None:
    os.chmod(public_workspace, 0o755)
    with pytest.raises(ConfigurationError, match="chown it to an unprivileged user"):
        await bash("true", public_workspace, drop_privileges=True)


@pytest.mark.anyio
@pytest.mark.needs_root
async def test_drop_privileges_refuses_an_unreachable_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    os.chown(workspace, 4242, 4242)
    os.chmod(tmp_path, 0o700)
    with pytest.raises(ConfigurationError, match="is not searchable by it"):
        await bash("true", workspace, drop_privileges=True)


@pytest.mark.anyio
@pytest.mark.needs_root
async def test_drop_privileges_runs_as_the_workspace_owner(public_workspace: Path) -> None:
    os.chown(public_workspace, 4242, 4242)
    result = await bash("id -u; id -g; id -G; touch made", public_workspace, drop_privileges=True)
    assert result.stdout.split() == ["4242", "4242", "4242"]
    assert (public_workspace / "made").stat().st_uid == 4242
