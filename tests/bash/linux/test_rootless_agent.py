"""An agent that is root of a user namespace it does not own (rootless Podman,
`unshare --user --map-root-user` as an ordinary user) runs commands in a writable
workspace: the protected paths' lock directory is not taken to be /run/sandbox, which
there belongs to the host's root or cannot be made (every command failed with
"/run/sandbox is not a private directory of uid 0"); nor does another user's planted
/tmp/sandbox-protected-UID refuse every command of that uid.

Needs root (makes a throwaway user, as tests/matrix.py does) and unshare/setpriv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import matrix

pytestmark = [pytest.mark.timeout(120), pytest.mark.needs_throwaway_user]

AGENT = """
import asyncio, sys
from pathlib import Path
from sandbox import BashToolPolicy, ExecuteBashTool
async def main():
    tool = ExecuteBashTool(workspace=Path(sys.argv[1]), policy=BashToolPolicy(timeout_seconds=20))
    r = await tool._run("echo ran-$((6*7)) > out.txt && cat out.txt")
    print("RESULT", r.get("returncode"), r.get("stdout", "").strip(), r.get("error", ""))
asyncio.run(main())
"""


def _agent(user: str, ws: Path, *, userns: bool) -> str:
    python = matrix.python_for_everyone()
    assert python is not None
    path = ":".join([str(matrix.REPO), *matrix.site_packages()])
    argv = [python, "-c", AGENT, str(ws)]
    if userns:
        argv = ["unshare", "--user", "--map-root-user", *argv]
    argv = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups", "env", "-i",
            "PATH=/usr/bin:/bin", f"PYTHONPATH={path}", "HOME=/tmp", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=100)
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("userns", [True, False], ids=["user-in-userns", "user"])
def test_a_rootless_agent_runs_commands_in_a_writable_workspace(userns: bool) -> None:
    # the host's root has (or could have) made /run/sandbox: a root agent on this machine
    os.makedirs("/run/sandbox", mode=0o700, exist_ok=True)
    with matrix.throwaway_user() as user:
        import pwd

        entry = pwd.getpwnam(user)
        ws = Path(tempfile.mkdtemp(prefix="sandbox-rootless-ws-"))
        planted = Path(tempfile.gettempdir()) / f"sandbox-protected-{0 if userns else entry.pw_uid}"
        made = not planted.exists()
        try:
            os.chown(ws, entry.pw_uid, entry.pw_gid)
            if made:  # another user's directory where the agent would keep its lock
                planted.mkdir(mode=0o700)
            out = _agent(user, ws, userns=userns)
            assert "RESULT 0 ran-42" in out, out
        finally:
            shutil.rmtree(ws, ignore_errors=True)
            if made:
                shutil.rmtree(planted, ignore_errors=True)


BOMB_AGENT = """
import asyncio, sys
from pathlib import Path
from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
def ctx(i):
    return ToolContext(function_call_id=f"c{i}", tool_confirmation=ToolConfirmation(confirmed=True))
async def main():
    tool = ExecuteBashTool(workspace=Path(sys.argv[1]), policy=BashToolPolicy(timeout_seconds=6))
    bomb = asyncio.create_task(tool.run_async(args={"command":
        "for i in $(seq 1 3000); do sleep 8 & done 2>/dev/null; wait"}, tool_context=ctx(0)))
    await asyncio.sleep(3)
    try:
        second = await tool.run_async(args={"command": "echo second"}, tool_context=ctx(1))
        print("SECOND", type(second).__name__, str(second.get("stdout", "")).strip() or second.get("error"))
    except BaseException as exc:
        print("RAISED", type(exc).__name__, exc)
    await bomb
    print("AGENT LIVES")
asyncio.run(main())
"""


def test_a_command_that_takes_every_process_of_the_uid_does_not_end_the_agent() -> None:
    # The default policy sets no process limit: a command may fork until the uid's
    # RLIMIT_NPROC. A call made meanwhile cannot start its child (EAGAIN): that is an
    # error result, not an exception out of the tool (which ends the agent's run).
    python = matrix.python_for_everyone()
    assert python is not None
    path = ":".join([str(matrix.REPO), *matrix.site_packages()])
    with matrix.throwaway_user() as user:
        import pwd

        entry = pwd.getpwnam(user)
        ws = Path(tempfile.mkdtemp(prefix="sandbox-rootless-ws-"))
        try:
            os.chown(ws, entry.pw_uid, entry.pw_gid)
            argv = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups", "env", "-i",
                    "PATH=/usr/bin:/bin", f"PYTHONPATH={path}", "HOME=/tmp", "bash", "-c",
                    'ulimit -u 400 && exec "$@"', "bash", python, "-c", BOMB_AGENT, str(ws)]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=100)
            out = proc.stdout + proc.stderr
        finally:
            shutil.rmtree(ws, ignore_errors=True)
    assert "RAISED" not in out, out
    assert "SECOND dict" in out and "AGENT LIVES" in out, out
