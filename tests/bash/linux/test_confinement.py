"""The second wall: every escape measured in issue 9 fails under the DEFAULT policy.

Real commands through `ExecuteBashTool`, as root (this process) and as an unprivileged
command (drop_privileges=True runs it as nobody); one test runs the whole agent as an
unprivileged user. Each escape is checked by its effect (the file is not there, the
listener saw no connection, the process is alive), not only by an error message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.linux import confinement
from sandbox.bash.linux.confinement import ConfinementRequest, seccomp_program
from sandbox.bash.run import reservations
from sandbox.errors import ConfigurationError, PolicyFileError
from sandbox.policies import resolve
from tests.paths import REPO

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ROOT = os.geteuid() == 0
needs_root = pytest.mark.needs_root  # the escapes were measured as root
needs_landlock = pytest.mark.needs_landlock_scopes
# Whose identity the command runs under: the agent's (root) or nobody's (dropping
# privileges needs root).
IDENTITIES = ("root", pytest.param("nobody", marks=pytest.mark.needs_root))


def _denied(stderr: str) -> bool:
    """EACCES from Landlock, or EROFS from the read-only mounts (whichever is first)."""
    return "Permission denied" in stderr or "Read-only file system" in stderr


def _denials(stderr: str) -> int:
    return stderr.count("Permission denied") + stderr.count("Read-only file system")


def ctx() -> ToolContext:
    return ToolContext(function_call_id="c1", tool_confirmation=ToolConfirmation(confirmed=True))


@pytest.fixture
def workspace(shared_workspace: Path) -> Path:
    return shared_workspace


# How a command is started: forked by the spawner and set up then ("fresh"), or by a
# zygote the spawner set up ahead for a run reserved like it ("zygote", see
# reservations._reserve). Every test below runs both ways.
SPAWN_PATHS = ("fresh", "zygote")


@pytest.fixture(autouse=True, params=SPAWN_PATHS)
def spawn_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    mode: str = request.param
    if mode == "fresh":
        monkeypatch.setattr(reservations, "_reserve", lambda *args: None)
    return mode


async def run(workspace: Path, command: str, identity: str = "root", **policy: Any
              ) -> dict[str, Any]:  # fmt: skip
    """Run `command` as a script the policy cannot see into (`bash .escape.sh`), so only
    the OS layer stands between it and the machine. Under the "zygote" spawn path, a
    first run of `true` reserves the next, whose zygote is awaited and must serve it."""
    policy.setdefault("drop_privileges", identity == "nobody")
    script = workspace / ".escape.sh"
    script.write_text(command + "\n")
    script.chmod(0o644)
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(**policy))
    zygote = reservations._reserve.__name__ == "_reserve"  # not patched out
    held = None
    if zygote:
        reservations._last_signature = None
        warm = await tool.run_async(args={"command": "true"}, tool_context=ctx())
        signature = reservations._last_signature
        # None when the run was refused (confinement='required' on a machine lacking a
        # layer) or could not take one (rlimits_via='prologue' without confinement).
        if signature is not None and "error" not in warm:
            for _ in range(1000):  # made at the event loop's next turn, then offered
                await anyio.sleep(0.01)
                kept = reservations._reservations.get(signature, [])
                if kept and all(r.spawner.offered(r.key) for r in kept):
                    held = kept[0]
                    break
            else:
                raise AssertionError("the reserved run's zygote was never offered")
    taken_before = reservations._reservations_taken
    result: dict[str, Any] = await tool.run_async(args={"command": "bash .escape.sh"},
                                                  tool_context=ctx())  # fmt: skip
    if zygote and held is not None:
        assert reservations._reservations_taken == taken_before + 1, result
    return result


@pytest.fixture
def simulate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set SANDBOX_CONFINEMENT_UNAVAILABLE for one test; detection is redone."""

    def set_(value: str) -> None:
        monkeypatch.setenv(confinement.UNAVAILABLE_ENV, value)
        confinement._reset_detection_for_tests()

    yield set_
    monkeypatch.delenv(confinement.UNAVAILABLE_ENV, raising=False)
    confinement._reset_detection_for_tests()


# ------------------------------------------------------------------ the escape table


@needs_root
@needs_landlock
@pytest.mark.parametrize("identity", IDENTITIES)
@pytest.mark.parametrize("target", ["/var/tmp", "/root"])
async def test_writing_outside_the_workspace_fails(workspace: Path, identity: str,
                                                   target: str) -> None:  # fmt: skip
    path = Path(target) / f"sandbox-escape-{uuid.uuid4().hex}"
    try:
        result = await run(workspace, f"echo pwned > {path}", identity)
        assert result["returncode"] != 0
        assert _denied(result["stderr"])
        assert not path.exists()
    finally:
        path.unlink(missing_ok=True)


