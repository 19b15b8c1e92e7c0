"""Every program in examples/ runs to completion and shows what its docstring promises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.bash.run import containment
from sandbox.bash.run.process import find_bash
from tests.paths import REPO

ROOT = REPO
#: The whole-tree mechanism a run gets on this machine, as the example reports it.
STRONGEST = containment.choose("auto", find_bash())
EXPECT = {
    "confirm_predicate.py": ([], ["orders is frozen", "'dry_run': True"]),
    "bash_sandbox.py": ([], ["blocked by R2", "'timed_out': True",
                             "$ cat big.log\n  stdout: log line 0", "'truncated': True",
                             "drop the redirection", "$ setsid sleep 300 & echo escaped",
                             f"'process-tree': 'active: {STRONGEST}'"]),
    "deferred_approvals.py": ([], ["not during the incident", "hash chain intact",
                                   "still waiting: ['billing']"]),
    "adk_agent.py": ([], ["prod wipes need a change ticket", "blocked by R2",
                          "'wiped': 'staging'"]),
    "web_approvals.py": (["--self-test"], ["billing -> {'rotated': 'billing'}",
                                           "auth is mid-deploy"]),
}


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXPECT)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_example_runs(name: str, tmp_path: Path) -> None:
    args, expected = EXPECT[name]
    # The examples make their workspaces under TMPDIR: a process whose working directory
    # is still there when the example has returned escaped the whole-tree kill (the
    # bash example's `setsid sleep 300 &`).
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    survivors = _working_in(tmp_path)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for text in expected:
        assert text in proc.stdout, (text, proc.stdout[-3000:])
    assert not survivors, f"processes left running by {name}: {survivors}"


def _working_in(directory: Path) -> dict[int, str]:
    """The processes (pid: command line) whose working directory is under `directory`."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cwd == str(directory) or cwd.startswith(f"{directory}/"):
            found[int(entry)] = cmdline
    return found
