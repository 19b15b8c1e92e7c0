"""The ready-made policy files shipped with the package, and how a policy is named.

``resolve`` turns what a user typed (``--policy``, ``from_toml(resolve(...))``) into a
file. A *name* (no ``/``, not ending in ``.toml``: ``readonly``, ``git-readonly``,
``python-dev``) means a shipped policy, or one in a directory of the search path
``$SANDBOX_POLICY_PATH`` (absolute directories separated by ``os.pathsep``); it never
means a file in the current directory, which a repository the agent works in, or an
earlier command, could have planted (``./readonly`` holding ``confinement = "none"``).
A *path* (``./readonly``, ``~/p/dev.toml``, ``policies/x.toml``) is that file.

``open_walls`` lists what a loaded policy switches off (OS confinement, the
allowlist, the human, the network wall...): the command line prints it as a warning
wherever such a policy is loaded, the MCP server puts it in the tool's description,
and ``sandbox doctor`` reports it. The repository's top-level ``policies/`` is a link
to this folder, so the files exist once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sandbox.errors import PolicyFileError

__all__ = ["DIRECTORY", "SEARCH_PATH_ENV", "banner", "is_name", "names", "open_walls",
           "resolve", "search_path"]

#: Where the shipped policy files live.
DIRECTORY = Path(__file__).resolve().parent

#: More directories of named policies, separated by ``os.pathsep``; absolute only.
SEARCH_PATH_ENV = "SANDBOX_POLICY_PATH"


def names() -> tuple[str, ...]:
    """The names of the shipped policies, sorted (specs.toml holds program specs, not
    a policy)."""
    return tuple(sorted(p.stem for p in DIRECTORY.glob("*.toml") if p.stem != "specs"))


def is_name(reference: str | os.PathLike[str]) -> bool:
    """Whether ``reference`` is a policy's name (no directory separator, not ending in
    ``.toml``) rather than a path."""
    text = os.fspath(reference)
    separators = [os.sep] + ([os.altsep] if os.altsep else [])
    return not any(s in text for s in separators) and not text.endswith(".toml")


def search_path(value: str | None = None) -> tuple[Path, ...]:
    """The directories of ``$SANDBOX_POLICY_PATH`` (or ``value``), in order.

    Empty entries are skipped (they never mean the current directory); a relative
    entry is refused: it would be read from whatever directory the command runs in.
    """
    raw = os.environ.get(SEARCH_PATH_ENV, "") if value is None else value
    found: list[Path] = []
    for entry in raw.split(os.pathsep):
        if not entry:
            continue
        path = Path(os.path.expanduser(entry))
        if not path.is_absolute():
            raise PolicyFileError(
                f"${SEARCH_PATH_ENV} entry {entry!r} is not an absolute directory: it would "
                f"be read from the current directory ({os.getcwd()}), which a repository or "
                "an earlier command may have filled; write absolute directories separated "
                f"by {os.pathsep!r}")
        found.append(path)
    return tuple(found)


def _named_in_search_path(name: str) -> list[Path]:
    return [d / f"{name}.toml" for d in search_path() if (d / f"{name}.toml").is_file()]


def resolve(reference: str | os.PathLike[str]) -> Path:
    """The policy file a reference means: a path, or a policy's name.

    A path (it holds a ``/`` or ends in ``.toml``) is taken as it is, relative to the
    current directory. A name means the shipped policy of that name, or else
    ``NAME.toml`` in the first directory of ``$SANDBOX_POLICY_PATH`` that holds one;
    never a file in the current directory (write ``./NAME`` for that). A search-path
    file with a shipped policy's name is refused, not preferred: the name would mean
    two policies.
    """
    text = os.fspath(reference)
    shipped = ", ".join(names())
    if not text:
        raise PolicyFileError(f"the policy reference is empty: name a shipped policy "
                              f"({shipped}) or give the path of a TOML policy file")
    if not is_name(text):
        path = Path(os.path.expanduser(text))
        if path.is_file():
            return Path(os.path.abspath(path))  # "./readonly" stays a path once printed
        stem = Path(text).name.removesuffix(".toml")
        hint = ("" if stem not in names()
                else f" (the shipped policy is named without .toml: --policy {stem})"
                if os.sep not in text
                else f"; {stem!r} is also a shipped policy, named from any directory: "
                f"--policy {stem}")
        raise PolicyFileError(
            f"policy file {text!r} does not exist (relative paths are read from "
            f"{os.getcwd()}){hint}; give an existing path, or name a shipped policy: "
            f"{shipped}")
    found = _named_in_search_path(text)
    if text in names():
        if found:
            raise PolicyFileError(
                f"policy name {text!r} means the shipped policy, but ${SEARCH_PATH_ENV} "
                f"also holds {found[0]}; rename that file, or give its path to use it")
        return DIRECTORY / f"{text}.toml"
    if found:
        return found[0]
    where = (f"; ${SEARCH_PATH_ENV} holds "
             + (", ".join(sorted(_search_path_names())) or "no policies")
             if search_path() else f"; more names come from ${SEARCH_PATH_ENV}")
    local = next((p for p in (Path(text), Path(f"{text}.toml")) if p.is_file()), None)
    here = (f". A name never means a file in the current directory: to use {local} "
            f"here, give it as ./{local}" if local is not None else "")
    raise PolicyFileError(
        f"no policy named {text!r}: the shipped policies are {shipped}{where}; or give the "
        f"path of a TOML policy file{here}")


def _search_path_names() -> set[str]:
    return {p.stem for d in search_path() if d.is_dir() for p in d.glob("*.toml")}


def open_walls(policy: Any) -> tuple[str, ...]:
    """What ``policy`` (a `BashToolPolicy`) switches off, one sentence each; empty for
    every shipped policy.

    Said wherever such a policy is loaded (`sandbox run`/`check`/`mcp` print it on
    stderr, the MCP tool's description carries it, `sandbox doctor` lists it), so a
    policy that turns confinement off or allows everything is never taken for a
    sandbox.
    """
    walls: list[str] = []
    if getattr(policy, "confinement", None) == "none":
        walls.append('OS confinement is off (confinement = "none"): an allowed program '
                     "reads and writes whatever this user can, and reaches the network")
    if "*" in tuple(getattr(policy, "allowed_command_prefixes", ())):
        walls.append('every program is allowed (allowed_command_prefixes holds "*")')
    if "*" in tuple(getattr(policy, "no_confirmation_prefixes", ())):
        walls.append('no command asks a human first (no_confirmation_prefixes holds "*")')
    if getattr(policy, "network", None) == "host":
        walls.append('commands reach the network (network = "host")')
    hardening = getattr(policy, "hardening", None)
    if hardening is not None:
        from sandbox.bash.policy.hardening import DEFAULT_HARDENING

        if not set(DEFAULT_HARDENING) <= set(hardening):
            walls.append("the default hardening rules are off (default_hardening = false): "
                         "options that make an allowed program run others or write "
                         "files are not refused")
    protected = getattr(policy, "protected_paths", None)
    if protected is not None and not protected and getattr(policy, "filesystem", None) != (
            "read-only"):  # fmt: skip
        walls.append("no path in the workspace is protected (protected_paths = []): a "
                     "command may write .git/config, .git/hooks, .envrc and the like, which "
                     "the host obeys later")
    if getattr(policy, "drop_privileges", None) is False and os.geteuid() == 0:
        walls.append("commands run as root (drop_privileges = false)")
    return tuple(walls)


def banner(reference: str | os.PathLike[str] | None, policy: Any) -> str | None:
    """The warning a command line prints on stderr when it loads ``policy`` (from
    ``reference``; None: the built-in default), or None when there is nothing to say:
    the walls the policy switches off, and a file of the current directory that has the
    policy's name but is not what the name means."""
    lines: list[str] = []
    text = None if reference is None else os.fspath(reference)
    label = ("the default policy (no --policy given)" if text is None
             else f"policy {text!r}" + ("" if is_name(text) else f" ({Path(text).resolve()})"))
    walls = open_walls(policy)
    if walls:
        lines.append(f"WARNING: {label} switches protections off:")
        lines += [f"  - {wall}" for wall in walls]
    if text is not None and is_name(text):
        local = next((p for p in (Path(text), Path(f"{text}.toml")) if p.exists()), None)
        if local is not None:
            lines.append(f"note: {text!r} names {resolve(text)}; the file {local} in the "
                         f"current directory is not read (a name never means one; give it "
                         f"as ./{local} to use it)")
    return "\n".join(lines) if lines else None
