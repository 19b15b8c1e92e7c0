"""Every document the code and the README cite is in the repository.

Comments once cited design documents that lived outside it (POLICY.md, "../shared/..."):
a reader of the code could not follow them. The design the code relies on is in docs/;
this test finds every ``*.md`` or ``docs/...`` path cited in sandbox/ (comments and
docstrings), README.md, SECURITY.md and docs/*.md, and requires each to exist.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import REPO

#: A cited path: ``docs/anything`` or ``anything.md`` (a relative path, no URL).
_CITED = re.compile(r"(?<![\w/.:-])((?:\.\./)*(?:[\w.-]+/)*(?:[\w.-]+\.md|docs/[\w./-]*\w))")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")


def _citing_files() -> list[Path]:
    files = sorted((REPO / "sandbox").rglob("*.py"))
    files += [REPO / "README.md", REPO / "SECURITY.md", *sorted((REPO / "docs").glob("*.md"))]
    return files


def _citations(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for cited in _CITED.findall(_URL.sub(" ", line)):
            found.append((number, cited.rstrip(".")))
    return found


def _exists(cited: str, citing: Path) -> bool:
    if "/shared/" in f"/{cited}":
        return False  # a document outside the repository, whatever this machine has
    return any((base / cited).exists() for base in (REPO, citing.parent))


def test_the_scan_finds_citations() -> None:
    # A pattern that matched nothing would pass everything.
    cited = {c for path in _citing_files() for _, c in _citations(path)}
    assert {"SECURITY.md", "docs/protected-paths.md"} <= cited, cited
    assert _citations(Path(__file__))  # this module cites ../shared/... and POLICY.md


def test_every_cited_document_exists() -> None:
    missing = [f"{path.relative_to(REPO)}:{number}: {cited}"
               for path in _citing_files() for number, cited in _citations(path)
               if not _exists(cited, path)]  # fmt: skip
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_a_document_outside_the_repository_is_missing() -> None:
    assert not _exists("../shared/POLICY.md", REPO / "sandbox" / "x.py")
    assert not _exists("POLICY.md", REPO / "sandbox" / "x.py")
    assert _exists("policy.md", REPO / "docs" / "approvals.md")
