"""The ready-made policy files shipped with the package.

A policy can be named (``readonly``, ``git-readonly``, ``python-dev``) from any
directory, or given as a path to a TOML file of your own. The repository's top-level
``policies/`` is a link to this folder, so the files exist once.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import PolicyFileError

__all__ = ["DIRECTORY", "names", "resolve"]

#: Where the shipped policy files live.
DIRECTORY = Path(__file__).resolve().parent


def names() -> tuple[str, ...]:
    """The names of the shipped policies, sorted (specs.toml holds program specs, not
    a policy)."""
    return tuple(sorted(p.stem for p in DIRECTORY.glob("*.toml") if p.stem != "specs"))


def resolve(reference: str | os.PathLike[str]) -> Path:
    """The policy file a reference means: an existing path, or a shipped policy's name.

    A path is taken as it is (relative to the current directory); a bare name such as
    ``readonly`` or ``readonly.toml`` that is not a file here means the shipped policy.
    """
    path = Path(reference).expanduser()
    if path.is_file():
        return path
    text = os.fspath(reference)
    stem = text[:-5] if text.endswith(".toml") else text
    if os.sep not in text and stem in names():
        return DIRECTORY / f"{stem}.toml"
    shipped = ", ".join(names())
    if os.sep in text or text.endswith(".toml"):
        base = Path(text).name
        base = base[:-5] if base.endswith(".toml") else base
        named = (f"; {base!r} is also a shipped policy, named from any directory: "
                 f"--policy {base}") if base in names() else f", or name a shipped policy: {shipped}"
        raise PolicyFileError(
            f"policy file {text!r} does not exist (relative paths are read from "
            f"{os.getcwd()}); give an absolute path{named}")
    raise PolicyFileError(
        f"no policy named {text!r}: the shipped policies are {shipped}; "
        f"or give the path of a TOML policy file")
