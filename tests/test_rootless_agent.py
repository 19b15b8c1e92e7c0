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

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(bool(matrix.unavailable()), reason=matrix.unavailable())]

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