@needs_root
@needs_landlock
@pytest.mark.parametrize("identity", IDENTITIES)
async def test_reading_a_root_only_file_under_root_fails(workspace: Path, identity: str) -> None:
    secret = Path("/root") / f"sandbox-secret-{uuid.uuid4().hex}"
    secret.write_text("TOP-SECRET-VALUE\n")
    secret.chmod(0o600)
    try:
        result = await run(workspace, f"cat {secret}; ls /root", identity)
        assert "TOP-SECRET-VALUE" not in result["stdout"]
        assert secret.name not in result["stdout"]
        assert _denials(result["stderr"]) == 2
    finally:
        secret.unlink()


@needs_root
@needs_landlock
async def test_system_secrets_in_etc_are_not_readable_but_etc_is(workspace: Path) -> None:
    # Root owns /etc/shadow (0640): without Landlock, a root command without
    # capabilities could still read it as its owner.
    result = await run(workspace, "cat /etc/shadow; head -1 /etc/passwd")
    assert _denied(result["stderr"])
    assert result["stdout"].startswith("root:x:0:0:")


@needs_landlock
@pytest.mark.parametrize("identity", IDENTITIES)
async def test_the_agents_environment_is_unreadable(workspace: Path, identity: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    result = await run(workspace, f"cat /proc/{os.getpid()}/environ | tr '\\0' '\\n'", identity)
    assert "PATH=" not in result["stdout"]
    # With a private /proc the agent is not even listed; without, Landlock's ptrace rule.
    hidden = confinement.detect().has("private-proc")
    assert ("No such file or directory" if hidden else "Permission denied") in result["stderr"]


@needs_landlock
async def test_landlock_alone_still_hides_the_agents_environment(workspace: Path,
                                                                 simulate: Any) -> None:  # fmt: skip
    simulate("private-proc")
    result = await run(workspace, f"cat /proc/{os.getpid()}/environ | tr '\\0' '\\n'")
    assert "PATH=" not in result["stdout"]
    assert _denied(result["stderr"])


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


def _accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.parametrize("identity", IDENTITIES)
async def test_connecting_to_a_loopback_listener_fails(workspace: Path, identity: str,
                                                       listener: socket.socket) -> None:  # fmt: skip
    port = listener.getsockname()[1]
    result = await run(workspace, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected",
                       identity)  # fmt: skip
    assert "connected" not in result["stdout"]
    assert result["returncode"] != 0
    assert not _accepted(listener)


async def test_network_host_reaches_the_listener(workspace: Path,
                                                 listener: socket.socket) -> None:  # fmt: skip
    port = listener.getsockname()[1]
    result = await run(workspace, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected",
                       network="host")  # fmt: skip
    assert result["stdout"] == "connected\n"
    assert _accepted(listener)


@pytest.mark.needs_program("python3")
async def test_network_loopback_is_private(workspace: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    script = (
        "import socket\n"
        "s = socket.create_server(('127.0.0.1', 0))\n"
        "c = socket.create_connection(s.getsockname()); print('own server: ok')\n"
        f"try: socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "except OSError as e: print('host listener:', type(e).__name__)\n"
    )
    (workspace / "net.py").write_text(script)
    result = await run(workspace, "python3 net.py", network="loopback")
    assert result["stdout"] == "own server: ok\nhost listener: ConnectionRefusedError\n", result
    assert not _accepted(listener)
    result = await run(workspace, "python3 net.py")  # network="none": not even its own
    assert "own server: ok" not in result["stdout"]


@needs_landlock
@pytest.mark.parametrize("identity", IDENTITIES)
async def test_killing_a_process_outside_the_tree_fails(workspace: Path, identity: str) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        result = await run(workspace, f"kill -9 {victim.pid}; kill -TERM {victim.pid}", identity)
        # In a PID namespace of its own the victim's pid names nothing; without one,
        # Landlock's signal scope refuses.
        hidden = confinement.detect().has("private-proc")
        why = "No such process" if hidden else "Operation not permitted"
        assert result["stderr"].count(why) == 2, result
        time.sleep(0.05)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


@needs_landlock
async def test_landlock_alone_still_refuses_signals_outside(workspace: Path,
                                                            simulate: Any) -> None:  # fmt: skip
    simulate("private-proc")
    victim = subprocess.Popen(["sleep", "60"])
    try:
        result = await run(workspace, f"kill -9 {victim.pid}; kill -TERM {victim.pid}")
        assert result["stderr"].count("Operation not permitted") == 2, result
        time.sleep(0.05)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("identity", IDENTITIES)
async def test_no_capabilities_are_left(workspace: Path, identity: str) -> None:
    result = await run(workspace, "grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status",
                       identity)  # fmt: skip
    fields = dict(line.split(":\t") for line in result["stdout"].splitlines())
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb") + (("CapBnd",) if ROOT else ()):
        assert fields[name] == "0000000000000000", (name, fields)
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"


def _survivors(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(name))
    return found


@needs_root
@needs_landlock
async def test_leaving_the_cgroup_fails_and_nothing_survives(workspace: Path) -> None:
    marker = f"301.{os.getpid()}{int(time.time() * 1000) % 100000}"
    procs = [p for p in ("/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs",
                         "/sys/fs/cgroup/pids/cgroup.procs",
                         "/sys/fs/cgroup/freezer/cgroup.procs") if os.path.exists(p)]  # fmt: skip
    assert procs
    command = "".join(
        f"( echo $BASHPID > {p} && echo escaped {p}; setsid sleep {marker} ) & " for p in procs
    ) + "sleep 0.2"
    try:
        result = await run(workspace, command)
        assert "escaped" not in result["stdout"]
        assert _denials(result["stderr"]) == len(procs)
        assert _survivors(marker) == []
    finally:
        for pid in _survivors(marker):
            os.kill(pid, signal.SIGKILL)


async def test_seccomp_denies_namespaces_and_ptrace(workspace: Path) -> None:
    result = await run(workspace, "unshare -r true; echo $?")
    assert "Operation not permitted" in result["stderr"]
    assert result["stdout"].strip() == "1"


needs_private_proc = pytest.mark.needs_private_proc


@needs_private_proc
@pytest.mark.parametrize("identity", IDENTITIES)
async def test_processes_outside_the_command_are_invisible(workspace: Path,
                                                           identity: str) -> None:  # fmt: skip
    # Another command runs meanwhile, and an unrelated process of the agent's user.
    marker = f"sleep 1000.{uuid.uuid4().int % 10**9}"
    outsider = subprocess.Popen(["bash", "-c", f"exec -a sandbox-outsider {marker}"])
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(
        timeout_seconds=30, drop_privileges=identity == "nobody"))  # fmt: skip
    (workspace / "other.sh").write_text(f"exec -a sandbox-other {marker}\n")

    async def other() -> None:
        await tool.run_async(args={"command": "bash other.sh"}, tool_context=ctx())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await anyio.sleep(0.3)  # the other command runs
            result = await run(
                workspace,
                f"cat /proc/{os.getpid()}/cmdline /proc/{outsider.pid}/cmdline; "
                "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; "
                "echo self=$(readlink /proc/self)",
                identity,
            )
            tg.cancel_scope.cancel()
    finally:
        outsider.kill()
        outsider.wait()
    out = result["stdout"]
    assert "sandbox-outsider" not in out and "sandbox-other" not in out, out
    assert "pytest" not in out and sys.executable not in out, out
    assert result["stderr"].count("No such file or directory") == 2, result
    # Only the command's own tree is listed: bash (pid 1), the loop's children.
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    assert len(pids) > 10  # the agent sees the machine ...
    assert out.count("bash") <= 3, out  # ... the command sees itself
    assert "self=" in out and int(out.split("self=")[1]) < 10
    assert result["containment"]["private-proc"].startswith("active")


@needs_private_proc
async def test_private_proc_keeps_every_other_layer(workspace: Path) -> None:
    result = await run(workspace, "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
                                  "cat /proc/1/environ | tr '\\0' '\\n' | grep -c PATH=")  # fmt: skip
    fields = dict(line.split(":\t") for line in result["stdout"].splitlines()[:3])
    assert fields == {"CapEff": "0" * 16, "NoNewPrivs": "1", "Seccomp": "2"}, result
    # Its own environment, through its own /proc: readable, as it would be anyway.
    assert result["stdout"].splitlines()[-1] == "1"


# ------------------------------------------------------------------ the filesystem


@needs_root
@needs_landlock
@needs_private_proc
async def test_a_secret_added_to_etc_while_the_agent_runs_is_covered(workspace: Path) -> None:
    # /etc is granted whole, its entries nobody may read covered in the command's mount
    # namespace; a new one (or one chmod'ed) must be covered from the next command on,
    # zygote prepared before the change included.
    await run(workspace, "true")  # the spawner and its zygote exist now
    secret = Path(f"/etc/sandbox-test-secret-{uuid.uuid4().hex[:8]}")
    fd = os.open(secret, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"TOP-SECRET\n")
        os.close(fd)
        result = await run(workspace, f"cat {secret}; chmod 644 {secret}; echo x >> {secret}; "
                                      "cat /etc/hostname >/dev/null && echo etc-readable")  # fmt: skip
        assert "TOP-SECRET" not in result["stdout"]
        assert "etc-readable" in result["stdout"]
        assert _denied(result["stderr"]), result
        assert secret.read_text() == "TOP-SECRET\n" and secret.stat().st_mode & 0o777 == 0o600
        os.chmod(secret, 0o644)  # made public: readable from the next command on
        public = await run(workspace, f"cat {secret}")
        assert public["stdout"] == "TOP-SECRET\n", public
        os.chmod(secret, 0o600)
        again = await run(workspace, f"cat {secret}")
        assert "TOP-SECRET" not in again["stdout"] and _denied(again["stderr"])
    finally:
        secret.unlink()


@needs_landlock
async def test_concurrent_commands_cannot_reach_each_others_tmpdir(workspace: Path) -> None:
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(timeout_seconds=30))
    first: dict[str, Any] = {}

    (workspace / "holder.sh").write_text(
        'echo MINE > "$TMPDIR/f"; echo "$TMPDIR" > where; sleep 2; cat "$TMPDIR/f"\n')

    async def holder() -> None:
        first.update(await tool.run_async(args={"command": "bash holder.sh"},
                                          tool_context=ctx()))  # fmt: skip

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        for _ in range(500):  # the holder has written where its TMPDIR is
            if (workspace / "where").exists():
                break
            await anyio.sleep(0.02)
        await anyio.sleep(0.05)
        result = await run(workspace, 'd=$(cat where); cat "$d/f"; echo x > "$d/g"; ls "$d"')
    assert "MINE" not in result["stdout"], result
    assert _denials(result["stderr"]) == 3, result
    assert first["stdout"] == "MINE\n"


