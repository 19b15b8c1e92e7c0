"""A queue answered later: requests wait in SQLite, another process answers, the agent
applies the answer exactly once — even after a restart.

    python examples/deferred_approvals.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio

from sandbox import FunctionTool, ToolRunner


def deploy(service: str, version: str) -> dict[str, str]:
    """Deploy a service version to production."""
    return {"deployed": service, "version": version}


def make_runner(db: Path) -> ToolRunner:
    return ToolRunner(tools=[FunctionTool(deploy, require_confirmation=True)],
                      store_path=str(db), audit_path=str(db.with_suffix(".audit.jsonl")))


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "approvals.db"
        agent = make_runner(db)
        for n, service in enumerate(("api", "worker", "billing")):
            parked = await agent.call("deploy", {"service": service, "version": "1.4"},
                                      call_id=f"turn1-{n}")
            print("parked:", parked["confirmation_id"], service)
        # Another process answers (the CLI; the web page works the same way).
        cli = [sys.executable, "-m", "sandbox", "approvals"]
        pending = (await anyio.run_process([*cli, "list", "--store", str(db), "--json"])).stdout
        print("pending (from another process):", pending.decode()[:120], "...")
        ids = [r.id for r in await agent.pending()]
        for answer in (["approve", ids[0]],
                       ["deny", ids[1], "--reason", "not during the incident"]):
            done = await anyio.run_process([*cli, *answer, "--store", str(db)])
            print(done.stdout.decode().strip())
        # The agent restarts, then applies whatever was answered while it was away.
        restarted = make_runner(db)
        for confirmation_id, result in (await restarted.apply_answers()).items():
            print("applied", confirmation_id, "->", result)
        print("still waiting:", [r.args["service"] for r in await restarted.pending()])
        verify = await anyio.run_process([sys.executable, "-m", "sandbox", "audit", "verify",
                                          str(db.with_suffix(".audit.jsonl"))])
        print(verify.stdout.decode().strip())


if __name__ == "__main__":
    anyio.run(main)
