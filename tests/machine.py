"""What a test needs of the machine, defined once.

Each requirement is a pytest marker (registered in pyproject.toml) whose check is here;
tests/conftest.py skips a test marked with one whose check fails, with the reason below:
what is missing and how to get it. A test says what it needs with the marker, never
with its own `skipif`:

    @pytest.mark.needs_root
    @pytest.mark.needs_program("git", "setpriv")
    def test_...

`scripts/test.sh` (CI) runs as root with every package installed, so nothing is skipped
there. ``SANDBOX_TESTS_REQUIRE=all`` (or a comma-separated list of marker names) turns
the skip of those requirements into a failure: a machine that should have everything
proves it does.

Python extras (google-adk, mcp, playwright...) are not machine requirements: tests keep
``pytest.importorskip`` for them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: How each program a test may need is installed (Debian package names).
PACKAGES = {
    "curl": "curl", "git": "git", "ip": "iproute2", "setpriv": "util-linux",
    "unshare": "util-linux", "useradd": "passwd", "userdel": "passwd", "python3": "python3",
    "strace": "strace", "tmux": "tmux", "sed": "sed", "chromium": "chromium",
}  # fmt: skip

INSTALLED_BY_TEST_SH = "scripts/test.sh installs every package the tests use"


@dataclass(frozen=True)
class Requirement:
    marker: str
    summary: str  # what the marker asks for (pyproject.toml's registration says the same)
    missing: Callable[[], str]  # '' when the machine has it, else why not and how to get it


def _cached(check: Callable[[], str]) -> Callable[[], str]:
    return functools.cache(check)


@_cached
def _root() -> str:
    if os.geteuid() == 0:
        return ""
    return ("needs root (euid 0; it makes throwaway users, drops privileges or uses "
            "cgroups as root): run the tests as root, e.g. `sudo bash scripts/test.sh`")


@_cached
def _cgroup_v2() -> str:
    from sandbox.bash.linux import cgroups
    from sandbox.bash.run import containment
    from sandbox.bash.run.process import find_bash

    strongest = containment.choose("auto", find_bash())
    base, _ = cgroups.locate("")
    if strongest == "cgroup2" and base is not None:
        return ""
    return (f"needs a cgroup v2 hierarchy this process can make cgroups in (the strongest "
            f"whole-tree mechanism here is {strongest!r}): run as root on a host with "
            "cgroup2 mounted at /sys/fs/cgroup, or in a cgroup delegated to the user "
            "(systemd-run --user --scope -p Delegate=yes)")


@_cached
def _pids_cgroup() -> str:
    from sandbox.bash.run.containment import availability
    from sandbox.bash.run.process import find_bash

    found = availability("pids", find_bash())
    if found.available:
        return ""
    return (f"needs the cgroup v2 pids controller in a cgroup this process may use "
            f"({found.detail}): run as root on a cgroup2 host, or in a delegated cgroup "
            "with the pids controller enabled")


def _detected(layer: str) -> bool:
    from sandbox.bash.linux import confinement

    return bool(confinement.detect().has(layer))


@_cached
def _landlock() -> str:
    if _detected("landlock-fs"):
        return ""
    return ("needs Landlock (filesystem rules): a kernel >= 5.13 with `landlock` in "
            "/sys/kernel/security/lsm (boot parameter lsm=...,landlock)")


@_cached
def _landlock_scopes() -> str:
    if _detected("landlock-scopes"):
        return ""
    return ("needs Landlock ABI >= 6 (signal and abstract-socket scopes): a kernel >= 6.12 "
            "with Landlock enabled")


@_cached
def _private_proc() -> str:
    if _detected("private-proc"):
        return ""
    return ("needs PID and mount namespaces for the command (a private /proc): run as root, "
            "or where unprivileged user namespaces are allowed "
            "(sysctl kernel.unprivileged_userns_clone=1, "
            "kernel.apparmor_restrict_unprivileged_userns=0)")


@_cached
def _mount_namespace() -> str:
    from sandbox.bash.linux import protected_apply

    if _detected("private-proc"):
        return ""
    problem = protected_apply.mount_namespace_problem()
    if not problem:
        return ""
    return (f"needs a mount namespace for the command ({problem}): run as root, or where "
            "unprivileged user namespaces are allowed")


@_cached
def _user_net_namespace() -> str:
    for program in ("unshare", "ip"):
        if shutil.which(program) is None:
            return _program_missing(program)
    probe = subprocess.run(["unshare", "-Urn", "true"], capture_output=True, text=True)
    if probe.returncode == 0:
        return ""
    return (f"cannot make a user and network namespace here (`unshare -Urn true`: "
            f"{probe.stderr.strip()}): allow unprivileged user namespaces, or run outside "
            "a container that forbids them")


@_cached
def _strace() -> str:
    if shutil.which("strace") is None:
        return _program_missing("strace")
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", os.devnull,
                            "true"], capture_output=True, text=True)  # fmt: skip
    if probe.returncode == 0:
        return ""
    return (f"strace is installed but cannot trace here ({probe.stderr.strip()}): ptrace is "
            "not permitted (a container without CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=3)")


CHROMIUM = Path("/usr/bin/chromium")


@_cached
def _chromium() -> str:
    if CHROMIUM.exists():
        return ""
    return (f"Debian's chromium is not installed ({CHROMIUM}): apt-get install chromium "
            f"({INSTALLED_BY_TEST_SH})")


def postgres_bin() -> Path | None:
    """Where the newest installed PostgreSQL server's programs are (initdb, pg_ctl)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)  # fmt: skip
    return found[-1].parent if found else None


