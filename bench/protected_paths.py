"""What protected paths cost: the workspace walk, and a confined `true` with and without.

    .venv/bin/python bench/protected_paths.py [--dirs 1000,10000,50000] [--runs 30]

For each size, a workspace of that many directories (three files each, a repository at
the root and one nested repository per thousand directories) is made under /tmp; then:

- first scan: `protected.scan` with an empty cache (what the first run pays);
- rescan: the same again (every later run: a stat per directory, listings cached);
- run: the median wall time of `ExecuteBashTool` running `true`, back to back (so that
  reserved runs are taken), with ``protected_paths=()`` and with the defaults.

The walk runs in a worker thread, never on the agent's event loop; past
SANDBOX_PROTECTED_SCAN_LIMIT directories (50,000 by default) a run is refused instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext
from sandbox.bash.linux import protected


def make_workspace(dirs: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="sandbox-bench-protected-"))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    made = 0
    per = 100
    for i in range(dirs // per + 1):
        for j in range(per):
            if made >= dirs:
                break
            d = root / f"a{i}" / f"b{j}"
            d.mkdir(parents=True)
            for k in range(3):
                (d / f"f{k}").write_text("")
            made += 1
        if i % 10 == 5:
            subprocess.run(["git", "init", "-q", str(root / f"a{i}")], check=True)
    return root


async def runs(workspace: Path, protected_paths: tuple[str, ...], count: int) -> float:
    policy = BashToolPolicy(protected_paths=protected_paths, drop_privileges=False)
    tool = ExecuteBashTool(workspace=workspace, policy=policy)
    times = []
    for i in range(count + 2):
        ctx = ToolContext(function_call_id=f"c{i}",
                          tool_confirmation=ToolConfirmation(confirmed=True))  # fmt: skip
        started = time.perf_counter()
        result = await tool.run_async(args={"command": "true"}, tool_context=ctx)
        elapsed = (time.perf_counter() - started) * 1000
        if "error" in result:
            raise SystemExit(result["error"])
        if i >= 2:
            times.append(elapsed)
        await asyncio.sleep(0.05)  # the model's turn: the next run is reserved meanwhile
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dirs", default="1000,10000,45000,60000")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    patterns = protected.resolve_patterns(("@default",))
    print(f"{'directories':>11} | {'first scan ms':>13} | {'rescan ms':>9} | "
          f"{'true, none ms':>13} | {'true, default ms':>16} | protected")  # fmt: skip
    print("-" * 11 + "-+-" + "-" * 13 + "-+-" + "-" * 9 + "-+-" + "-" * 13 + "-+-"
          + "-" * 16 + "-+-" + "-" * 9)  # fmt: skip
    for size in (int(s) for s in args.dirs.split(",")):
        ws = make_workspace(size)
        try:
            os.sync()
            protected._cache.clear()
            t0 = time.perf_counter()
            found = protected.scan(str(ws), patterns)
            t1 = time.perf_counter()
            time.sleep(2.1)  # past the window in which a listing is not cached
            protected.scan(str(ws), patterns)
            t3 = time.perf_counter()
            protected.scan(str(ws), patterns)
            t2 = t1 + (time.perf_counter() - t3)
            none = asyncio.run(runs(ws, (), args.runs))
            default = (asyncio.run(runs(ws, ("@default",), args.runs)) if not found.problem
                       else float("nan"))  # fmt: skip
            count = len(found.read_only) + len(found.placeholders) + len(found.placeholder_files)
            print(f"{found.directories:>11} | {(t1 - t0) * 1000:>13.1f} | "
                  f"{(t2 - t1) * 1000:>9.1f} | {none:>13.1f} | {default:>16.1f} | "
                  + (f"{count} paths" if not found.problem else "run refused: past the bound"))
        finally:
            shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    main()
