"""Our gate inside a real google-adk agent (needs the `adk` extra), with no network:
a scripted model stands in for Gemini and asks for three tool calls.

    python examples/adk_agent.py

- ADK's own `FunctionTool(require_confirmation=True)` is answered by `ApprovalPlugin`
  through one of our providers (here a callback: deny wipes of prod, with a reason).
- Our `ExecuteBashTool` becomes an ADK tool with `to_adk_tool`, its policy intact: a
  blocked command is refused before anyone is asked.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool as AdkFunctionTool
from google.genai import types
from pydantic import Field

from sandbox import (
    AutoApprove,
    BashToolPolicy,
    CallbackConfirmationProvider,
    ConfirmationRequest,
    Decision,
    ExecuteBashTool,
    ToolRunner,
)
from sandbox.integrations.adk import ApprovalPlugin, to_adk_tool


class ScriptedModel(BaseLlm):
    """Returns the next scripted turn of function calls, then a closing text."""

    model: str = "scripted"
    turns: list[list[types.FunctionCall]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        for content in llm_request.contents[-1:]:
            for part in content.parts or []:
                if part.function_response is not None:
                    print(f"  model sees {part.function_response.name}: "
                          f"{part.function_response.response}")
        parts = ([types.Part(function_call=fc) for fc in self.turns.pop(0)] if self.turns
                 else [types.Part.from_text(text="done")])
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def wipe(target: str) -> dict[str, Any]:
    """Wipe a target environment."""
    return {"wiped": target}


def review(request: ConfirmationRequest) -> Decision:
    if request.args.get("target") == "prod":
        return Decision.deny("prod wipes need a change ticket", decided_by="oncall")
    return Decision.approve(decided_by="oncall")


async def main() -> None:
    with tempfile.TemporaryDirectory() as workspace:
        bash = ExecuteBashTool(workspace=Path(workspace), policy=BashToolPolicy(
            allowed_command_prefixes=("ls", "echo")))
        ours = ToolRunner(tools=[bash], provider=AutoApprove())
        model = ScriptedModel(turns=[[
            types.FunctionCall(id="c1", name="wipe", args={"target": "staging"}),
            types.FunctionCall(id="c2", name="wipe", args={"target": "prod"}),
            types.FunctionCall(id="c3", name="execute_bash", args={"command": "echo hi; id"}),
        ]])
        agent = LlmAgent(name="ops", model=model, tools=[
            AdkFunctionTool(wipe, require_confirmation=True), to_adk_tool(bash, runner=ours)])
        app = App(name="ops", root_agent=agent,
                  plugins=[ApprovalPlugin(CallbackConfirmationProvider(review))])
        runner = InMemoryRunner(app=app)
        session = await runner.session_service.create_session(app_name="ops", user_id="u")
        message = types.Content(role="user", parts=[types.Part.from_text(text="clean up")])
        async for _ in runner.run_async(user_id="u", session_id=session.id,
                                        new_message=message):
            pass


if __name__ == "__main__":
    anyio.run(main)
