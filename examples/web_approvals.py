"""Approvals on a web page: the agent waits while a human answers in the browser.

    python examples/web_approvals.py              # open the printed URL and answer
    python examples/web_approvals.py --self-test  # answer through the page's API instead

The page (127.0.0.1 only, behind a random token) lists pending requests live from the
SQLite store; `WebConfirmationProvider` waits for the answer given there. A separate
`sandbox approvals serve --store approvals.db` works the same across processes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from sandbox import ApprovalStore, FunctionTool, ToolRunner, WebConfirmationProvider


def rotate_keys(service: str) -> dict[str, Any]:
    """Rotate the API keys of a service (clients must reconnect)."""
    return {"rotated": service}


async def answer_through_the_api(base_url: str, token: str) -> None:
    """What a human's click does, for --self-test: approve the first, deny the second."""
    import httpx  # only the self-test needs an HTTP client

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as client:
        answered: set[str] = set()
        while len(answered) < 2:
            pending = (await client.get("/api/pending", params={"unanswered": "1"})).json()
            for request in pending["requests"]:
                if request["id"] in answered:
                    continue
                body = ({"outcome": "approve"} if request["args"]["service"] == "billing"
                        else {"outcome": "deny", "reason": "auth is mid-deploy"})
                await client.post(f"/api/requests/{request['id']}/answer", json=body)
                answered.add(request["id"])
            await anyio.sleep(0.1)


async def main() -> None:
    self_test = "--self-test" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        store = ApprovalStore(Path(tmp) / "approvals.db")
        provider = WebConfirmationProvider(store, timeout=600)
        runner = ToolRunner(tools=[FunctionTool(rotate_keys, require_confirmation=True)],
                            provider=provider, store=store)
        async with provider.serving() as server:
            print(f"open {server.url} to answer", flush=True)
            results: dict[str, Any] = {}

            async def call(service: str) -> None:
                results[service] = await runner.call("rotate_keys", {"service": service})

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "billing")
                tg.start_soon(call, "auth")
                if self_test:
                    tg.start_soon(answer_through_the_api, server.base_url, server.token)
        for service, result in results.items():
            print(service, "->", result)


if __name__ == "__main__":
    anyio.run(main)
