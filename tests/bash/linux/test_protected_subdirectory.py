"""Protected names "at any depth" (docs/protected-paths.md) in a subdirectory that is
not the top of a repository: an existing one is bound read-only, but an ABSENT one is
held by a placeholder only at the workspace root and at the top of each repository, so
a command creates `src/.envrc` (direnv runs it on the host's next `cd src`), and any
protected name in a directory the command makes itself (`newdir/.envrc`).

A limitation docs/protected-paths.md states ("What it does not do"); SECURITY.md's
"at any depth" now says so too. Pinned by the attack-final adversary pass; not fixed (a placeholder in every directory
of the walk costs a mount per name per directory, and a directory made during the run
has none). Strict xfail: it starts failing the day the hole is closed, so the marker
comes off then."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.bash.run import reservations
from tests.bash.linux.test_protected_paths import attack, needs_mounts

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@needs_mounts
@pytest.mark.xfail(strict=True, reason="absent protected names are held only at the root "
                                       "and at repository tops (attack-final finding)")
@pytest.mark.parametrize("where", ["existing subdirectory", "directory made by the command"])
async def test_an_absent_protected_name_in_a_subdirectory_cannot_be_created(
        shared_workspace: Path, where: str) -> None:  # fmt: skip
    sub = "src" if where == "existing subdirectory" else "newdir"
    if sub == "src":
        (shared_workspace / "src").mkdir()
        (shared_workspace / "src").chmod(0o777)
    await attack(shared_workspace, f"mkdir -p {sub} && echo 'touch /tmp/x' > {sub}/.envrc",
                 protect=True)  # fmt: skip
    reservations._discard_reservations()
    assert not (shared_workspace / sub / ".envrc").exists()
