"""What `run_bash` checks before it runs anything: the working directory, the environment
(no start-up code smuggled in), the command's size, the rlimits, and which uid an
unprivileged agent's command runs as (`_unprivileged_identity`)."""

from __future__ import annotations

import os
import pwd
import resource
import stat
from collections.abc import Mapping
from pathlib import Path

from sandbox.errors import ConfigurationError

# How long the child may take to hand the proxy's listeners over (its set-up, before
# exec: milliseconds unless the machine is overloaded).
_HANDOVER_SECONDS = 30.0

# Linux refuses a single argv string of 128 KiB or more (MAX_ARG_STRLEN), with E2BIG.
MAX_ARG_STRLEN = 128 * 1024
# Environment variables that make bash or the dynamic loader run code at startup,
# before the first line of the command (and so before the containment prologue):
# sourced files, exported functions, xtrace expanding PS4, and any LD_* variable
# (LD_LIBRARY_PATH into the workspace would let one command plant a library that runs
# at the start of the next, uncontained). A command can still set them for what it
# runs (`export LD_LIBRARY_PATH=...; prog`): that happens after the prologue.
STARTUP_CODE_VARIABLES = frozenset({"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "GCONV_PATH"})
STARTUP_CODE_PREFIXES = ("BASH_FUNC_", "LD_")
NOBODY = 65534


def _check_cwd(cwd: Path) -> str:
    try:
        st = os.stat(cwd)
    except FileNotFoundError:
        raise ConfigurationError(
            f"workspace directory {cwd} does not exist; create it or pass an existing "
            "directory as cwd"
        ) from None
    except OSError as e:
        raise ConfigurationError(f"workspace directory {cwd} cannot be used: {e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigurationError(f"workspace {cwd} is not a directory; pass a directory as cwd")
    return os.fspath(cwd)


def _check_env(env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if name in STARTUP_CODE_VARIABLES or name.startswith(STARTUP_CODE_PREFIXES):
            raise ConfigurationError(
                f"env sets {name}, which makes bash or the loader run code at startup, "
                "before the sandbox's containment takes effect; remove it from env (a "
                f"command may still set it for its own programs: export {name}=...; ...)"
            )
        if not isinstance(name, str) or not isinstance(value, str):
            raise ConfigurationError(f"env must map str to str, got {name!r}: {value!r}")


def _check_command(command: str) -> None:
    if "\0" in command:
        raise ConfigurationError("command contains a NUL byte, which bash -c cannot receive")
    size = len(os.fsencode(command))
    if size >= MAX_ARG_STRLEN - 4096:  # leave room for the containment prologue
        raise ConfigurationError(
            f"command is {size} bytes; Linux passes at most {MAX_ARG_STRLEN - 1} bytes in "
            "one argument: write long scripts to a file in the workspace and run that"
        )


def _reachable(path: str, granted: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(
        real == os.path.realpath(g) or real.startswith(os.path.realpath(g).rstrip("/") + "/")
        for g in granted
        if not g.endswith("/")  # "dir/" grants listing only
    )


def _usable_by(path: Path, uid: int, gid: int, need_write: bool) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        bits = stat.S_IXUSR | (stat.S_IWUSR if need_write else 0)
    elif st.st_gid == gid:
        bits = stat.S_IXGRP | (stat.S_IWGRP if need_write else 0)
    else:
        bits = stat.S_IXOTH | (stat.S_IWOTH if need_write else 0)
    return st.st_mode & bits == bits


def _mapped(kind: str, value: int) -> bool:
    """Whether `value` is a uid ("uid") or gid ("gid") of this user namespace."""
    try:
        with open(f"/proc/self/{kind}_map") as f:
            for line in f:
                inside, _outside, count = (int(x) for x in line.split())
                if inside <= value < inside + count:
                    return True
    except (OSError, ValueError):
        return True  # no user namespaces: every id exists
    return False


def _unprivileged_identity(cwd: str) -> tuple[int, int]:
    """The uid/gid a dropped command runs as: the workspace owner if that is not root
    (so the workspace stays writable), else nobody (then the workspace must be
    writable by nobody)."""
    owner = os.stat(cwd).st_uid
    if owner != 0:
        uid = owner
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = os.stat(cwd).st_gid
    else:
        try:
            entry = pwd.getpwnam("nobody")
            uid, gid = entry.pw_uid, entry.pw_gid
        except KeyError:
            uid, gid = NOBODY, NOBODY
    for kind, value in (("uid", uid), ("gid", gid)):
        if not _mapped(kind, value):
            raise ConfigurationError(
                f"drop_privileges: {kind} {value} does not exist in this user namespace (a "
                "rootless container that maps only its own ids): root here is an ordinary "
                "user of the host already; pass drop_privileges=False, or map more ids "
                "(/etc/subuid, /etc/subgid)"
            )
    workspace = Path(cwd).resolve()
    for directory in workspace.parents:
        if not _usable_by(directory, uid, gid, need_write=False):
            raise ConfigurationError(
                f"drop_privileges: uid {uid} cannot reach the workspace {cwd} "
                f"({directory} is not searchable by it); chmod o+x {directory}, or "
                "pass drop_privileges=False"
            )
    if not _usable_by(workspace, uid, gid, need_write=True):
        raise ConfigurationError(
            f"drop_privileges: the workspace {cwd} is owned by root and not writable by "
            f"uid {uid}; chown it to an unprivileged user (commands then run as that "
            "user), or pass drop_privileges=False"
        )
    return uid, gid


def _check_rlimits(rlimits: tuple[tuple[int, int], ...]) -> None:
    if os.geteuid() == 0:
        return  # root may raise hard limits
    for res, value in rlimits:
        _soft, hard = resource.getrlimit(res)
        if hard != resource.RLIM_INFINITY and value > hard:
            raise ConfigurationError(
                f"a limit of {value} exceeds this process's hard limit {hard} for "
                f"resource {res}; an unprivileged process cannot raise it: lower the limit"
            )
