"""A separate process holding a ToolRunner on a shared store file (used by the tests).

usage: gate_process.py STORE EFFECT ACTION [ARG...]

  open CALL_ID TEXT         record call `append` in the store and exit before it runs
  defer CALL_ID TEXT        call `append` (needs confirmation, no provider); print the result
  pending                   print the pending requests
  resume CONF_ID [GO_FILE]  print "ready", wait until GO_FILE exists, then approve; print
                            the result
  submit CONF_ID            record an approval with store.submit_answer; print "ok"
  hang CALL_ID TEXT MARKER  call `slow_append` (no confirmation): it appends, creates MARKER,
                            then sleeps until killed
Each printed value is one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sandbox import ApprovalStore, FunctionTool, ToolConfirmation, ToolRunner, args_digest


def main(store_path: str, effect: str, action: str, *rest: str) -> None:
    marker: list[str] = []

    def append(text: str) -> dict[str, Any]:
        with open(effect, "a", encoding="utf-8") as fh:
            fh.write(f"{text} pid={os.getpid()}\n")
        return {"written": text}

    def slow_append(text: str) -> dict[str, Any]:
        append(text)
        Path(marker[0]).touch()
        time.sleep(60)
        return {"written": text}

    tools = [FunctionTool(append, require_confirmation=True), FunctionTool(slow_append)]
    if action == "open":  # record a call, then exit before it gets anywhere
        with ApprovalStore(store_path) as store:
            store.open_call(rest[0], "append", args_digest("append", {"text": rest[1]}),
                            {"text": rest[1]})
        print(json.dumps("ok"))
        return
    if action == "submit":
        with ApprovalStore(store_path) as store:
            store.submit_answer(rest[0], {"outcome": "approve"}, decided_by="bob",
                                channel="other-process")
        print(json.dumps("ok"))
        return
    runner = ToolRunner(tools, store_path=store_path)
    if action == "defer":
        result: Any = runner.call_sync("append", {"text": rest[1]}, call_id=rest[0])
    elif action == "pending":
        result = [r.model_dump(mode="json") for r in runner.store.pending()]
    elif action == "resume":
        if len(rest) > 1:
            print(json.dumps("ready"), flush=True)
            while not Path(rest[1]).exists():
                time.sleep(0.001)
        result = runner.resume_sync(rest[0], ToolConfirmation(confirmed=True))
    elif action == "hang":
        marker.append(rest[2])
        result = runner.call_sync("slow_append", {"text": rest[1]}, call_id=rest[0])
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
