"""ADK's own unit tests, ported to our tools (google-adk 2.13's tests/unittests): each
case is ADK's, with ADK's `FunctionTool` replaced by ours behind `to_adk_tools`, ADK's
`testing_utils.MockModel` by the scripted model of `test_adk_integration`, and ADK's
assertions kept."""

from __future__ import annotations

from typing import Union

import pydantic
import pytest

pytest.importorskip("google.adk")

from google.adk.flows.llm_flows.functions import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from google.adk.tools.function_tool import FunctionTool as AdkFunctionTool
from google.adk.utils.context_utils import Aclosing
from google.genai import types

from sandbox import FunctionTool, ToolContext, ToolRunner
from sandbox.integrations.adk import ApprovalPlugin, to_adk_tools
from tests.integrations.test_adk_integration import Harness, call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


# -- tests/unittests/tools/test_function_tool.py ------------------------------------------

class ItemModel(pydantic.BaseModel):
    item_id: str
    price: float


class UserProfile(pydantic.BaseModel):
    username: str


class OrgProfile(pydantic.BaseModel):
    org_name: str


async def test_run_async_with_arg_validation_list_of_pydantic_models() -> None:
    def sample_func(items: list[ItemModel]) -> float:
        return sum(item.price for item in items)

    tool = FunctionTool(sample_func)
    result = await tool.run_async(
        args={"items": [{"item_id": "a", "price": 10.5}, {"item_id": "b", "price": "20.0"}]},
        tool_context=ToolContext())
    assert result == 30.5

    result_err = await tool.run_async(
        args={"items": [{"item_id": "a", "price": "invalid_price"}]}, tool_context=ToolContext())
    assert isinstance(result_err, dict)
    assert "error" in result_err
    assert "validation error" in result_err["error"].lower()
    assert "items" in result_err["error"]
    # Through the gate, the model reads the same words.
    gated = await ToolRunner([tool]).call(
        "sample_func", {"items": [{"item_id": "a", "price": "invalid_price"}]})
    assert "validation error" in gated["error"].lower() and "items" in gated["error"]


async def test_run_async_with_arg_validation_union_of_pydantic_models() -> None:
    def sample_func(entity: Union[UserProfile, OrgProfile]) -> str:  # noqa: UP007 (ADK's)
        return type(entity).__name__

    tool = FunctionTool(sample_func)
    assert await tool.run_async(args={"entity": {"username": "alice"}},
                                tool_context=ToolContext()) == "UserProfile"
    assert await tool.run_async(args={"entity": {"org_name": "Google"}},
                                tool_context=ToolContext()) == "OrgProfile"
    result_err = await tool.run_async(args={"entity": {"unrelated": "data"}},
                                      tool_context=ToolContext())
    assert isinstance(result_err, dict)
    assert "error" in result_err
    assert "validation error" in result_err["error"].lower()
    assert "entity" in result_err["error"]


# -- tests/unittests/runners/test_hitl*.py: TestHITLConfirmationWithUngatedParallelSibling --

@pytest.mark.parametrize("confirmed", [True, False])
@pytest.mark.parametrize("tools", ["ours", "adks-behind-the-plugin"])
async def test_sibling_result_survives_caller_stopping_at_pause(confirmed: bool,
                                                                tools: str) -> None:
    """The sibling runs once and its result reaches the model on resume."""
    sibling_calls: list[str | None] = []

    def _gated_tool() -> dict[str, str]:
        """A gated tool."""
        return {"result": "gated ran"}

    def _sibling_tool(tool_context: ToolContext) -> dict[str, str]:
        """An ungated tool."""
        sibling_calls.append(tool_context.function_call_id)
        tool_context.state["sibling_ran"] = True
        return {"result": "sibling ran"}

    script = [[call("_gated_tool", "g1"), call("_sibling_tool", "s1")]]
    if tools == "ours":
        runner = ToolRunner([FunctionTool(_gated_tool, require_confirmation=True),
                             FunctionTool(_sibling_tool)])
        h = Harness(to_adk_tools(runner), [], script)
    else:
        h = Harness([AdkFunctionTool(_gated_tool, require_confirmation=True),
                     AdkFunctionTool(_sibling_tool)], [ApprovalPlugin()], script)
    session = await h.runner.session_service.create_session(app_name="app", user_id="u")
    h.session_id = session.id

    pause_event = None
    async with Aclosing(h.runner.run_async(
            user_id="u", session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part.from_text(text="go")]),
    )) as agen:
        async for event in agen:
            if event.is_final_response():
                pause_event = event
                break

    assert pause_event is not None
    confirmation_calls = pause_event.get_function_calls()
    assert [fc.name for fc in confirmation_calls] == [REQUEST_CONFIRMATION_FUNCTION_CALL_NAME]
    assert len(sibling_calls) == 1
    stored = await h.runner.session_service.get_session(app_name="app", user_id="u",
                                                        session_id=session.id)
    assert stored is not None
    assert stored.state["sibling_ran"] is True
    settled_event = stored.events[-2]
    assert [fr.name for fr in settled_event.get_function_responses()] == [
        "_gated_tool", "_sibling_tool"]
    assert settled_event.timestamp <= pause_event.timestamp

    answer = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=confirmation_calls[0].id, name=REQUEST_CONFIRMATION_FUNCTION_CALL_NAME,
        response={"confirmed": confirmed}))])
    events = await h.send(answer)

    assert len(sibling_calls) == 1
    assert events[-1].content.parts[0].text == "done"
    responses_sent_to_model = [
        {fr.name: fr.response for fr in content_responses}
        for content in h.model.seen[-1].contents
        if (content_responses := [part.function_response for part in content.parts or []
                                  if part.function_response])
    ]
    expected_gated_response = ({"result": "gated ran"} if confirmed
                               else {"error": "This tool call is rejected."})
    assert responses_sent_to_model == [{
        "_gated_tool": expected_gated_response,
        "_sibling_tool": {"result": "sibling ran"},
    }]