@_cached
def _postgres() -> str:
    if postgres_bin() is not None:
        return ""
    return ("the PostgreSQL server is not installed (no /usr/lib/postgresql/*/bin/initdb): "
            f"apt-get install postgresql ({INSTALLED_BY_TEST_SH}); the tests start a "
            "throwaway cluster of their own (tests/pgcluster.py)")


@_cached
def _throwaway_user() -> str:
    from tests import matrix

    why = matrix.unavailable()
    if not why:
        return ""
    return (f"cannot run an agent as a throwaway user here: {why} (needs root, setpriv, "
            "unshare, useradd and userdel, a Python of this version every user can run, "
            "and the checkout and its site-packages reachable by every user)")


@_cached
def _system_python() -> str:
    python = shutil.which("python3", path="/usr/bin:/bin")
    site = [p for p in sys.path if p.endswith("site-packages") and os.access(p, os.R_OK)]
    if python is not None and site:
        return ""
    return ("needs a system python3 (/usr/bin/python3: apt-get install python3) and "
            "readable site-packages, to run an agent as another user")


def _program_missing(program: str) -> str:
    package = PACKAGES.get(program, program)
    return (f"{program} is not installed: apt-get install {package} "
            f"({INSTALLED_BY_TEST_SH})")


@functools.cache
def program_missing(program: str) -> str:
    """'' if `program` is on PATH, else what to install."""
    return "" if shutil.which(program) else _program_missing(program)


#: Every requirement, by marker name. `needs_program(*names)` takes arguments and is
#: checked by `program_missing`.
REQUIREMENTS = {r.marker: r for r in (
    Requirement("needs_root", "runs as root (euid 0)", _root),
    Requirement("needs_cgroup_v2", "a cgroup v2 hierarchy this process can make cgroups in",
                _cgroup_v2),
    Requirement("needs_pids_cgroup", "the cgroup v2 pids controller", _pids_cgroup),
    Requirement("needs_landlock", "Landlock filesystem rules", _landlock),
    Requirement("needs_landlock_scopes", "Landlock ABI >= 6 (scopes)", _landlock_scopes),
    Requirement("needs_private_proc", "PID and mount namespaces for a command", _private_proc),
    Requirement("needs_mount_namespace", "a mount namespace for a command", _mount_namespace),
    Requirement("needs_user_net_namespace", "unshare -Urn works (user + network namespace)",
                _user_net_namespace),
    Requirement("needs_strace", "strace installed and able to trace (ptrace)", _strace),
    Requirement("needs_chromium", "Debian's chromium at /usr/bin/chromium", _chromium),
    Requirement("needs_postgres", "the PostgreSQL server's programs (initdb)", _postgres),
    Requirement("needs_throwaway_user", "can run an agent as a throwaway user (tests/matrix.py)",
                _throwaway_user),
    Requirement("needs_system_python", "a system python3 and readable site-packages",
                _system_python),
)}  # fmt: skip

PROGRAM_MARKER = "needs_program"


def marker_names() -> set[str]:
    return {*REQUIREMENTS, PROGRAM_MARKER}


def required_everywhere() -> set[str]:
    """The markers SANDBOX_TESTS_REQUIRE names: a missing one fails instead of skipping."""
    wanted = {w.strip() for w in os.environ.get("SANDBOX_TESTS_REQUIRE", "").split(",")
              if w.strip()}  # fmt: skip
    if "all" in wanted:
        return marker_names()
    unknown = wanted - marker_names()
    if unknown:
        raise ValueError(f"SANDBOX_TESTS_REQUIRE names unknown requirements {sorted(unknown)}; "
                         f"known: all, {', '.join(sorted(marker_names()))}")
    return wanted