@needs_landlock
async def test_a_workspace_made_again_is_granted_again(workspace: Path) -> None:
    # The prepared Landlock rules name the old directory's inode: they must be rebuilt.
    assert (await run(workspace, "echo one > f && cat f"))["stdout"] == "one\n"
    shutil.rmtree(workspace)
    workspace.mkdir()
    workspace.chmod(0o777)
    result = await run(workspace, "echo two > f && cat f")
    assert result["stdout"] == "two\n", result




@needs_landlock
async def test_private_tmpdir_is_writable_and_removed(workspace: Path) -> None:
    result = await run(workspace, 'echo "$TMPDIR"; echo x > "$TMPDIR/f" && echo ok; ls /tmp')
    tmpdir, ok = result["stdout"].splitlines()
    assert ok == "ok"
    assert _denied(result["stderr"])  # /tmp itself is out of reach
    assert not os.path.exists(tmpdir)
    again = await run(workspace, f'echo "$TMPDIR"; ls {tmpdir}')
    assert again["stdout"].strip() != tmpdir


@needs_landlock
async def test_another_workspace_is_unreachable(workspace: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("OTHER-SECRET")
    result = await run(workspace, f"cat {other}/secret.txt; echo x > {other}/new")
    assert "OTHER-SECRET" not in result["stdout"]
    assert _denials(result["stderr"]) == 2
    assert not (other / "new").exists()
    extra = await run(workspace, f"cat {other}/secret.txt; echo x > {other}/new",
                      readable_paths=(str(other),))  # fmt: skip
    assert extra["stdout"] == "OTHER-SECRET" and _denied(extra["stderr"])
    extra = await run(workspace, f"echo x > {other}/new", writable_paths=(str(other),))
    assert extra["returncode"] == 0 and (other / "new").read_text() == "x\n"


@needs_landlock
async def test_read_only_workspace_refuses_writes_the_policy_missed(workspace: Path) -> None:
    (workspace / "a.txt").write_text("b\na\n")
    result = await run(workspace, "cat a.txt; sort -o sorted a.txt", filesystem="read-only")
    assert result["stdout"] == "b\na\n"
    assert _denied(result["stderr"]) and result["returncode"] != 0
    assert not (workspace / "sorted").exists()


@needs_landlock
async def test_shipped_readonly_policy_is_read_only_at_the_os_level(workspace: Path) -> None:
    (workspace / "a.txt").write_text("b\na\n")
    shipped = BashToolPolicy.from_toml(resolve("readonly"))
    assert not shipped.check("sort -o sorted a.txt").allowed  # the policy layer refuses it
    # As if the policy had missed it (no program specs): the OS layer still refuses.
    missed = dataclasses.replace(shipped, program_specs={})
    tool = ExecuteBashTool(workspace=workspace, policy=missed)
    result = await tool.run_async(args={"command": "sort -o sorted a.txt"}, tool_context=ctx())
    assert _denied(result["stderr"])
    assert not (workspace / "sorted").exists()


@needs_landlock
@pytest.mark.needs_program("git")
async def test_git_readonly_still_reads_history(workspace: Path) -> None:
    workspace.chmod(0o755)  # only root may write: commands keep root's identity
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(workspace)}  # fmt: skip
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        subprocess.run(["git", *argv], cwd=workspace, check=True, env={**os.environ, **env})
    tool = ExecuteBashTool(workspace=workspace,
                           policy=BashToolPolicy.from_toml(resolve("git-readonly")))  # fmt: skip
    for command in ("git log --oneline", "git status", "git show --stat HEAD"):
        result = await tool.run_async(args={"command": command}, tool_context=ctx())
        assert result["returncode"] == 0, (command, result)
    assert "first" in result["stdout"]


