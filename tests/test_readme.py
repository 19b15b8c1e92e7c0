"""Every snippet in README.md runs: python blocks in a fresh interpreter, bash blocks word
for word after the README's own set-up lines (blocks marked `norun` start servers or the
test suite itself and are exercised by their own tests). The slow test does it all from
a fresh copy of the repository, starting with `bash scripts/demo.sh`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
#: The top-level modules a python block imports (a block needing an extra's package
#: runs only where that extra is installed).
IMPORT = re.compile(r"^\s*(?:from|import)\s+([A-Za-z_][A-Za-z0-9_.]*)", re.M)


def _blocks(language: str) -> list[tuple[int, str]]:
    found = []
    for match in BLOCK.finditer(README):
        lang, info, body = match.group(1), match.group(2), match.group(3)
        if lang == language and "norun" not in info:
            found.append((README[: match.start()].count("\n") + 1, body))
    return found


PYTHON = _blocks("python")
BASH = [(line, body) for line, body in _blocks("bash") if "scripts/" not in body]
[(_, SETUP)] = [(line, body) for line, body in _blocks("bash") if "scripts/demo.sh" in body]
#: The set-up block's lines other than the scripts: what makes `sandbox` a command.
ACTIVATE = "\n".join(line for line in SETUP.splitlines() if "scripts/" not in line)


def _plain_path() -> str:
    """PATH without any virtual environment: a new shell's, before the README's set-up."""
    venvs = {str(Path(sys.executable).parent), str(ROOT / ".venv" / "bin")}
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p not in venvs)


def _shell_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = _plain_path()
    return env


def test_readme_has_snippets() -> None:
    assert len(PYTHON) >= 5 and BASH


@pytest.mark.timeout(120)
@pytest.mark.parametrize("line,code", PYTHON, ids=[f"line{n}" for n, _ in PYTHON])
def test_python_snippet_runs(line: int, code: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=100, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"README.md:{line}\n{proc.stdout}\n{proc.stderr}"


def test_the_sandbox_command_is_not_on_a_plain_path() -> None:
    # The premise of the next test: without the README's set-up line there is no `sandbox`.
    found = subprocess.run(["bash", "-c", "command -v sandbox"], env=_shell_env(),
                           capture_output=True, text=True)
    assert found.returncode != 0, found.stdout
    assert "activate" in ACTIVATE


@pytest.mark.timeout(120)
@pytest.mark.parametrize("line,code", BASH, ids=[f"line{n}" for n, _ in BASH])
def test_bash_snippet_runs(line: int, code: str) -> None:
    if not (ROOT / ".venv" / "bin" / "sandbox").exists():
        pytest.skip("no .venv here: run bash scripts/test.sh")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", f"{ACTIVATE}\n{code}"],
                          cwd=ROOT, env=_shell_env(), capture_output=True, text=True,
                          timeout=100, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"README.md:{line}\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_shell_commands_work_word_for_word_in_a_fresh_copy(tmp_path: Path) -> None:
    """A fresh copy of the tracked files, the README's set-up command, then every bash
    snippet exactly as written, in a shell with no virtual environment on PATH."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")
    clone = tmp_path / "clone"
    for name in filter(None, (f.decode() for f in files)):
        source, target = ROOT / name, clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    script = "\n".join([SETUP.splitlines()[0], ACTIVATE, *(code for _, code in BASH)])
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone,
                          env=_shell_env(), capture_output=True, text=True, timeout=850,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "demo finished" in proc.stdout
    assert ". .venv/bin/activate" in proc.stdout  # the demo script says how
    # Then every python block, with the interpreter the set-up made. The demo installs
    # no extras: a block that imports one (google-adk, a framework, mcp) runs in
    # test_python_snippet_runs, with every extra the test command installs.
    python = clone / ".venv" / "bin" / "python"

    def importable(module: str) -> bool:
        return subprocess.run([str(python), "-c", f"import {module}"],
                              capture_output=True).returncode == 0  # fmt: skip

    ran, needs_extra = 0, 0
    for line, code in PYTHON:
        modules = {m.group(1) for m in IMPORT.finditer(code)} - {"sandbox"}
        if not all(importable(m) for m in modules):
            needs_extra += 1
            continue
        block = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=_shell_env(),
                               capture_output=True, text=True, timeout=100,
                               stdin=subprocess.DEVNULL)
        assert block.returncode == 0, f"README.md:{line}\n{block.stdout}\n{block.stderr}"
        ran += 1
    # The blocks of the core library (no extra) all ran; only the integrations' did not.
    assert ran >= 5 and ran + needs_extra == len(PYTHON)
