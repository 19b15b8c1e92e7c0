"""`ExecuteBashTool` gets the process ready for its first command when it is built
(sandbox/bash/run/warm.py): the spawner runs and the probes are done before any call,
once per process, and the first call uses what was made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.timeout(120)

# Each scenario runs in a fresh process: the spawner and the probes' caches are per
# process, and this test process has them already.
_PRELUDE = r"""
import sys, time
from sandbox.bash.linux import confinement
from sandbox.bash.linux.spawner import Spawner
from sandbox.bash.run import warm
from sandbox.bash import BashToolPolicy, ExecuteBashTool
workspace = sys.argv[1]

def until(what, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "not ready in time"
        time.sleep(0.01)
"""


def _run(tmp_path: Path, body: str) -> None:
    done = subprocess.run([sys.executable, "-c", _PRELUDE + body, str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_building_the_tool_starts_the_spawner_and_probes_and_the_first_call_uses_them(
        tmp_path: Path) -> None:  # fmt: skip
    _run(tmp_path, r"""
assert Spawner._shared is None and confinement._detected is None
tool = ExecuteBashTool(workspace=workspace)
until(lambda: Spawner._shared is not None and confinement._detected is not None)
pid = Spawner._shared.pid

import anyio
from sandbox.tools.context import ToolConfirmation, ToolContext
ctx = ToolContext(function_call_id="c", tool_confirmation=ToolConfirmation(confirmed=True))
result = anyio.run(lambda: tool.run_async(args={"command": "echo hi"}, tool_context=ctx))
assert result["returncode"] == 0 and result["stdout"] == "hi\n", result
assert Spawner.shared().pid == pid  # the warmed spawner ran it, none was started again
""")


def test_once_per_process_and_no_kernel_probes_without_confinement(tmp_path: Path) -> None:
    _run(tmp_path, r"""
calls = []
real = warm._spawner
warm._spawner = lambda: (calls.append(1), real())[1]
ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(confinement="none"))
ExecuteBashTool(workspace=workspace, policy=BashToolPolicy(confinement="none"))
until(lambda: Spawner._shared is not None)
time.sleep(0.5)  # the probes' thread is done by now (it probed the containment)
assert calls == [1], calls
# Commands run unconfined: the kernel's confinement layers were not probed for them.
assert confinement._detected is None
""")


def test_a_forked_child_warms_for_itself(tmp_path: Path) -> None:
    _run(tmp_path, r"""
import os
ExecuteBashTool(workspace=workspace)
until(lambda: Spawner._shared is not None)
parent = Spawner._shared.pid
pid = os.fork()
if pid == 0:
    code = 1
    try:
        ExecuteBashTool(workspace=workspace)
        until(lambda: Spawner._shared is not None and not Spawner._shared._pid_changed())
        code = 0 if Spawner._shared.pid != parent else 2
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
""")


def test_the_spawner_started_ahead_of_the_tool_is_the_one_it_uses(tmp_path: Path) -> None:
    # `sandbox run` starts the spawner before it imports the policy; the tool built
    # later starts no other one, and still has the probes done.
    _run(tmp_path, r"""
calls = []
real = warm._spawner
warm._spawner = lambda: (calls.append(1), real())[1]
warm.spawner_ahead()
until(lambda: Spawner._shared is not None)
pid = Spawner._shared.pid
ExecuteBashTool(workspace=workspace)
until(lambda: confinement._detected is not None)
assert calls == [1] and Spawner.shared().pid == pid, (calls, pid)
""")
