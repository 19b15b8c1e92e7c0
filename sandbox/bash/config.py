"""What the policy asks of the OS, as data both sides share: the policy builds a
`ConfinementRequest` and names protected paths; the Linux layer (`sandbox.bash.linux`)
plans and enforces them. A leaf: it imports neither side (docs/architecture.md)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.errors import ConfigurationError

if TYPE_CHECKING:
    from sandbox.bash.linux.protected import ProtectedPaths

__all__ = [
    "CONFINEMENT_MODES",
    "DEFAULTS",
    "DEFAULT_PROTECTED_PATHS",
    "FILESYSTEM_MODES",
    "LAYERS",
    "NETWORK_MODES",
    "UNAVAILABLE_ENV",
    "ConfinementRequest",
    "ConfinementUnavailable",
    "resolve_patterns",
]

FILESYSTEM_MODES = ("read-write", "read-only")
NETWORK_MODES = ("none", "loopback", "allowlist", "host")
CONFINEMENT_MODES = ("best-effort", "required", "none")
LAYERS = (
    "landlock-fs",
    "landlock-net",
    "landlock-scopes",
    "seccomp",
    "capabilities",
    "no-new-privs",
    "netns",
    "private-proc",
)
UNAVAILABLE_ENV = "SANDBOX_CONFINEMENT_UNAVAILABLE"

# Protected paths (`sandbox.bash.linux.protected` enforces them): the default list.
DEFAULT_PROTECTED_PATHS = (
    ".git/config", ".git/hooks", ".git/info", ".gitmodules", ".gitattributes",
    ".envrc", ".bashrc", ".profile", ".bash_profile", ".zshrc",
    ".vscode", ".idea", ".claude", ".mcp.json",
    ".gitconfig",  # git's global configuration when the workspace is a home directory
)  # fmt: skip
# In protected_paths: the default list, at this place.
DEFAULTS = "@default"

class ConfinementUnavailable(ConfigurationError):
    """confinement="required" and the kernel lacks a layer the policy asks for."""


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class ConfinementRequest:
    """What a policy asks of the OS (see BashToolPolicy's fields of the same names).

    filesystem: "read-write" (the workspace is writable) or "read-only".
    readable_paths: more directories or files the command may read and execute.
    writable_paths: more directories or files the command may read, write and create in.
    network: "none" (an empty network namespace, and no TCP bind/connect at all),
    "loopback" (a private network namespace whose own 127.0.0.1 is up: the command can
    talk to servers it starts itself, never to the host's listeners) or "host".
    mode: "best-effort" (run with what the kernel offers; report the rest),
    "required" (refuse to run when a layer is missing) or "none" (no OS confinement).
    protected_paths: paths inside a writable workspace no command may change (resolved
    entries, see `sandbox.bash.linux.protected`); protected: their scan for one run (the
    process layer attaches it before planning; None: nothing attached).
    """

    filesystem: str = "read-write"
    readable_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    network: str = "none"
    mode: str = "best-effort"
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS
    protected: ProtectedPaths | None = None

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("filesystem", self.filesystem, FILESYSTEM_MODES),
            ("network", self.network, NETWORK_MODES),
            ("confinement", self.mode, CONFINEMENT_MODES),
        ):
            if value not in allowed:
                raise ConfigurationError(
                    f"{name}={value!r} is invalid: use one of "
                    + ", ".join(repr(a) for a in allowed)
                )
        for name in ("readable_paths", "writable_paths"):
            for p in getattr(self, name):
                if not isinstance(p, str) or not os.path.isabs(p):
                    raise ConfigurationError(
                        f"{name} entry {p!r} is invalid: write an absolute path such as "
                        "'/opt/tools'"
                    )


def resolve_patterns(entries: Iterable[str]) -> tuple[str, ...]:
    """The protected entries `entries` stand for: ``"@default"`` expanded, ``"!x"``
    removals applied, duplicates dropped. Raises ConfigurationError naming a bad entry
    and the fix."""
    if isinstance(entries, str):
        raise ConfigurationError(
            f"protected_paths={entries!r} is invalid: write a list, e.g. "
            "['@default', 'Makefile'] (the defaults and Makefile) or ['.git/config'] "
            "(only that)"
        )
    out: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise ConfigurationError(
                f"protected_paths entry {entry!r} is invalid: write a string such as "
                "'.envrc', '/Makefile' or '@default'"
            )
        if entry == DEFAULTS:
            out.extend(p for p in DEFAULT_PROTECTED_PATHS if p not in out)
            continue
        removal = entry.startswith("!")
        pattern = _check_pattern(entry[1:] if removal else entry, entry)
        if removal:
            if pattern not in out:
                raise ConfigurationError(
                    f"protected_paths entry {entry!r} removes {pattern!r}, which is not in "
                    f"the list before it ({', '.join(out) or 'empty'}); put it after "
                    "'@default' or remove it"
                )
            out.remove(pattern)
        elif pattern not in out:
            out.append(pattern)
    return tuple(out)


def _check_pattern(pattern: str, entry: str) -> str:
    anchored = pattern.startswith("/")
    parts = pattern.strip("/").split("/")
    bad = (
        not pattern.strip("/")
        or "\0" in pattern
        or any(p in ("", ".", "..") for p in parts)
        or any(c in pattern for c in "*?[")
        or pattern.startswith("@")
    )
    if bad:
        raise ConfigurationError(
            f"protected_paths entry {entry!r} is invalid: write a relative path matched at "
            "any depth ('.envrc', '.git/hooks'), one anchored at the workspace root with a "
            "leading '/' ('/Makefile'), '@default' for the default list or '!name' to "
            "take one out; no '..', no wildcards"
        )
    return ("/" if anchored else "") + "/".join(parts)
