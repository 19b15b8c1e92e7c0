"""Give an agent a bash sandbox: a policy on the parsed command, limits, whole-tree kill.

    python examples/bash_sandbox.py [policies/readonly.toml]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from sandbox import AutoApprove, BashToolPolicy, ExecuteBashTool, ToolRunner


async def main() -> None:
    if len(sys.argv) > 1:
        policy = BashToolPolicy.from_toml(sys.argv[1])
    else:
        policy = BashToolPolicy(
            allowed_command_prefixes=("ls", "cat", "echo", "wc", "head", "sleep", "setsid"),
            blocked_operators=(">", ">>"),
            timeout_seconds=2,
            max_memory_bytes=512 << 20,
            max_file_size_bytes=16 << 20,
            max_child_processes=32,
            no_confirmation_prefixes=("ls", "wc"),
        )
    with tempfile.TemporaryDirectory() as workspace:
        (Path(workspace) / "notes.txt").write_text("one\ntwo\nthree\n")
        tool = ExecuteBashTool(workspace=Path(workspace), policy=policy)
        runner = ToolRunner(tools=[tool], provider=AutoApprove())
        for command in ("ls -1 | wc -l", "cat notes.txt | head -n 2", "cat notes.txt; id",
                        "echo $(whoami)", "echo hi > out.txt",
                        "setsid sleep 300 & echo escaped; sleep 300", "yes | head -c 3000000"):
            result = await runner.call("execute_bash", {"command": command})
            shown = {k: result.get(k) for k in ("status", "returncode", "timed_out",
                                                 "truncated", "containment", "error")
                     if result.get(k) is not None}
            print(f"$ {command}\n  {shown}")


if __name__ == "__main__":
    anyio.run(main)
