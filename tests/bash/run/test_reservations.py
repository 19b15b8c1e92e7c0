"""Reserved runs (reservations._reserve): each run reserves the next one like it (its cgroups,
its private TMPDIR) and the spawner sets up a zygote for it ahead. What a reserved run
must not change: the TMPDIR is private and the agent's own, the zygote is not a process
of the unprivileged uid before its request, a forked agent does not share its parent's
reservations. Real processes throughout; the confinement tests run every escape both
ways (tests/bash/linux/test_confinement.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.run import process, reservations

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(60),
    pytest.mark.needs_root,  # drop_privileges and cgroups need root
]


def ctx() -> ToolContext:
    return ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True))


@pytest.fixture
def workspace(shared_workspace: Path) -> Path:
    return shared_workspace


async def reserved_after(tool: ExecuteBashTool) -> process._Reservation:
    """Run `true`, then wait until the run it reserved has its zygote offered."""
    reservations._last_signature = None
    result = await tool.run_async(args={"command": "true"}, tool_context=ctx())
    assert result["returncode"] == 0, result
    signature = reservations._last_signature
    assert signature is not None
    for _ in range(1000):
        await anyio.sleep(0.01)
        kept = reservations._reservations.get(signature, [])
        if kept and all(r.spawner.offered(r.key) for r in kept):
            return kept[0]  # the one the next run takes
    raise AssertionError("no reserved run was offered")


async def run(tool: ExecuteBashTool, command: str) -> dict[str, Any]:
    result: dict[str, Any] = await tool.run_async(args={"command": command},
                                                  tool_context=ctx())  # fmt: skip
    return result


async def test_a_reserved_tmpdir_and_zygote_stay_roots_until_the_run_takes_them(
        workspace: Path) -> None:  # fmt: skip
    """With drop_privileges the command runs as nobody; until its run comes, its TMPDIR
    is root's (nobody's other processes cannot plant files in it) and its zygote runs
    as root (it is not one of nobody's processes: not in its RLIMIT_NPROC count, not
    signalable by them)."""
    (workspace / "who.sh").write_text(
        'id -u; stat -c "%U %a" "$TMPDIR"; cut -d" " -f19 /proc/self/stat\n')
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(drop_privileges=True))
    held = await reserved_after(tool)
    assert held.tmpdir is not None
    st = os.stat(held.tmpdir)
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)
    spawner = held.spawner
    with spawner._lock:
        zygote = spawner._offers[held.key].pid
    status = Path(f"/proc/{zygote}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert uids == ["0", "0", "0", "0"], status
    taken = reservations._reservations_taken
    result = await run(tool, "bash who.sh")
    assert reservations._reservations_taken == taken + 1
    # Its priority is ours again (the zygote set itself up at a lower one).
    nice = str(os.getpriority(os.PRIO_PROCESS, 0))
    assert result["stdout"].splitlines() == ["65534", "nobody 700", nice], result
    assert not os.path.exists(held.tmpdir)  # removed with the run


async def test_a_writable_path_made_after_the_first_run_is_granted(workspace: Path) -> None:
    """Landlock rules are built once and kept; a path absent then was never granted."""
    later = workspace.parent / f"{workspace.name}-later"
    tool = ExecuteBashTool(workspace=workspace,
                           policy=BashToolPolicy(writable_paths=(str(later),)))  # fmt: skip
    try:
        await reserved_after(tool)
        later.mkdir()
        later.chmod(0o777)  # the command runs as nobody (a workspace anyone may write)
        (workspace / "w.sh").write_text(f"echo x > {later}/made && echo ok\n")
        result = await run(tool, "bash w.sh")
        assert result["stdout"] == "ok\n", result
        assert (later / "made").read_text() == "x\n"
    finally:
        shutil.rmtree(later, ignore_errors=True)


_FORKING_AGENT = r"""
import anyio, os, sys
from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.run import reservations
ws = sys.argv[1]
ctx = lambda: ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True))
tool = ExecuteBashTool(workspace=ws, policy=BashToolPolicy())
async def first():
    await tool.run_async(args={"command": "true"}, tool_context=ctx())
    for _ in range(500):
        await anyio.sleep(0.01)
        held = [r for kept in reservations._reservations.values() for r in kept]
        if held and all(r.spawner.offered(r.key) for r in held):
            return
    raise SystemExit("no reserved run was offered")
