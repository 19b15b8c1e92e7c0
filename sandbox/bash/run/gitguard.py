"""The git guard: every configuration route from a repository to a program, closed.

git runs programs that its configuration names: textconv and filter drivers that a
repository's ``.gitattributes`` selects and its ``.git/config`` defines, fsmonitor,
hooks, pagers, editors, credential helpers, ssh and askpass commands, signing
programs, merge drivers, ``!`` aliases, and whatever ``include.path`` pulls in. The
repository is whichever one git finds at run time: the workspace's, one a command
``cd``\\ s into (a bare repository committed inside the project), ``-C``, ``GIT_DIR``.

An environment fixed in advance cannot name drivers it does not know (``diff.<x>.*``
is open-ended), and git has no setting that turns ``diff.external`` off (an empty
value makes ``git diff`` fail with "external diff died"). So the command's PATH starts
with `GUARD_DIR`, which holds a ``git`` script (``guard/git``): at the moment git
runs, in the command's own working directory and environment, it asks git for the
configuration that repository has (``git config --list``: includes resolved, no
program run), overrides every program-naming key by name at command scope
(``GIT_CONFIG_COUNT`` outranks every config file), adds the fixed overrides
(``core.fsmonitor=false``, ``core.hooksPath=/dev/null``, ``safe.bareRepository=explicit``,
``protocol.allow=never`` …) and runs the real git; ``git diff`` also gets
``--no-ext-diff``. The script is part of the package: readable, not writable, inside
the confinement (`guard_readable_paths`).

These are mechanisms git offers (command-scope config, ``--no-ext-diff``); a script is
needed only because the driver names are known at run time alone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path

__all__ = ["GUARD_DIR", "guard_dir", "guard_readable_paths", "guarded_env"]

GUARD_DIR = Path(__file__).resolve().parent / "guard"
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@cache
def guard_dir() -> str:
    """A directory of this process's own holding the guard (made once, mode 0755).

    It holds ``git`` (the script) and ``exec/``, a shadow of the real git's exec path
    (every helper a symlink to the real one, but ``git`` the guard), which the guard
    hands to git as GIT_EXEC_PATH: git runs its child gits by name from there (the
    ``git status`` it runs in each submodule, with that submodule's own config), so
    they pass through the guard too. ``real-git`` names the git the shadow is of; the
    guard uses the shadow only for that git.

    Not the package's own directory: a command that runs as another user (root
    dropping to an unprivileged one) and cannot reach a file there would not fail,
    bash would skip it on PATH and run the real git unguarded.
    """
    root = Path(tempfile.mkdtemp(prefix="sandbox-git-guard-"))
    # Removed at exit by the process that made it only: a forked child inherits the
    # handler, and its exit removed the directory its parent's commands still name
    # first on PATH (every git then failed, and another user could make it again). A
    # child keeps using its parent's: a tool built before the fork lets its commands
    # read that directory and no other (ExecuteBashTool's readable_paths).
    atexit.register(_remove, root, os.getpid())
    script = root / "git"
    text = (GUARD_DIR / "git").read_text(encoding="utf-8")
    bash = shutil.which("bash") or "/bin/bash"  # where this machine has it
    script.write_text(f"#!{bash}\n" + text.split("\n", 1)[1], encoding="utf-8")
    script.chmod(0o755)
    real = shutil.which("git")
    exec_path = None
    if real is not None:
        try:
            exec_path = subprocess.run(
                [real, "--exec-path"], capture_output=True, text=True, timeout=10,
                env={"PATH": os.environ.get("PATH", _DEFAULT_PATH)}, check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            exec_path = None
    if real is not None and exec_path and os.path.isdir(exec_path):
        shadow = root / "exec"
        shadow.mkdir()
        for name in os.listdir(exec_path):
            (shadow / name).symlink_to(script if name == "git" else Path(exec_path) / name)
        shadow.chmod(0o755)
        (root / "real-git").write_text(os.path.realpath(real) + "\n")
    root.chmod(0o755)
    return os.fspath(root)


def _remove(root: Path, maker: int) -> None:
    if os.getpid() == maker:
        shutil.rmtree(root, ignore_errors=True)


# A git that did not come through the guard (run by absolute path, or the guard's
# directory out of the command's reach) fails closed, naming why: an invalid core.bare
# at command scope stops every git that reads a repository's config. The guard drops it.
UNGUARDED_MARK = "'core.bare'='not set: git runs only through the sandbox git guard (SECURITY.md)'"


def guarded_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the guard's directory first on PATH (once): ``git`` is the guard;
    a git run another way refuses to work (`UNGUARDED_MARK`)."""
    out = dict(env)
    out["GIT_CONFIG_PARAMETERS"] = UNGUARDED_MARK
    guard = guard_dir()
    rest = [p for p in out.get("PATH", _DEFAULT_PATH).split(":") if p != guard]
    out["PATH"] = ":".join([guard, *rest])
    return out


def guard_readable_paths() -> tuple[str, ...]:
    """What the confinement must let the command read and execute for the guard."""
    return (guard_dir(),)
