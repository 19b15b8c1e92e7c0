"""Wrap a risky function with a require_confirmation predicate; answer in your own UI.

    python examples/confirm_predicate.py

The predicate sees the call's arguments: dry runs need no human, real drops do. The
callback stands in for your UI (a chat message, a modal, a ticket); it may return True/
False, a ToolConfirmation, or a Decision (approve, deny with a reason, edit the args).
"""

from __future__ import annotations

import anyio

from sandbox import (
    CallbackConfirmationProvider,
    ConfirmationRequest,
    Decision,
    FunctionTool,
    ToolRunner,
)


def drop_table(table: str, dry_run: bool = False) -> dict[str, object]:
    """Drop a database table.

    Args:
        table: The table to drop.
        dry_run: Only report what would be dropped.
    """
    return {"dropped": table, "dry_run": dry_run}


def review(request: ConfirmationRequest) -> Decision:
    table = request.args["table"]
    if table == "orders":
        return Decision.deny("orders is frozen during the release", decided_by="alice")
    if table.startswith("tmp_"):
        return Decision.approve(decided_by="alice")
    # Approve something narrower than what was asked: the edit approves the edited call,
    # which is re-validated and re-checked against hard refusals, then runs once.
    return Decision.edit({"table": table, "dry_run": True}, decided_by="alice")


async def main() -> None:
    tool = FunctionTool(drop_table, require_confirmation=lambda table, dry_run: not dry_run)
    runner = ToolRunner(tools=[tool], provider=CallbackConfirmationProvider(review))
    for args in ({"table": "tmp_1", "dry_run": True}, {"table": "tmp_2"},
                 {"table": "orders"}, {"table": "users"}):
        print(args, "->", await runner.call("drop_table", args))


if __name__ == "__main__":
    anyio.run(main)
