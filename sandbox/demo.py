"""`sandbox demo`: the library's main job, on embedded defaults (no network, no account).

1. A risky Python function behind a `require_confirmation` predicate, answered by a
   callback (the hook a custom UI plugs into): one call approved, one denied.
2. The same tool with no provider: the request waits in a SQLite file, a *second
   process* lists it and approves it, and the call runs exactly once.
3. When the bash sandbox is available: a policy check and a sandboxed command.
"""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import anyio

from sandbox.approval import CallbackConfirmationProvider, ConfirmationRequest, Decision, ToolRunner
from sandbox.tools import FunctionTool


def _say(text: str = "") -> None:
    print(text, flush=True)


def _show(label: str, value: Any) -> None:
    _say(f"  {label}: {json.dumps(value, default=str)}")


def make_wipe_tool(root: Path) -> FunctionTool:
    """A stand-in for a destructive tool: it really deletes files under ``root``."""

    def wipe(scope: str) -> dict[str, Any]:
        """Delete every file of a scope.

        Args:
            scope: Which scope to wipe: "dry-run" lists what would go; anything else deletes.
        """
        target = root / scope
        files = sorted(p.name for p in target.glob("*")) if target.exists() else []
        if scope != "dry-run":
            for name in files:
                (target / name).unlink()
        return {"scope": scope, "deleted" if scope != "dry-run" else "would_delete": files}

    return FunctionTool(wipe, require_confirmation=lambda scope: scope != "dry-run")


def _seed(root: Path) -> None:
    for scope in ("prod", "staging", "dry-run"):
        (root / scope).mkdir(parents=True, exist_ok=True)
        for i in range(3):
            (root / scope / f"record-{i}.txt").write_text("data\n")


async def _part_callback(root: Path) -> None:
    _say("1. require_confirmation predicate, answered by a callback (your UI goes here)")

    def ui(request: ConfirmationRequest) -> Decision:
        verdict = request.args["scope"] != "prod"
        _say(f"  [ui] {request.tool}({request.args}) -> {'approve' if verdict else 'deny'}")
        if verdict:
            return Decision.approve(decided_by="demo-ui")
        return Decision.deny("production is frozen this week", decided_by="demo-ui")

    runner = ToolRunner(tools=[make_wipe_tool(root)], provider=CallbackConfirmationProvider(ui))
    _show("dry-run (no confirmation needed)", await runner.call("wipe", {"scope": "dry-run"}))
    _show("staging (approved)", await runner.call("wipe", {"scope": "staging"}))
    _show("prod (denied)", await runner.call("wipe", {"scope": "prod"}))
    _say(f"  files left in prod: {len(list((root / 'prod').glob('*')))} (nothing ran)")


_APPROVER = textwrap.dedent(
    """
    import sys
    from sandbox.approval.explain import explain
    from sandbox.approval.store import open_store
    store = open_store(sys.argv[1])
    for req in store.pending():
        print(f"  [other process] pending {req.id}: {req.tool}({req.args})", flush=True)
        print(f"  [other process] why asked: {explain(req).why}", flush=True)
        store.submit_answer(req.id, {"outcome": "approve"}, decided_by="operator",
                            channel="demo-cli")
    """
)


async def _part_deferred(root: Path, db: Path) -> None:
    _say("")
    _say("2. no provider: the request waits in SQLite and is approved from another process")
    runner = ToolRunner(tools=[make_wipe_tool(root)], store_path=str(db))
    first = await runner.call("wipe", {"scope": "prod"}, call_id="demo-call-1")
    _show("call", first)
    # A separate process (think: a web page, a queue consumer, hours later) answers.
    await anyio.run_process([sys.executable, "-c", _APPROVER, str(db)], check=True,
                            stdout=None, stderr=None)
    # A fresh runner on the same file stands in for the agent after a restart.
    later = ToolRunner(tools=[make_wipe_tool(root)], store_path=str(db))
    _show("resume", await later.resume(first["confirmation_id"]))
    replay = await later.resume(first["confirmation_id"], Decision.approve(decided_by="replayer"))
    _show("resume again (single-use grant)", replay)
    _show("same call id again", await later.call("wipe", {"scope": "prod"}, call_id="demo-call-1"))
    _say("  journal: " + " -> ".join(s for s, _, _ in later.store.journal("demo-call-1")))


async def _part_bash(root: Path) -> None:
    try:
        from sandbox.bash import BashToolPolicy, ExecuteBashTool
    except ImportError:
        return
    from sandbox.approval import AutoApprove

    _say("")
    _say("3. a bash sandbox: the policy decides on the parsed command, limits apply")
    policy = BashToolPolicy(
        allowed_command_prefixes=("ls", "echo", "wc", "cat"),
        blocked_operators=(">", ">>", ";"),  # ';' also blocks a newline between commands
        timeout_seconds=5,
        max_memory_bytes=512 << 20,
        max_file_size_bytes=1 << 20,
        max_child_processes=32,
    )
    for command in ("ls -1 | wc -l", 'echo "a;b" | cat', "ls; rm -rf /", "echo $(id)",
                    "ls\necho done", "/bin/rm -rf x"):
        decision = policy.check(command)
        verdict = "allow" if decision.allowed else "BLOCK"
        _say(f"  check {command!r:28} -> {verdict}  {'' if decision.allowed else decision.reason}")
    tool = ExecuteBashTool(workspace=root, policy=policy)
    runner = ToolRunner(tools=[tool], provider=AutoApprove())
    result = await runner.call("execute_bash", {"command": "ls -1 | wc -l"})
    _show("run 'ls -1 | wc -l'", {k: result.get(k) for k in ("stdout", "returncode",
                                                               "timed_out", "duration_ms")})
    escape = ExecuteBashTool(workspace=root, policy=BashToolPolicy(
        allowed_command_prefixes=("setsid", "sleep", "echo"), timeout_seconds=1))
    runner = ToolRunner(tools=[escape], provider=AutoApprove())
    result = await runner.call("execute_bash",
                               {"command": "setsid sleep 300 & echo detached; sleep 300"})
    _show("an escape ('setsid sleep 300 &', then a 1 s timeout)",
          {k: result.get(k) for k in ("stdout", "timed_out", "duration_ms", "containment",
                                      "killed_processes", "error")})


async def run_demo() -> int:
    with tempfile.TemporaryDirectory(prefix="sandbox-demo-") as tmp:
        root = Path(tmp) / "data"
        _seed(root)
        await _part_callback(root)
        await _part_deferred(root, Path(tmp) / "approvals.db")
        await _part_bash(root)
    _say("")
    _say("demo finished: every denied call left its files, every approved one ran once.")
    return 0


def main() -> int:
    return anyio.run(run_demo)
