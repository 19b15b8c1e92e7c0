"""Every snippet in README.md runs: python blocks in a fresh interpreter, bash blocks
line by line with the installed `sandbox` command (blocks marked `norun` start servers
or the test suite itself and are exercised by their own tests)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def _blocks(language: str) -> list[tuple[int, str]]:
    found = []
    for match in BLOCK.finditer(README):
        lang, info, body = match.group(1), match.group(2), match.group(3)
        if lang == language and "norun" not in info:
            found.append((README[: match.start()].count("\n") + 1, body))
    return found


PYTHON = _blocks("python")
BASH = [(line, body) for line, body in _blocks("bash") if "scripts/" not in body]


def test_readme_has_snippets() -> None:
    assert len(PYTHON) >= 5 and BASH


@pytest.mark.timeout(120)
@pytest.mark.parametrize("line,code", PYTHON, ids=[f"line{n}" for n, _ in PYTHON])
def test_python_snippet_runs(line: int, code: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=100, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"README.md:{line}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("line,code", BASH, ids=[f"line{n}" for n, _ in BASH])
def test_bash_snippet_runs(line: int, code: str) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=100,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"README.md:{line}\n{proc.stdout}\n{proc.stderr}"
