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

import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path

__all__ = ["GUARD_DIR", "guard_dir", "guard_readable_paths", "guarded_env"]

GUARD_DIR = Path(__file__).resolve().parent / "guard"
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@cache
def guard_dir() -> str:
    """The directory holding the guard, readable and executable by every user.

    A command that runs as another user (root dropping to an unprivileged one) and
    cannot reach the package's copy would not fail: bash would skip it on PATH and
    run the real git unguarded. So when the package's directory is not reachable by
    every user (installed under a private home), the script is copied once into a
    new directory of this process's own (mode 0755, its files not writable by others).
    """
    script = GUARD_DIR / "git"
    if _world_executable(script):
        return os.fspath(GUARD_DIR)
    copy = Path(tempfile.mkdtemp(prefix="sandbox-git-guard-"))
    shutil.copyfile(script, copy / "git")
    (copy / "git").chmod(0o755)
    copy.chmod(0o755)
    return os.fspath(copy)


def _world_executable(path: Path) -> bool:
    try:
        if stat.S_IMODE(path.stat().st_mode) & 0o005 != 0o005:
            return False
        return all(stat.S_IMODE(p.stat().st_mode) & 0o001 for p in path.parents)
    except OSError:
        return False


def guarded_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the guard's directory first on PATH (once): ``git`` is the guard."""
    out = dict(env)
    guard = guard_dir()
    rest = [p for p in out.get("PATH", _DEFAULT_PATH).split(":") if p != guard]
    out["PATH"] = ":".join([guard, *rest])
    return out


def guard_readable_paths() -> tuple[str, ...]:
    """What the confinement must let the command read and execute for the guard."""
    return (guard_dir(),)