# ------------------------------------------------------------------ required / best-effort


async def test_required_refuses_when_a_layer_is_missing(workspace: Path, simulate: Any) -> None:
    simulate("seccomp")
    result = await run(workspace, "touch ran", confinement="required")
    assert "seccomp" in result["error"] and "required" in result["error"]
    assert not (workspace / "ran").exists()


async def test_required_refuses_without_landlock(workspace: Path, simulate: Any) -> None:
    simulate("landlock")
    result = await run(workspace, "touch ran", confinement="required")
    assert "landlock-fs" in result["error"]
    assert not (workspace / "ran").exists()


async def test_best_effort_runs_and_says_what_is_missing(workspace: Path, simulate: Any) -> None:
    simulate("seccomp,netns")
    result = await run(workspace, "grep '^Seccomp:' /proc/self/status")
    assert result["stdout"].split() == ["Seccomp:", "0"]
    assert "seccomp" in result["confinement_missing"]
    assert "netns" in result["confinement_missing"]
    assert result["containment"]["seccomp"].startswith("inactive: simulated")
    assert result["containment"]["landlock-fs"].startswith("active")


async def test_host_network_needs_no_netns_under_required(workspace: Path,
                                                          simulate: Any) -> None:  # fmt: skip
    simulate("netns,landlock-net")
    result = await run(workspace, "echo ran", confinement="required", network="host")
    assert result["stdout"] == "ran\n"


