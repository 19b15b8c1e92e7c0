"""Give an agent a bash sandbox: a policy on the parsed command, limits, whole-tree kill.

    python examples/bash_sandbox.py [POLICY]     # POLICY: a shipped name or a TOML file

Each command is shown with what the agent gets back: the output (head and tail when it
is cut), or why it did not run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from sandbox import AutoApprove, BashToolPolicy, ExecuteBashTool, ToolRunner, policies


def show(command: str, result: dict[str, Any]) -> None:
    print(f"$ {command}")
    for stream in ("stdout", "stderr"):
        text = result.get(stream) or ""
        lines = text.splitlines()
        if len(lines) > 6:  # keep the example's own output short: first and last lines
            lines = [*lines[:3], f"... ({len(lines) - 6} more lines) ...", *lines[-3:]]
        for line in lines:
            print(f"  {stream}: {line[:100]}")
    facts = {k: result.get(k) for k in ("status", "returncode", "timed_out", "truncated",
                                        "stdout_bytes_dropped", "containment", "error")
             if result.get(k) is not None}
    print(f"  {facts}")


async def main() -> None:
    if len(sys.argv) > 1:
        policy = BashToolPolicy.from_toml(policies.resolve(sys.argv[1]))
    else:
        policy = BashToolPolicy(
            allowed_command_prefixes=("ls", "cat", "echo", "wc", "head", "seq", "sleep",
                                      "setsid"),
            blocked_operators=(">", ">>"),
            timeout_seconds=2,
            max_memory_bytes="512MiB",
            max_file_size_bytes="16MiB",
            max_child_processes=32,
            max_output_bytes="4KiB",  # per stream: the head and the tail are kept
            no_confirmation_prefixes=("ls", "wc"),
        )
    with tempfile.TemporaryDirectory() as workspace:
        (Path(workspace) / "notes.txt").write_text("one\ntwo\nthree\n")
        # A file bigger than the policy's output bound, so `cat` shows truncation.
        big = Path(workspace) / "big.log"
        big.write_text("".join(f"log line {i}\n" for i in range(policy.max_output_bytes // 6)))
        tool = ExecuteBashTool(workspace=Path(workspace), policy=policy)
        runner = ToolRunner(tools=[tool], provider=AutoApprove())
        for command in ("ls -1 | wc -l", "cat notes.txt | head -n 2", "cat notes.txt; id",
                        "echo $(whoami)", "echo hi > out.txt", "cat big.log",
                        "setsid sleep 300 & echo escaped; sleep 300"):
            show(command, await runner.call("execute_bash", {"command": command}))


if __name__ == "__main__":
    anyio.run(main)
