"""A Pydantic AI agent behind the gate, one run per process (run by tests/integrations/test_pydantic_ai.py).

usage: pydantic_ai_agent.py STORE EFFECT HISTORY ask
       pydantic_ai_agent.py STORE EFFECT HISTORY resume-from-store

``ask``: the model (a scripted `FunctionModel`) calls ``delete(path="build")``, which
needs approval; with no provider the run ends with ``DeferredToolRequests``. The history
is saved to HISTORY (``ModelMessagesTypeAdapter``) and the confirmation id is printed.
``resume-from-store``: a new process (a restart) loads the history, reads the answers
given on other channels from STORE (`results_from_store`) and runs again; the final
output is printed. ``delete`` appends its path to EFFECT: the proof of how often it ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from sandbox.integrations.pydantic_ai import SandboxApprovalToolset


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(json.dumps(
            [[p.content, p.outcome] for p in returns]))])
    return ModelResponse(parts=[ToolCallPart("delete", {"path": "build"}, tool_call_id="d1")])


def main() -> None:
    store, effect, history, mode = sys.argv[1:5]
    tools = FunctionToolset()

    @tools.tool_plain(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a directory."""
        with open(effect, "a", encoding="utf-8") as fh:
            fh.write(path + "\n")
        return f"deleted {path}"

    gated = SandboxApprovalToolset(tools, store=store)
    agent = Agent(FunctionModel(model), toolsets=[gated],
                  output_type=[str, DeferredToolRequests])
    if mode == "ask":
        result = agent.run_sync("clean up")
        assert isinstance(result.output, DeferredToolRequests), result.output
        Path(history).write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
        print(result.output.metadata["d1"]["confirmation_id"], flush=True)
        return
    messages = ModelMessagesTypeAdapter.validate_json(Path(history).read_bytes())
    requests = DeferredToolRequests(approvals=[
        p for p in messages[-1].parts if isinstance(p, ToolCallPart)])
    import anyio

    results = anyio.run(gated.results_from_store, requests)
    result = agent.run_sync(message_history=messages, deferred_tool_results=results)
    print(result.output, flush=True)


if __name__ == "__main__":
    main()