async def test_every_result_names_every_protection(workspace: Path) -> None:
    result = await run(workspace, "true", max_child_processes=5)
    report = result["containment"]
    for layer in (*confinement.LAYERS, "process-tree", "rlimits", "max-child-processes"):
        assert report[layer].startswith(("active", "inactive")), (layer, report)
    assert "confinement_missing" not in result or result["confinement_missing"]


async def test_confinement_none_runs_unconfined(workspace: Path) -> None:
    result = await run(workspace, "grep '^Seccomp:' /proc/self/status", confinement="none")
    assert result["stdout"].split() == ["Seccomp:", "0"]
    assert result["containment"]["landlock-fs"].startswith("inactive")


# ------------------------------------------------------------------ the policy fields


def test_policy_fields_from_toml() -> None:
    policy = BashToolPolicy.from_toml_string(
        'allowed_command_prefixes = ["*"]\nfilesystem = "read-only"\nnetwork = "loopback"\nconfinement = "required"\n'
        'readable_paths = ["/opt"]\nwritable_paths = ["/srv/cache"]\n'
    )
    assert (policy.filesystem, policy.network, policy.confinement) == (
        "read-only", "loopback", "required")
    assert policy.readable_paths == ("/opt",) and policy.writable_paths == ("/srv/cache",)


@pytest.mark.parametrize(("text", "expected"), [
    ('network = "internet"', '"none", "loopback", "allowlist", "host"'),
    ('filesystem = "rw"', '"read-write", "read-only"'),
    ('confinement = "strict"', '"best-effort", "required", "none"'),
    ('readable_paths = ["relative/dir"]', "absolute path"),
])  # fmt: skip
def test_bad_confinement_fields_name_the_fix(text: str, expected: str) -> None:
    with pytest.raises(PolicyFileError, match="is invalid") as err:
        BashToolPolicy.from_toml_string('allowed_command_prefixes = ["*"]\n' + text)
    assert expected in str(err.value)


def test_bad_confinement_fields_in_python() -> None:
    with pytest.raises(ConfigurationError, match="network='wan' is invalid"):
        BashToolPolicy(network="wan")
    with pytest.raises(ConfigurationError, match=r"readable_paths=.*one string"):
        BashToolPolicy(readable_paths="/opt")  # type: ignore[arg-type]


def test_confinement_is_plain_picklable_data(workspace: Path) -> None:
    import pickle

    from sandbox.bash.linux.child import ChildSetup

    planned, _ = confinement.plan(ConfinementRequest(), workspace=str(workspace), tmpdir=None)
    setup = ChildSetup(rlimits=((1, 2),), confinement=planned)
    assert pickle.loads(pickle.dumps(setup)) == setup