anyio.run(first)
async def second(who):
    taken = reservations._reservations_taken
    r = await tool.run_async(args={"command": "bash run.sh"}, tool_context=ctx())
    print(who, reservations._reservations_taken - taken, r["returncode"], r["stdout"].replace("\n", "|"),
          flush=True)
pid = os.fork()
if pid == 0:
    try:
        anyio.run(second, "child")
    finally:
        os._exit(0)
anyio.run(second, "parent")
os.waitpid(pid, 0)
# The child's exit did not discard the parent's reservations: the next run works.
anyio.run(second, "parent-again")
"""


def test_a_forked_agent_does_not_share_its_parents_reservation(workspace: Path) -> None:
    """multiprocessing's 'fork' workers, os.fork: the parent's reserved run (its TMPDIR,
    its cgroups, its zygote) is the parent's alone; the child makes its own."""
    (workspace / "run.sh").write_text(
        'echo "$TMPDIR"; grep "^0::" /proc/self/cgroup; sleep 1; ls "$TMPDIR" | wc -l\n'
        'touch "$TMPDIR/mine"\n')
    proc = subprocess.run([sys.executable, "-c", _FORKING_AGENT, str(workspace)],
                          capture_output=True, text=True, timeout=50)  # fmt: skip
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert set(lines) == {"parent", "child", "parent-again"}, (proc.stdout, proc.stderr)
    runs = {who: line.split(" ", 2) for who, line in lines.items()}
    assert runs["parent"][:2] == ["1", "0"]  # took its reservation
    assert runs["child"][:2] == ["0", "0"]  # made its own run
    parent_tmp, parent_cg, parent_files = runs["parent"][2].split("|")[:3]
    child_tmp, child_cg, child_files = runs["child"][2].split("|")[:3]
    assert parent_tmp != child_tmp and parent_cg != child_cg
    assert parent_files == child_files == "0"  # each saw an empty TMPDIR of its own
    assert runs["parent-again"][1] == "0", lines  # returncode


async def test_a_reserved_tmpdir_removed_before_its_run_is_not_used(workspace: Path) -> None:
    """A /tmp cleaner removing the reserved TMPDIR: the run is made afresh, with a TMPDIR
    of its own, and the reservation (its zygote, its cgroups) is let go of."""
    (workspace / "t.sh").write_text('echo x > "$TMPDIR/f" && echo "$TMPDIR"\n')
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(drop_privileges=True))
    held = await reserved_after(tool)
    assert held.tmpdir is not None
    cgroups = [Path(f).parent for f in held.tree.placement_files]
    assert cgroups and all(c.is_dir() for c in cgroups)
    os.rmdir(held.tmpdir)
    taken = reservations._reservations_taken
    result = await run(tool, "bash t.sh")
    assert result["returncode"] == 0, result
    assert result["stdout"].strip() != held.tmpdir
    assert reservations._reservations_taken == taken
    assert not any(c.exists() for c in cgroups)


async def test_an_idle_agent_holds_no_inheritable_descriptor_of_a_zygote(
        workspace: Path) -> None:  # fmt: skip
    """A program the agent starts (os.system, close_fds=False) must not inherit an
    offered zygote's sockets: with them it could have the spawner write files as root,
    or run code in a zygote that has not dropped its privileges yet."""
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(drop_privileges=True))
    held = await reserved_after(tool)
    with held.spawner._lock:
        offer = held.spawner._offers[held.key]
        fds = [offer.requests.fileno(), offer.reply.fileno(), offer.pidfd]
    assert not any(os.get_inheritable(fd) for fd in fds)
    seen = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True,
                          close_fds=False).stdout.split()  # fmt: skip
    assert not set(map(str, fds)) & set(seen)


async def test_a_refused_class_in_a_spawner_message_runs_nothing() -> None:
    from sandbox.bash.linux.spawner import _recv, _send

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, ("touch /tmp/never-made-by-a-message",))

    import socket

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        _send(ours, {"argv": ["x"], "payload": Payload()})
        with pytest.raises(Exception, match=r"refused in a spawner message: posix\.system"):
            _recv(theirs)
    assert not os.path.exists("/tmp/never-made-by-a-message")


