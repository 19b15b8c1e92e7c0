"""Issue 15's fixes, checked in this (root) process; the environments themselves are in
tests/bash/linux/test_environments.py.

- The subreaper containment's probe named the spawner as the supervisor's parent while
  the agent started it: it failed everywhere ("the supervisor failed: 1"), so the
  fallback was never used; once it worked, it dropped the confinement (its tree passed
  an empty setup on): a confined run under it ran unconfined.
- `fork_in_pid_namespace` through an intermediate (how an ordinary user, root of a
  rootless container or root without CAP_SYS_ADMIN forks), tried here as root.
- No `os._exit` the agent's own code can reach.
"""

from __future__ import annotations

import ast
import os
import select
import shutil
from pathlib import Path

import pytest

from sandbox.bash.linux import confinement, namespaces
from sandbox.bash.linux.confinement import Confinement, ConfinementRequest
from sandbox.bash.run import containment
from sandbox.bash.run.process import Limits, run_bash

ROOT = os.geteuid() == 0
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_subreaper_probe_works() -> None:
    containment._reset_detection_for_tests()
    found = containment.availability("subreaper", "/bin/bash")
    assert found.available, found.detail


@pytest.mark.needs_landlock
async def test_a_confined_run_under_the_subreaper_stays_confined(tmp_path: Path) -> None:
    ws = Path(os.environ.get("TMPDIR", "/tmp")) / f"sandbox-rootless-{os.getpid()}"
    ws.mkdir(exist_ok=True)
    outside = tmp_path / "outside"
    try:
        result = await run_bash(
            f"echo x > {outside}; grep -E '^CapEff' /proc/self/status",
            cwd=ws, env={"PATH": "/usr/bin:/bin"}, timeout=20, limits=Limits(),
            containment="subreaper", confinement=ConfinementRequest())  # fmt: skip
    finally:
        # Not rmdir: the protected paths' placeholders (empty directories standing for
        # absent names, docs/protected-paths.md) may be there while a reservation holds
        # them.
        shutil.rmtree(ws, ignore_errors=True)
    assert result.containment == "subreaper"
    assert not outside.exists(), result
    assert "CapEff:\t0000000000000000" in result.stdout, result


@pytest.mark.needs_root  # as root, forced through the unprivileged path
def test_fork_through_an_intermediate_makes_a_pid_namespace_we_reap() -> None:
    # What an agent without CAP_SYS_ADMIN gets: the command's first process, in a user
    # namespace and a PID namespace of its own, our child (we are a subreaper).
    c = Confinement(private_proc=True, new_userns=True, euid=os.geteuid(),
                    egid=os.getegid())  # fmt: skip
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a throwaway child of the test: it becomes the subreaper
        try:
            os.close(r)
            first = namespaces._fork_through_intermediate(c)
            if first == 0:
                os.write(w, b"%d %s" % (os.getpid(), os.readlink("/proc/self/ns/user").encode()))
                os._exit(7)
            _, status = os.waitpid(first, 0)  # ours to reap: the intermediate is gone
            os._exit(0 if os.waitstatus_to_exitcode(status) == 7 else 1)
        except BaseException:
            os._exit(2)
    os.close(w)
    select.select([r], [], [], 10)
    said = os.read(r, 200).decode().split()
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert said[0] == "1"  # the first process of its PID namespace
    assert said[1] != os.readlink("/proc/self/ns/user")  # in a user namespace of its own


def test_no_os_exit_reachable_from_the_agent() -> None:
    # os._exit only in processes forked for the purpose (the spawner's children, the
    # supervisor, the throwaway children of the namespace helpers), never in code the
    # agent's process runs: a failure there is an exception or an error result.
    allowed = {
        ("spawner_main.py", "_die_with_spawner"),
        ("spawner_main.py", "_child"),
        ("spawner_main.py", "_zygote_main"),
        ("subreaper.py", "_exec_child"),
        ("subreaper.py", "main"),
        ("namespaces.py", "_fork_through_intermediate"),
        ("confinement.py", "_probe_private_proc"),
    }
    found = set()
    for path in Path(confinement.__file__).resolve().parents[2].rglob("*.py"):  # sandbox/
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if (isinstance(node, ast.Attribute) and node.attr == "_exit"
                            and isinstance(node.value, ast.Name) and node.value.id == "os"):
                        found.add((path.name, fn.name))
    assert found <= allowed, found - allowed