def test_seccomp_program_is_well_formed() -> None:
    program = seccomp_program()
    assert len(program) % 8 == 0 and len(program) // 8 < 256


# ------------------------------------------------------------------ an unprivileged agent

_AGENT = """
import asyncio, json, os, pathlib, sys
from sandbox.bash.run.process import Limits, run_bash
from sandbox.bash.linux.confinement import ConfinementRequest
ws = pathlib.Path(sys.argv[1])
victim = int(sys.argv[2])
async def main():
    out = {}
    for name, cmd in [("caps", "grep -E '^Cap(Eff|Bnd)' /proc/self/status"),
                      ("write", "echo x > /var/tmp/sandbox-nobody-$$; echo $?"),
                      ("environ", f"cat /proc/{os.getpid()}/environ | wc -c"),
                      ("kill", f"kill -9 {victim}; echo $?"),
                      ("net", "exec 3<>/dev/tcp/127.0.0.1/" + sys.argv[3] + "; echo $?")]:
        r = await run_bash(cmd, cwd=ws, env={"PATH": "/usr/bin:/bin"}, timeout=10,
                           limits=Limits(), confinement=ConfinementRequest())
        out[name] = r.stdout
        out["tree"] = r.containment
    print(json.dumps(out))
asyncio.run(main())
"""


@needs_root
@needs_landlock
@pytest.mark.needs_program("setpriv")
@pytest.mark.needs_system_python
async def test_an_unprivileged_agent_confines_its_commands(listener: socket.socket) -> None:  # fmt: skip
    # The agent itself runs as nobody, on the system's python3 with this checkout and its
    # installed dependencies on sys.path (the venv's interpreter lives under /root).
    python = shutil.which("python3", path="/usr/bin:/bin")
    site = [p for p in sys.path if p.endswith("site-packages") and os.access(p, os.R_OK)]
    assert python is not None and site  # needs_system_python
    ws = Path(tempfile.mkdtemp(prefix="sandbox-test-agent-"))
    ws.chmod(0o777)
    repo = REPO
    victim = subprocess.Popen(["setpriv", "--reuid", "65534", "--regid", "65534",
                               "--clear-groups", "sleep", "60"])  # fmt: skip
    try:
        done = subprocess.run(
            ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", python,
             "-c", _AGENT, str(ws), str(victim.pid), str(listener.getsockname()[1])],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join([str(repo), *site])},
            capture_output=True, text=True, timeout=50, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        assert out["caps"].split() == ["CapEff:", "0" * 16, "CapBnd:", "0" * 16]
        assert out["write"].strip() == "1"
        assert out["environ"].strip() == "0"
        assert out["kill"].strip() == "1"
        assert out["net"].strip() == "1"
        assert victim.poll() is None
        assert not _accepted(listener)
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(ws, ignore_errors=True)


@needs_root
async def test_root_cannot_raise_its_limits_or_set_the_clock(workspace: Path) -> None:
    result = await run(workspace, "ulimit -H -v unlimited; echo $?; date -s @0; echo $?",
                       max_memory_bytes=1 << 30)  # fmt: skip
    assert result["stdout"].split("\n")[0] == "1"
    assert result["stdout"].split()[-1] == "1"
    assert result["stderr"].count("Operation not permitted") == 2


@pytest.mark.needs_program("python3")
async def test_unix_sockets_outside_are_unreachable_unless_network_host(workspace: Path) -> None:
    # Landlock does not govern connect() on a pathname unix socket, and a network
    # namespace does not isolate them: the seccomp filter refuses socket(AF_UNIX).
    sockdir = Path(tempfile.mkdtemp(prefix="sandbox-test-sock-"))
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sockdir / "daemon.sock"))
        server.listen()
        server.setblocking(False)
        script = (
            "import socket\n"
            "a, b = socket.socketpair(); print('socketpair: ok')\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({str(sockdir / 'daemon.sock')!r}); print('connected')\n"
        )
        (workspace / "unix.py").write_text(script)
        result = await run(workspace, "python3 unix.py")
        assert result["stdout"] == "socketpair: ok\n"
        assert "PermissionError" in result["stderr"]
        assert not _accepted(server)
        result = await run(workspace, "python3 unix.py", network="host")
        assert result["stdout"] == "socketpair: ok\nconnected\n"
    finally:
        server.close()
        shutil.rmtree(sockdir, ignore_errors=True)


