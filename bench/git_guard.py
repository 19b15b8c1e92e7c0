"""What the git guard costs: git run directly versus through the guard (sandbox/bash/run/gitguard.py).

The guard is a bash script that asks git for the repository's configuration (`git
config --list`) before it runs the real git, so each git a command runs costs one bash
start and one extra git. Measured in a scratch repository with one unstaged change,
without OS confinement (the same for both columns).

    python bench/git_guard.py --runs 50
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.bash.run.gitguard import guarded_env

COMMANDS = (["git", "status"], ["git", "diff"], ["git", "log", "-1", "-p"],
            ["git", "rev-parse", "HEAD"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-git-guard-"))
    try:
        plain = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
        repo = root / "r"
        repo.mkdir()
        (repo / "f.txt").write_text("a\n" * 100)
        for cmd in (["init", "-q"], ["add", "-A"],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
            subprocess.run(["git", *cmd], cwd=repo, env=plain, check=True)
        (repo / "f.txt").write_text("a\n" * 99 + "b\n")
        guarded = guarded_env(plain)
        print(f"{'command':<22}{'git (ms)':>10}{'guarded (ms)':>14}{'extra (ms)':>12}")
        for cmd in COMMANDS:
            times = []
            for env in (plain, guarded):
                subprocess.run(cmd, cwd=repo, env=env, capture_output=True, check=True)
                start = time.perf_counter()
                for _ in range(args.runs):
                    subprocess.run(cmd, cwd=repo, env=env, capture_output=True, check=True)
                times.append((time.perf_counter() - start) / args.runs * 1000)
            print(f"{' '.join(cmd):<22}{times[0]:>10.1f}{times[1]:>14.1f}"
                  f"{times[1] - times[0]:>12.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
