"""The ADK integration inside a real google-adk Runner, driven by a scripted model.

The model is a `BaseLlm` subclass that returns predetermined function calls (no
network) and records every request, so a test can read the function response the
model was given. Side effects are lines appended to a file, counted after each run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools import bash_tool as adk_bash
from google.adk.tools.function_tool import FunctionTool as AdkFunctionTool
from google.genai import types
from pydantic import Field

from sandbox import (
    AutoApprove,
    AutoDeny,
    BashToolPolicy,
    CallbackConfirmationProvider,
    ConfirmationRequest,
    Decision,
    ExecuteBashTool,
    FunctionTool,
    ToolRunner,
)
from sandbox.integrations.adk import ApprovalPlugin, to_adk_tool, to_adk_tools

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

CONFIRM = "adk_request_confirmation"


class ScriptedLlm(BaseLlm):
    """Answers each model turn with the next scripted list of function calls, then text."""

    model: str = "scripted"
    script: list[list[types.FunctionCall]] = Field(default_factory=list)
    seen: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append(llm_request)
        if self.script:
            parts = [types.Part(function_call=fc) for fc in self.script.pop(0)]
        else:
            parts = [types.Part.from_text(text="done")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))

    def responses_seen(self) -> dict[str, dict[str, Any]]:
        """The function responses (by call id) in the last request the model received."""
        found: dict[str, dict[str, Any]] = {}
        for content in self.seen[-1].contents:
            for part in content.parts or []:
                fr = part.function_response
                if fr is not None and fr.id and fr.name != CONFIRM:
                    found[fr.id] = dict(fr.response or {})
        return found


def call(name: str, call_id: str, **args: Any) -> types.FunctionCall:
    return types.FunctionCall(id=call_id, name=name, args=args)


class Harness:
    """One agent, one session, one in-memory ADK runner."""

    def __init__(self, tools: list[Any], plugins: list[BasePlugin],
                 script: list[list[types.FunctionCall]]) -> None:
        self.model = ScriptedLlm(script=script)
        agent = LlmAgent(name="agent", model=self.model, tools=tools)
        self.runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=plugins))
        self.session_id = ""
        self.events: list[Any] = []

    async def send(self, message: types.Content) -> list[Any]:
        if not self.session_id:
            session = await self.runner.session_service.create_session(
                app_name="app", user_id="u")
            self.session_id = session.id
        events = [ev async for ev in self.runner.run_async(
            user_id="u", session_id=self.session_id, new_message=message)]
        self.events.extend(events)
        return events

    async def ask(self, text: str = "go") -> list[Any]:
        return await self.send(types.Content(role="user", parts=[types.Part.from_text(text=text)]))

    def confirmation_call_ids(self) -> list[str]:
        return [fc.id for ev in self.events for fc in ev.get_function_calls()
                if fc.name == CONFIRM and fc.id]

    async def answer(self, confirmation_call_id: str, **response: Any) -> list[Any]:
        part = types.Part(function_response=types.FunctionResponse(
            id=confirmation_call_id, name=CONFIRM, response=response))
        return await self.send(types.Content(role="user", parts=[part]))

    def stored_session(self) -> Any:
        service = self.runner.session_service
        return service.sessions["app"]["u"][self.session_id]  # type: ignore[attr-defined]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "side-effects.log"


def make_wipe(log: Path) -> Any:
    def wipe(target: str) -> dict[str, str]:
        """Irreversibly wipe a target.

        Args:
            target: what to wipe.
        """
        with log.open("a") as fh:
            fh.write(f"wiped {target}\n")
        return {"wiped": target}

    return wipe


def deny_with(reason: str) -> CallbackConfirmationProvider:
    return CallbackConfirmationProvider(lambda request: Decision.deny(reason))


class Answers:
    """A callback provider that answers from a list and records what it was asked."""

    def __init__(self, *answers: Decision) -> None:
        self.answers = list(answers)
        self.asked: list[ConfirmationRequest] = []
        self.provider = CallbackConfirmationProvider(self._answer, timeout=10)

    async def _answer(self, request: ConfirmationRequest) -> Decision:
        self.asked.append(request)
        return self.answers.pop(0)


# -- ADK's own FunctionTool(require_confirmation=...) answered through the plugin ---------


async def test_plugin_approval_runs_adk_function_tool_once(log: Path) -> None:
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(AutoApprove())], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped prod"]
    assert h.model.responses_seen()["c1"] == {"wiped": "prod"}
    assert h.confirmation_call_ids() == []  # answered by our provider, no client round trip


async def test_plugin_denial_reaches_the_model_and_nothing_runs(log: Path) -> None:
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(deny_with("not on a Friday"))],
                [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == []
    seen = h.model.responses_seen()["c1"]
    assert seen["status"] == "denied"
    assert "not on a Friday" in seen["error"]


async def test_plugin_edit_runs_the_edited_args_after_the_predicate_is_rechecked(
        log: Path) -> None:
    answers = Answers(Decision.edit({"target": "staging"}))
    tool = AdkFunctionTool(make_wipe(log), require_confirmation=lambda target: target == "prod")
    h = Harness([tool], [ApprovalPlugin(answers.provider)],
                [[call("wipe", "c1", target="prod")]])
    await h.ask()
    # "staging" does not need confirmation under the predicate: it ran without a second ask.
    assert lines(log) == ["wiped staging"]
    assert [r.args for r in answers.asked] == [{"target": "prod"}]
    seen = h.model.responses_seen()["c1"]
    assert seen["wiped"] == "staging"
    assert seen["edited_args"] == {"target": "staging"}


async def test_plugin_edit_runs_once_without_a_second_question(log: Path) -> None:
    # The human who edited approved the edited call: not asked again, even though the
    # tool's require_confirmation would ask about those arguments.
    answers = Answers(Decision.edit({"target": "prod-eu"}), Decision.deny("second question"))
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(answers.provider)], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped prod-eu"]
    assert [(r.kind, r.args) for r in answers.asked] == [("static", {"target": "prod"})]
    assert h.model.responses_seen()["c1"]["edited_args"] == {"target": "prod-eu"}


async def test_plugin_leaves_calls_without_confirmation_to_adk(log: Path) -> None:
    answers = Answers()
    h = Harness([AdkFunctionTool(make_wipe(log))], [ApprovalPlugin(answers.provider)],
                [[call("wipe", "c1", target="tmp")]])
    await h.ask()
    assert lines(log) == ["wiped tmp"]
    assert answers.asked == []


async def test_parallel_calls_are_decided_one_by_one(log: Path) -> None:
    provider = CallbackConfirmationProvider(
        lambda request: Decision.approve() if request.args["target"] == "cache"
        else Decision.deny("not prod"))
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(provider)],
                [[call("wipe", "c1", target="cache"), call("wipe", "c2", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped cache"]
    seen = h.model.responses_seen()
    assert seen["c1"] == {"wiped": "cache"}
    assert seen["c2"]["status"] == "denied"


async def test_same_call_id_sent_again_by_the_model_does_not_run_twice(log: Path) -> None:
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(AutoApprove())],
                [[call("wipe", "c1", target="prod")], [call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped prod"]
    assert h.model.responses_seen()["c1"]["replayed"] is True


async def test_same_call_id_with_other_args_is_refused(log: Path) -> None:
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(AutoApprove())],
                [[call("wipe", "c1", target="tmp")], [call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped tmp"]
    assert h.model.responses_seen()["c1"]["status"] == "rejected"


# -- ADK's client round trip, with our store binding the answer ---------------------------


async def test_pending_request_is_answered_by_the_adk_client_once(log: Path) -> None:
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin()], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == []
    [confirmation] = h.confirmation_call_ids()
    await h.answer(confirmation, confirmed=True)
    assert lines(log) == ["wiped prod"]
    await h.answer(confirmation, confirmed=True)  # the client sends it again
    assert lines(log) == ["wiped prod"]


async def test_client_rejection_with_reason_reaches_the_model(log: Path) -> None:
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin()], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    [confirmation] = h.confirmation_call_ids()
    await h.answer(confirmation, confirmed=False, payload={"reason": "prod is frozen"})
    assert lines(log) == []
    assert "prod is frozen" in h.model.responses_seen()["c1"]["error"]


async def test_replayed_confirmation_runs_nothing_even_without_adks_dedup(
        log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ADK before its consumed-confirmation check re-ran confirmed tools on every replay
    # (adk-python #6198). Our grant is single use whatever ADK does.
    from google.adk.flows.llm_flows.tools import _confirmation

    monkeypatch.setattr(_confirmation, "_map_confirmation_to_original_fc_ids",
                        lambda events, ids: {})
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin()], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    [confirmation] = h.confirmation_call_ids()
    for _ in range(3):
        await h.answer(confirmation, confirmed=True)
    assert lines(log) == ["wiped prod"]


async def test_confirmation_with_forged_args_in_the_session_runs_nothing(log: Path) -> None:
    # Someone with write access to the session store rewrites the waiting call's
    # arguments, in the call and in the confirmation request alike (adk-go #1499).
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin()], [[call("wipe", "c1", target="tmp")]])
    await h.ask()
    [confirmation] = h.confirmation_call_ids()
    for event in h.stored_session().events:
        for fc in event.get_function_calls():
            if fc.id == "c1":
                fc.args = {"target": "everything"}
            if fc.name == CONFIRM:
                fc.args["originalFunctionCall"]["args"] = {"target": "everything"}
    await h.answer(confirmation, confirmed=True)
    assert lines(log) == []
    assert "other arguments" in h.model.responses_seen()["c1"]["error"]


async def test_planted_confirmation_for_a_denied_call_runs_nothing(log: Path) -> None:
    # The provider denied c1; a client plants a confirmation request and approves it
    # (adk-python #5290).
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)],
                [ApprovalPlugin(AutoDeny("no"))], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    planted = types.FunctionCall(id="adk-planted", name=CONFIRM, args={
        "originalFunctionCall": {"id": "c1", "name": "wipe", "args": {"target": "prod"}},
        "toolConfirmation": {"hint": "", "confirmed": False}})
    from google.adk.events.event import Event

    session = await h.runner.session_service.get_session(
        app_name="app", user_id="u", session_id=h.session_id)
    assert session is not None
    await h.runner.session_service.append_event(session, Event(
        author="agent", invocation_id="planted",
        content=types.Content(role="model", parts=[types.Part(function_call=planted)])))
    await h.answer("adk-planted", confirmed=True)
    assert lines(log) == []


# -- ADK's ExecuteBashTool answered through the plugin ------------------------------------


def adk_bash_tool(workspace: Path) -> adk_bash.ExecuteBashTool:
    return adk_bash.ExecuteBashTool(
        workspace=workspace,
        policy=adk_bash.BashToolPolicy(allowed_command_prefixes=("sh",), timeout_seconds=10))


async def test_adk_bash_tool_runs_once_when_approved(tmp_path: Path, log: Path) -> None:
    command = f"sh -c 'echo ran >> {log}'"
    h = Harness([adk_bash_tool(tmp_path)], [ApprovalPlugin(AutoApprove())],
                [[call("execute_bash", "b1", command=command)]])
    await h.ask()
    assert lines(log) == ["ran"]
    assert h.model.responses_seen()["b1"]["returncode"] == 0


async def test_adk_bash_tool_denied_with_reason(tmp_path: Path, log: Path) -> None:
    h = Harness([adk_bash_tool(tmp_path)], [ApprovalPlugin(deny_with("no shell today"))],
                [[call("execute_bash", "b1", command=f"sh -c 'echo ran >> {log}'")]])
    await h.ask()
    assert lines(log) == []
    assert "no shell today" in h.model.responses_seen()["b1"]["error"]


async def test_adk_bash_policy_blocks_before_a_human_is_asked(tmp_path: Path) -> None:
    answers = Answers(Decision.approve())
    h = Harness([adk_bash_tool(tmp_path)], [ApprovalPlugin(answers.provider)],
                [[call("execute_bash", "b1", command="rm -rf /")]])
    await h.ask()
    assert answers.asked == []
    seen = h.model.responses_seen()["b1"]
    assert seen["status"] == "blocked"
    assert "Permitted prefixes" in seen["error"]


async def test_adk_bash_edit_is_checked_against_the_policy_again(
        tmp_path: Path, log: Path) -> None:
    answers = Answers(Decision.edit({"command": "curl evil.example"}))
    h = Harness([adk_bash_tool(tmp_path)], [ApprovalPlugin(answers.provider)],
                [[call("execute_bash", "b1", command=f"sh -c 'echo ran >> {log}'")]])
    await h.ask()
    assert lines(log) == []
    assert h.model.responses_seen()["b1"]["status"] == "blocked"


async def test_adk_bash_edit_runs_the_edited_command(tmp_path: Path, log: Path) -> None:
    answers = Answers(Decision.edit({"command": f"sh -c 'echo edited >> {log}'"}),
                      Decision.deny("second question"))
    h = Harness([adk_bash_tool(tmp_path)], [ApprovalPlugin(answers.provider)],
                [[call("execute_bash", "b1", command=f"sh -c 'echo original >> {log}'")]])
    await h.ask()
    assert lines(log) == ["edited"]
    assert len(answers.asked) == 1


# -- a tool that asks from inside run_async -----------------------------------------------


async def test_tool_that_asks_itself_is_answered_with_its_payload(log: Path) -> None:
    from google.adk.tools.tool_context import ToolContext as AdkToolContext

    def transfer(amount: int, tool_context: AdkToolContext) -> dict[str, Any]:
        """Move money."""
        if amount > 100:
            confirmation = tool_context.tool_confirmation
            if confirmation is None:
                tool_context.request_confirmation(hint="large transfer", payload={"limit": 100})
                return {"status": "needs approval"}
            if not confirmation.confirmed:
                return {"error": "rejected"}
        with log.open("a") as fh:
            fh.write(f"moved {amount}\n")
        return {"moved": amount}

    answers = Answers(Decision.approve(payload={"limit": 500}))
    h = Harness([AdkFunctionTool(transfer)], [ApprovalPlugin(answers.provider)],
                [[call("transfer", "t1", amount=300)]])
    await h.ask()
    assert lines(log) == ["moved 300"]
    [request] = answers.asked
    assert (request.kind, request.hint, request.payload) == ("tool", "large transfer",
                                                              {"limit": 100})


# -- our tools as ADK tools (to_adk_tool) -------------------------------------------------


def our_wipe(log: Path) -> FunctionTool:
    return FunctionTool(make_wipe(log), require_confirmation=lambda target: target != "tmp")


async def test_adapter_declares_our_schema(log: Path) -> None:
    tool = to_adk_tool(our_wipe(log), runner=None)
    declaration = tool._get_declaration()
    assert declaration.name == "wipe"
    assert declaration.parameters_json_schema == our_wipe(log).parameters_schema()


async def test_adapter_approval_runs_once_with_the_call_id(log: Path) -> None:
    runner = ToolRunner([our_wipe(log)], provider=AutoApprove())
    h = Harness(to_adk_tools(runner), [], [[call("wipe", "c1", target="prod")],
                                           [call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped prod"]
    assert [state for state, _, _ in runner.store.journal("c1")][:4] == [
        "new", "awaiting", "approved", "started"]
    assert h.model.responses_seen()["c1"]["replayed"] is True


async def test_adapter_denial_with_reason(log: Path) -> None:
    runner = ToolRunner([our_wipe(log)], provider=deny_with("ask the DBA"))
    h = Harness(to_adk_tools(runner), [], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == []
    assert "ask the DBA" in h.model.responses_seen()["c1"]["error"]


async def test_adapter_edit_is_revalidated(log: Path) -> None:
    answers = Answers(Decision.edit({"target": 42}))  # wrong type: refused, nothing runs
    runner = ToolRunner([our_wipe(log)], provider=answers.provider)
    h = Harness(to_adk_tools(runner), [], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == []
    assert h.model.responses_seen()["c1"]["status"] == "rejected"


async def test_adapter_edit_runs_edited_args(log: Path) -> None:
    answers = Answers(Decision.edit({"target": "tmp"}))
    runner = ToolRunner([our_wipe(log)], provider=answers.provider)
    h = Harness(to_adk_tools(runner), [], [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == ["wiped tmp"]


async def test_adapter_without_provider_uses_the_adk_client_once(
        log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.adk.flows.llm_flows.tools import _confirmation

    monkeypatch.setattr(_confirmation, "_map_confirmation_to_original_fc_ids",
                        lambda events, ids: {})
    tool = to_adk_tool(our_wipe(log))
    h = Harness([tool], [ApprovalPlugin(AutoDeny("the plugin must not answer adapters"))],
                [[call("wipe", "c1", target="prod")]])
    await h.ask()
    assert lines(log) == []
    [confirmation] = h.confirmation_call_ids()
    await h.answer(confirmation, confirmed=True)
    await h.answer(confirmation, confirmed=True)
    assert lines(log) == ["wiped prod"]


async def test_plugin_accepts_a_file_store_and_records_the_decision(
        tmp_path: Path, log: Path) -> None:
    plugin = ApprovalPlugin(deny_with("nope"), store_path=str(tmp_path / "approvals.db"),
                            audit_path=str(tmp_path / "audit.jsonl"))
    h = Harness([AdkFunctionTool(make_wipe(log), require_confirmation=True)], [plugin],
                [[call("wipe", "c1", target="prod")]])
    await h.ask()
    record = plugin.store.get_call("c1")
    assert record.state == "denied"
    events = [json.loads(line)["event"] for line in lines(tmp_path / "audit.jsonl")]
    assert "tool.requested" in events and "tool.decided" in events
    assert "tool.started" not in events


# -- our ExecuteBashTool as an ADK tool ---------------------------------------------------


def our_bash(workspace: Path) -> ExecuteBashTool:
    policy = BashToolPolicy(allowed_command_prefixes=("echo", "cat"),
                            blocked_operators=(";", "|", "&&", "&"),
                            no_confirmation_prefixes=("cat",), timeout_seconds=10)
    return ExecuteBashTool(workspace=workspace, policy=policy)


def side(workspace: Path) -> list[str]:
    return lines(workspace / "side.log")


async def test_our_bash_tool_approved_runs_once(tmp_path: Path) -> None:
    runner = ToolRunner([our_bash(tmp_path)], provider=AutoApprove())
    h = Harness(to_adk_tools(runner), [],
                [[call("execute_bash", "b1", command="echo ran >> side.log")],
                 [call("execute_bash", "b1", command="echo ran >> side.log")]])
    await h.ask()
    assert side(tmp_path) == ["ran"]
    assert h.model.responses_seen()["b1"]["replayed"] is True


async def test_our_bash_tool_denied_with_reason(tmp_path: Path) -> None:
    runner = ToolRunner([our_bash(tmp_path)], provider=deny_with("read-only day"))
    h = Harness(to_adk_tools(runner), [],
                [[call("execute_bash", "b1", command="echo ran >> side.log")]])
    await h.ask()
    assert side(tmp_path) == []
    assert "read-only day" in h.model.responses_seen()["b1"]["error"]


async def test_our_bash_policy_blocks_before_asking(tmp_path: Path) -> None:
    answers = Answers(Decision.approve())
    runner = ToolRunner([our_bash(tmp_path)], provider=answers.provider)
    h = Harness(to_adk_tools(runner), [],
                [[call("execute_bash", "b1", command="echo ran >> side.log | cat")]])
    await h.ask()
    assert answers.asked == []
    assert side(tmp_path) == []
    assert h.model.responses_seen()["b1"]["status"] == "blocked"


async def test_our_bash_edit_runs_once_without_a_second_question(tmp_path: Path) -> None:
    answers = Answers(Decision.edit({"command": "echo edited >> side.log"}),
                      Decision.deny("second question"))
    runner = ToolRunner([our_bash(tmp_path)], provider=answers.provider)
    h = Harness(to_adk_tools(runner), [],
                [[call("execute_bash", "b1", command="echo original >> side.log")]])
    await h.ask()
    assert side(tmp_path) == ["edited"]
    assert [r.args["command"] for r in answers.asked] == ["echo original >> side.log"]


async def test_our_bash_edit_to_a_blocked_command_runs_nothing(tmp_path: Path) -> None:
    answers = Answers(Decision.edit({"command": "echo x >> side.log && echo y >> side.log"}))
    runner = ToolRunner([our_bash(tmp_path)], provider=answers.provider)
    h = Harness(to_adk_tools(runner), [],
                [[call("execute_bash", "b1", command="echo original >> side.log")]])
    await h.ask()
    assert side(tmp_path) == []
    assert h.model.responses_seen()["b1"]["status"] == "blocked"


async def test_our_bash_answered_by_the_adk_client_runs_once(tmp_path: Path) -> None:
    h = Harness([to_adk_tool(our_bash(tmp_path))], [],
                [[call("execute_bash", "b1", command="echo ran >> side.log")]])
    await h.ask()
    [confirmation] = h.confirmation_call_ids()
    await h.answer(confirmation, confirmed=True)
    await h.answer(confirmation, confirmed=True)
    assert side(tmp_path) == ["ran"]
