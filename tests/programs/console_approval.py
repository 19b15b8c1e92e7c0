"""A runner whose calls are confirmed at the terminal (run under a pseudo-terminal by the tests).

usage: console_approval.py STORE EFFECT RESULTS [--timeout S] COMMAND...

Each COMMAND is passed, one call after another, to the tool `shell`, which needs
confirmation and only appends the command it was given to EFFECT. Its rule subjects are
the simple commands `BashToolPolicy` parses, as for ExecuteBashTool. Each call's result
is appended to RESULTS as one JSON line. The provider is ConsoleConfirmationProvider()
with its defaults: it talks to /dev/tty.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from sandbox import FunctionTool, ToolRunner
from sandbox.approval.channels.console import ConsoleConfirmationProvider
from sandbox.bash.policy.evaluate import BashToolPolicy


class ShellTool(FunctionTool):
    """A command-shaped tool: rules match its parsed simple commands."""

    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        return BashToolPolicy().check(args["command"]).commands

    async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
        # A hard refusal, as a bash policy's: no human's answer (an edit included) runs it.
        commands = BashToolPolicy().check(args["command"]).commands
        if any(argv[:1] == ("wget",) for argv in commands):
            return {"error": "Command blocked: wget is not allowed"}
        return None


def main() -> None:
    store, effect, results, *rest = sys.argv[1:]
    timeout = 600.0
    if rest[:1] == ["--timeout"]:
        timeout = float(rest[1])
        rest = rest[2:]

    def shell(command: str) -> dict[str, Any]:
        with open(effect, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(command) + "\n")
        return {"ran": command}

    runner = ToolRunner(
        [ShellTool(shell, require_confirmation=True)],
        provider=ConsoleConfirmationProvider(timeout=timeout),
        store_path=store, session_id="console-test",
    )

    def record(line: str) -> None:
        with open(results, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    async def go() -> None:
        for command in rest:
            result = await runner.call("shell", {"command": command})
            record(json.dumps(result))

    anyio.run(go)
    print("\nall calls done", flush=True)


if __name__ == "__main__":
    main()