async def test_writable_mounts_are_nodev(workspace: Path) -> None:
    tool = ExecuteBashTool(workspace=workspace,
                           policy=BashToolPolicy(writable_paths=("/dev/shm",)))
    await reserved_after(tool)  # the reserved path; tests/bash/linux/test_confinement.py has both
    (workspace / "m.sh").write_text(
        'grep -E " ($(pwd)|$TMPDIR|/dev/shm) " /proc/self/mountinfo | grep -c nodev\n')
    result = await run(tool, "bash m.sh")
    assert result["stdout"].strip() == "3", result


async def test_runs_go_on_when_the_spawner_holding_reservations_died(
        workspace: Path, tmp_path: Path) -> None:  # fmt: skip
    """Reservations of two policies; the spawner SIGKILLed: each next run is made by a
    new spawner, none fails on the old one's closed socket."""
    other = tmp_path / "other"
    other.mkdir()
    tools = [ExecuteBashTool(workspace=workspace, policy=BashToolPolicy()),
             ExecuteBashTool(workspace=other, policy=BashToolPolicy(network="loopback"))]
    for tool in tools:
        held = await reserved_after(tool)
    os.kill(held.spawner.pid, 9)
    await anyio.sleep(0.2)
    for tool in (*tools, *tools):
        result = await run(tool, "echo ok")
        assert result.get("stdout") == "ok\n", result


async def test_a_zygote_dead_while_offered_does_not_take_its_run_with_it(
        workspace: Path) -> None:  # fmt: skip
    """The offered zygote SIGKILLed (say by the OOM killer) before the run that takes
    it: the run is made afresh and completes; it is not killed as the dead zygote's."""
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy())
    held = await reserved_after(tool)
    with held.spawner._lock:
        zygote = held.spawner._offers[held.key].pid
    os.kill(zygote, 9)
    (workspace / "s.sh").write_text("sleep 0.3; echo done\n")
    result = await run(tool, "bash s.sh")
    assert (result.get("stdout"), result.get("returncode")) == ("done\n", 0), result


async def test_an_env_value_of_a_str_subclass_runs(workspace: Path) -> None:
    """An enum member as an env value (a str subclass): the spawner, which refuses any
    class in its messages, gets plain text, and nothing else running is lost."""
    import enum

    class Method(str, enum.Enum):
        GET = "GET"

    tool = ExecuteBashTool(workspace=workspace,
                           policy=BashToolPolicy(env={"PATH": "/usr/bin:/bin", "M": Method.GET}))
    for _ in range(2):  # fresh, then through the run reserved by the first
        result = await run(tool, 'echo "$M"')
        assert result.get("stdout") == "GET\n", result


_AGENT_WITHOUT_SYS_NICE = r"""
import anyio, sys
from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.run import process, reservations
ctx = lambda: ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True))
tool = ExecuteBashTool(workspace=sys.argv[1], policy=BashToolPolicy())
async def main():
    for _ in range(4):
        r = await tool.run_async(args={"command": "true"}, tool_context=ctx())
        assert r["returncode"] == 0, r
        for _ in range(1000):  # until the next run's zygotes are offered
            await anyio.sleep(0.01)
            kept = reservations._reservations.get(reservations._last_signature, [])
            if kept and all(x.spawner.offered(x.key) for x in kept):
                break
    print(reservations._reservations_taken)
anyio.run(main)
"""


def test_reserved_runs_work_for_root_without_cap_sys_nice(workspace: Path) -> None:
    """Root in a container often lacks CAP_SYS_NICE: a zygote may not lower its
    priority then (it could not give it back), and must still set itself up."""
    proc = subprocess.run(
        ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", sys.executable, "-c",
         _AGENT_WITHOUT_SYS_NICE, str(workspace)],
        capture_output=True, text=True, timeout=50)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip()) == 3, (proc.stdout, proc.stderr[-2000:])


def test_a_child_forked_while_another_thread_probes_does_not_hang() -> None:
    """A fork while another thread held a lock of the first command's probes left the
    child waiting for it forever."""
    import threading

    from sandbox.bash.linux import confinement, landlock, namespaces, spawner
    from sandbox.bash.run import containment

    locks = [confinement._detect_lock, landlock._rules_lock, namespaces._ns_lock,
             containment._detect_lock, spawner.Spawner._shared_lock]  # fmt: skip
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait()
        for lock in locks:
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        pid = os.fork()
        if pid == 0:
            ok = all(lock.acquire(timeout=2) for lock in (
                confinement._detect_lock, landlock._rules_lock, namespaces._ns_lock,
                containment._detect_lock, spawner.Spawner._shared_lock))  # fmt: skip
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        holder.join()