@pytest.mark.needs_program("python3")
async def test_commands_sharing_the_empty_network_cannot_message_each_other(
    workspace: Path,
) -> None:
    # The commands of one agent share one empty network namespace; NETLINK_USERSOCK is
    # the netlink protocol unprivileged processes can message each other on.
    (workspace / "nl.py").write_text(
        "import socket\n"
        "for proto in (2, 0):  # NETLINK_USERSOCK, NETLINK_ROUTE\n"
        "    try: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto).close(); "
        "print(proto, 'ok')\n"
        "    except OSError as e: print(proto, e.errno)\n")  # fmt: skip
    result = await run(workspace, "python3 nl.py")
    assert result["stdout"] == "2 1\n0 ok\n", result  # EPERM; routing info still works
    host = await run(workspace, "python3 nl.py", network="host")
    assert host["stdout"] == "2 ok\n0 ok\n", host


@needs_landlock
@pytest.mark.needs_program("git")
async def test_an_unreachable_home_becomes_the_private_tmpdir(workspace: Path) -> None:
    # git dies on a configuration file it may not read; /root is out of reach.
    workspace.chmod(0o755)
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    result = await run(workspace, 'echo "$HOME"; git status --short; echo "rc=$?"',
                       env={"PATH": "/usr/bin:/bin", "HOME": "/root"})  # fmt: skip
    home, *rest = result["stdout"].splitlines()
    assert home.startswith(tempfile.gettempdir()) and "sandbox-tmp-" in home
    assert rest[-1] == "rc=0", result
    assert "HOME=/root" in result["containment"]["home"]
    kept = await run(workspace, 'echo "$HOME"', env={"PATH": "/usr/bin:/bin",
                                                     "HOME": str(workspace)})  # fmt: skip
    assert kept["stdout"].strip() == str(workspace)


@pytest.mark.parametrize("layer", confinement.LAYERS)
async def test_each_missing_layer_is_refused_under_required_and_reported_otherwise(
    workspace: Path, simulate: Any, layer: str
) -> None:
    simulate(layer)
    refused = await run(workspace, "touch ran", confinement="required")
    assert layer in refused["error"] and not (workspace / "ran").exists()
    ran = await run(workspace, "touch ran")
    assert ran["returncode"] == 0 and (workspace / "ran").exists()
    assert layer in ran["confinement_missing"]
    state = ran["containment"][layer]
    if layer == "no-new-privs":  # Landlock and seccomp cannot be had without it
        assert state == "active: set anyway: Landlock and seccomp need it"
    else:
        assert state.startswith("inactive: simulated"), state


@needs_landlock
async def test_a_missing_extra_path_is_reported(workspace: Path) -> None:
    result = await run(workspace, "true", readable_paths=("/nonexistent/tools",))
    assert "not found, so not granted: /nonexistent/tools" in result["containment"]["landlock-fs"]


# Review round 3 (an adversary on the OS layer): metadata, SysV IPC, datagram socketpairs,
# inotify.


@needs_root
@needs_landlock
async def test_a_root_command_cannot_chmod_utime_or_xattr_outside(workspace: Path,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    """Landlock does not govern chmod, utime or xattrs, and root owns root's files: the
    command's mounts are read-only (and nosuid) but for the paths it may write."""
    outside = tmp_path / "outside"
    outside.mkdir()
    binary = outside / "prog"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    before = binary.stat()
    result = await run(workspace, f"chmod 4755 {binary}; touch -d 1970-01-01 {binary}; "
                                  f"python3 -c \"import os; os.setxattr('{binary}', 'user.x', b'1')\"; "
                                  "touch inside.txt && chmod 700 inside.txt && echo inside-ok", "root")  # fmt: skip
    after = binary.stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns), result
    assert os.listxattr(binary) == []
    assert "Read-only file system" in result["stderr"], result
    assert "inside-ok" in result["stdout"], result  # the workspace stays writable


@pytest.fixture
def inside(workspace: Path) -> Path:
    path = workspace / "inside.txt"
    path.write_text("x")
    return path


