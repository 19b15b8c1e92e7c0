"""Every program in examples/ runs to completion and shows what its docstring promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO
EXPECT = {
    "confirm_predicate.py": ([], ["orders is frozen", "'dry_run': True"]),
    "bash_sandbox.py": ([], ["blocked by R2", "'timed_out': True",
                             "$ cat big.log\n  stdout: log line 0", "'truncated': True",
                             "drop the redirection", "cgroup" if Path(
                                 "/sys/fs/cgroup").exists() else ""]),
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
def test_example_runs(name: str) -> None:
    args, expected = EXPECT[name]
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for text in expected:
        assert text in proc.stdout, (text, proc.stdout[-3000:])
