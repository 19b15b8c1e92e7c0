"""A denial recorded on one channel holds on every other (MCP retries and elicitation, ADK clients), and one session's approval or request is not another's.

Real processes and runners, as in tests/integrations/test_adk_integration.py (a scripted `BaseLlm`
inside ADK's InMemoryRunner) and tests/integrations/test_mcp_server.py (the real `mcp` client over
stdio against ``python -m sandbox mcp``). One behaviour per test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
pytest.importorskip("google.adk")

import mcp_types as mtypes
from google.adk.tools.function_tool import FunctionTool as AdkFunctionTool

from sandbox import ApprovalStore, Decision
from sandbox.integrations.adk import ApprovalPlugin
from tests.integrations.test_adk_integration import Answers, Harness, call, lines, make_wipe
from tests.integrations.test_mcp_server import Human, Server, approve, outcome, wait_for_pending

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


# -- a human's denial recorded first by another channel (web page, CLI) wins --------------


async def test_mcp_retry_cannot_override_a_denial_recorded_on_the_web_page(
        tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    server = Server(tmp_path, "--store", str(db))
    async with server.client(Human(), mode="auto") as client:
        first = await client.session.call_tool("wipe", {"target": "prod"},
                                               allow_input_required=True)
        assert isinstance(first, mtypes.InputRequiredResult) and first.input_requests
        store = ApprovalStore(db)
        [request] = store.pending()
        store.submit_answer(request.id, Decision.deny("prod is frozen"), channel="web")
        answers: mtypes.InputResponses = {key: approve() for key in first.input_requests}
        retried = await client.session.call_tool("wipe", {"target": "prod"},
                                                 input_responses=answers,
                                                 request_state=first.request_state)
    assert outcome(retried)["status"] == "rejected"
    assert server.lines() == []


async def test_mcp_elicitation_cannot_override_a_denial_recorded_while_it_waits(
        tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    server = Server(tmp_path, "--store", str(db))
    answered_elsewhere = anyio.Event()

    class SlowHuman(Human):
        async def __call__(self, context: Any, params: mtypes.ElicitRequestParams
                           ) -> mtypes.ElicitResult:
            await answered_elsewhere.wait()
            return approve()

    results: list[mtypes.CallToolResult] = []
    async with server.client(SlowHuman()) as client:

        async def wipe() -> None:
            results.append(await client.call_tool("wipe", {"target": "prod"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wipe)
            store = ApprovalStore(db)
            [request] = await wait_for_pending(store)
            store.submit_answer(request.id, Decision.deny("prod is frozen"), channel="web")
            answered_elsewhere.set()
    assert outcome(results[0])["status"] == "rejected"
    assert server.lines() == []


async def test_adk_client_cannot_override_a_denial_recorded_on_the_web_page(
        tmp_path: Path) -> None:
    log = tmp_path / "side-effects.log"
    plugin = ApprovalPlugin(store_path=str(tmp_path / "approvals.db"))
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)], [plugin],
                [[call("wipe", "c1", target="prod")]])
    await h.ask()
    [request] = plugin.store.pending()
    ApprovalStore(tmp_path / "approvals.db").submit_answer(
        request.id, Decision.deny("prod is frozen"), channel="web")
    [confirmation] = h.confirmation_call_ids()
    await h.answer(confirmation, confirmed=True)
    assert lines(log) == []


# -- ADK sessions are the gate's sessions --------------------------------------------------


async def test_adk_approval_for_the_session_does_not_cover_another_adk_session(
        tmp_path: Path) -> None:
    log = tmp_path / "side-effects.log"
    answers = Answers(Decision.approve(scope="session"), Decision.deny("not in this session"))
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(answers.provider)],
                [[call("wipe", "a1", target="prod")], [call("wipe", "a2", target="prod")]])
    await h.ask()
    await h.ask()  # the same session: the remembered approval covers it
    assert lines(log) == ["wiped prod", "wiped prod"]
    h.session_id = ""  # another user's session of the same app
    h.model.script = [[call("wipe", "b1", target="prod")]]
    await h.ask()
    assert lines(log) == ["wiped prod", "wiped prod"]
    assert len(answers.asked) == 2


async def test_adk_request_of_one_session_cannot_be_approved_from_another(
        tmp_path: Path) -> None:
    # Models choose call ids: session B's model repeats session A's pending call id and
    # arguments, and B's client approves what A's human was asked about.
    log = tmp_path / "side-effects.log"
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin()], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    h.session_id = ""
    h.events = []
    h.model.script = [[call("wipe", "c1", target="prod")]]
    await h.ask()
    for confirmation in h.confirmation_call_ids():
        await h.answer(confirmation, confirmed=True)
    assert lines(log) == []