@needs_root
@needs_landlock
async def test_sysv_ipc_of_the_host_is_unreachable(workspace: Path) -> None:
    """A root-owned 0600 SysV segment of the host: the command has its own IPC
    namespace, so the key names nothing there."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    key = 0x5A0000 + (os.getpid() & 0xFFFF)
    shmid = libc.shmget(key, 4096, 0o1000 | 0o600)  # IPC_CREAT
    assert shmid >= 0
    try:
        probe = (
            "import ctypes; l = ctypes.CDLL(None, use_errno=True); "
            f"print('shmid', l.shmget({key}, 0, 0), ctypes.get_errno())"
        )
        result = await run(workspace, f'python3 -c "{probe}"', "root")
        assert result["stdout"].startswith("shmid -1 2"), result  # ENOENT: not there
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


@needs_root
@needs_landlock
async def test_a_datagram_socketpair_and_inotify_are_refused(workspace: Path) -> None:
    probe = (
        "import socket, ctypes\n"
        "try:\n"
        "    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); print('dgram-pair')\n"
        "except OSError as e: print('dgram', e.errno)\n"
        "a, b = socket.socketpair(); print('stream-pair')\n"
        "l = ctypes.CDLL(None, use_errno=True)\n"
        "print('inotify', l.inotify_init1(0), ctypes.get_errno())\n"
    )
    (workspace / "probe.py").write_text(probe)
    result = await run(workspace, "python3 probe.py", "root")
    assert "dgram 1" in result["stdout"], result  # EPERM
    assert "stream-pair" in result["stdout"], result
    assert "inotify -1 1" in result["stdout"], result


@needs_root
@needs_landlock
async def test_setuid_bits_fanotify_vsock_and_leases_are_refused(workspace: Path) -> None:
    """Round 3, second OS adversary: a file made setuid in the workspace stays setuid on
    the host (nosuid is the command's own mounts only); fanotify's unprivileged mode and
    vsock reach past Landlock and the network namespace; a lease stalls host writers."""
    probe = (
        "import os, socket, ctypes, fcntl, shutil\n"
        "shutil.copy('/usr/bin/id', 'suid'); os.chmod('suid', 0o755)\n"
        "for mode in (0o4755, 0o2755):\n"
        "    try: os.chmod('suid', mode); print('chmod', oct(mode), 'ok')\n"
        "    except OSError as e: print('chmod', oct(mode), e.errno)\n"
        "try: os.close(os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755)); print('open-suid ok')\n"
        "except OSError as e: print('open-suid', e.errno)\n"
        "os.close(os.open('plain', os.O_CREAT | os.O_WRONLY, 0o644)); print('open-plain ok')\n"
        "l = ctypes.CDLL(None, use_errno=True)\n"
        "print('fanotify', l.fanotify_init(0, 0), ctypes.get_errno())\n"
        "try: socket.socket(40, socket.SOCK_STREAM); print('vsock ok')\n"
        "except OSError as e: print('vsock', e.errno)\n"
        "fd = os.open('plain', os.O_RDONLY)\n"
        "try: fcntl.fcntl(fd, 1024, 0); print('lease ok')\n"  # F_SETLEASE, F_RDLCK
        "except OSError as e: print('lease', e.errno)\n"
        "import stat\n"
        "try: os.mknod('node', stat.S_IFREG | 0o2745); print('mknod-sgid ok')\n"
        "except OSError as e: print('mknod-sgid', e.errno)\n"
        "os.mknod('node2', stat.S_IFREG | 0o644); print('mknod-plain ok')\n"
        "d = os.open('.', os.O_RDONLY)\n"
        "try: fcntl.fcntl(d, 1026, 0x80000001); print('dnotify ok')\n"  # F_NOTIFY
        "except OSError as e: print('dnotify', e.errno)\n"
    )
    (workspace / "probe.py").write_text(probe)
    result = await run(workspace, "python3 probe.py", "root")
    out = result["stdout"]
    assert "chmod 0o4755 1" in out and "chmod 0o2755 1" in out, result
    assert "open-suid 1" in out and "open-plain ok" in out, result
    assert "fanotify -1 1" in out and "vsock 1" in out and "lease 1" in out, result
    assert "mknod-sgid 1" in out and "mknod-plain ok" in out and "dnotify 1" in out, result
    assert not (workspace / "suid").stat().st_mode & 0o6000
    assert not (workspace / "made").exists() or not (workspace / "made").stat().st_mode & 0o6000


@needs_root
async def test_a_deep_tree_left_in_tmpdir_does_not_break_the_call(workspace: Path) -> None:
    """1,500 nested directories in TMPDIR made shutil.rmtree raise RecursionError out of
    the tool call, and the directory stayed."""
    # `where` is written in the workspace (before the cd), so the test sees which TMPDIR
    # the command had; "deep" is printed only if the whole tree was made.
    (workspace / "deep.sh").write_text(
        'echo "$TMPDIR" > where; cd "$TMPDIR" &&\n'
        "python3 -c \"import os\nfor _ in range(1500): os.mkdir('d'); os.chdir('d')\" &&\n"
        "echo deep\n")
    tool = ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(timeout_seconds=60))
    result = await tool.run_async(args={"command": "bash deep.sh"}, tool_context=ctx())
    assert result["stdout"] == "deep\n", result
    where = (workspace / "where").read_text().strip()
    assert where.startswith("/") and "sandbox-tmp-" in Path(where).name, where
    assert not Path(where).exists(), f"the command's TMPDIR {where} was left behind"
