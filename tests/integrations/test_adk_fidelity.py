"""ADK fidelity: an ADK user's tool code behaves under our gate as it does under ADK.

google-adk (installed with the `adk` extra) is the authority: where a behaviour can be
read off ADK's own classes (a name, a description, a hint), the test asks ADK. The
end-to-end tests run inside a real `InMemoryRunner` driven by a scripted model.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.tools.function_tool import FunctionTool as AdkFunctionTool

from sandbox import (
    AutoApprove,
    AutoDeny,
    CallbackConfirmationProvider,
    ConfigurationError,
    ConfirmationRequest,
    Decision,
    FunctionTool,
    ToolContext,
    ToolRunner,
)
from sandbox.integrations.adk import to_adk_tool
from sandbox.tools.base import BaseTool
from tests.integrations.test_adk_integration import Harness, call

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

ADK_HINT = ("Please approve or reject the tool call {}() by responding with a "
            "FunctionResponse with an expected ToolConfirmation payload.")


def plain_decorator(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that knows nothing of async: it returns what the function returns."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


def appender(log: Path) -> Callable[..., Any]:
    @plain_decorator
    async def record(line: str) -> dict[str, Any]:
        """Append a line to the log."""
        await asyncio.sleep(0)
        with log.open("a") as fh:
            fh.write(line + "\n")
        return {"written": line}

    return record


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# -- an async def behind a plain decorator ------------------------------------------


async def test_async_function_behind_a_sync_decorator_runs(tmp_path: Path) -> None:
    log = tmp_path / "log"
    runner = ToolRunner([FunctionTool(appender(log))])
    result = await runner.call("record", {"line": "a"})
    assert result == {"written": "a"}
    assert lines(log) == ["a"]


async def test_decorated_async_function_runs_inside_adk(tmp_path: Path) -> None:
    log = tmp_path / "log"
    runner = ToolRunner([FunctionTool(appender(log), require_confirmation=True)],
                        provider=AutoApprove())
    h = Harness([to_adk_tool(runner.tools["record"], runner=runner)], [],
                [[call("record", "c1", line="x")]])
    await h.ask()
    assert lines(log) == ["x"]
    assert h.model.responses_seen()["c1"] == {"written": "x"}


# -- check_require_confirmation -------------------------------------------------------


class ProdNeedsApproval(FunctionTool):
    async def check_require_confirmation(self, args: dict[str, Any],
                                         tool_context: ToolContext) -> bool:
        return bool(args.get("target") == "prod")


def make_wipe(log: Path) -> Callable[..., dict[str, Any]]:
    def wipe(target: str) -> dict[str, Any]:
        """Wipe a target environment."""
        with log.open("a") as fh:
            fh.write(target + "\n")
        return {"wiped": target}

    return wipe


async def test_subclass_check_require_confirmation_is_asked(tmp_path: Path) -> None:
    log = tmp_path / "log"
    runner = ToolRunner([ProdNeedsApproval(make_wipe(log))])
    held = await runner.call("wipe", {"target": "prod"})
    assert held["status"] == "awaiting_confirmation"
    assert held["hint"] == ADK_HINT.format("wipe")
    assert (await runner.call("wipe", {"target": "dev"})) == {"wiped": "dev"}
    assert lines(log) == ["dev"]


async def test_base_tool_check_require_confirmation_is_asked() -> None:
    ran: list[dict[str, Any]] = []

    class Custom(BaseTool):
        async def check_require_confirmation(self, args: dict[str, Any],
                                             tool_context: ToolContext) -> bool:
            return tool_context.function_call_id == "risky"

        async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
            ran.append(args)
            return {"ok": True}

    runner = ToolRunner([Custom(name="custom", description="")], provider=AutoDeny())
    denied = await runner.call("custom", {}, call_id="risky")
    assert denied["status"] == "denied"
    assert (await runner.call("custom", {}, call_id="fine")) == {"ok": True}
    assert ran == [{}]


async def test_subclass_check_require_confirmation_inside_adk(tmp_path: Path) -> None:
    log = tmp_path / "log"
    tool = ProdNeedsApproval(make_wipe(log))
    runner = ToolRunner([tool], provider=AutoDeny())
    h = Harness([to_adk_tool(tool, runner=runner)], [],
                [[call("wipe", "c1", target="prod"), call("wipe", "c2", target="dev")]])
    await h.ask()
    seen = h.model.responses_seen()
    assert seen["c1"]["status"] == "denied"
    assert seen["c2"] == {"wiped": "dev"}
    assert lines(log) == ["dev"]


async def test_adk_hook_has_adks_signature() -> None:
    import inspect

    ours = inspect.signature(FunctionTool.check_require_confirmation)
    adks = inspect.signature(AdkFunctionTool.check_require_confirmation)
    assert list(ours.parameters) == list(adks.parameters)


# -- state writes and actions reach the ADK session -----------------------------------


async def test_state_writes_and_actions_reach_the_adk_session() -> None:
    def remember(note: str, tool_context: ToolContext) -> dict[str, Any]:
        """Remember a note in the session."""
        count = int(tool_context.state.get("count", 0)) + 1
        tool_context.state["note"] = note
        tool_context.state["count"] = count
        tool_context.actions.escalate = True
        return {"count": count}

    tool = FunctionTool(remember)
    runner = ToolRunner([tool])
    h = Harness([to_adk_tool(tool, runner=runner)], [],
                [[call("remember", "c1", note="a")]])
    events = await h.ask()
    state = h.stored_session().state
    assert state["note"] == "a" and state["count"] == 1
    responses = [ev for ev in events if ev.get_function_responses()]
    assert responses[0].actions.state_delta == {"note": "a", "count": 1}
    assert responses[0].actions.escalate is True


async def test_state_is_read_from_the_adk_session() -> None:
    def bump(tool_context: ToolContext) -> dict[str, Any]:
        """Count calls in the session."""
        tool_context.state["n"] = int(tool_context.state.get("n", 0)) + 1
        return {"n": tool_context.state["n"]}

    tool = FunctionTool(bump)
    runner = ToolRunner([tool])
    h = Harness([to_adk_tool(tool, runner=runner)], [], [[call("bump", "c1")]])
    await h.ask()
    h.model.script.append([call("bump", "c2")])
    await h.ask()
    assert h.stored_session().state["n"] == 2
    assert h.model.responses_seen()["c2"] == {"n": 2}


# -- partials and callable objects ------------------------------------------------------


def scale(value: int, factor: int) -> dict[str, Any]:
    """Multiply a value by a factor."""
    return {"value": value * factor}


def shift(value: int, by: int) -> dict[str, Any]:
    """Add an offset to a value."""
    return {"value": value + by}


async def test_partial_takes_name_and_description_as_adk_does() -> None:
    partial = functools.partial(scale, factor=3)
    ours, adks = FunctionTool(partial), AdkFunctionTool(partial)
    assert (ours.name, ours.description) == (adks.name, "Multiply a value by a factor.")
    assert adks.description.startswith(ours.description)
    runner = ToolRunner([ours, FunctionTool(functools.partial(shift, by=1))])
    assert set(runner.tools) == {"scale", "shift"}
    assert (await runner.call("scale", {"value": 2})) == {"value": 6}
    assert (await runner.call("shift", {"value": 2})) == {"value": 3}


async def test_callable_object_is_described_by_its_call_docstring() -> None:
    class Greeter:
        def __call__(self, who: str) -> str:
            """Greet someone by name."""
            return f"hello {who}"

    ours, adks = FunctionTool(Greeter()), AdkFunctionTool(Greeter())
    assert ours.name == adks.name == "Greeter"
    assert ours.description == "Greet someone by name."
    assert adks.description.startswith(ours.description)
    assert (await ToolRunner([ours]).call("Greeter", {"who": "ann"})) == {"result": "hello ann"}


# -- generators -------------------------------------------------------------------------


def test_generator_function_is_refused_when_the_tool_is_built() -> None:
    def numbers(n: int) -> Any:
        yield from range(n)

    async def stream(n: int) -> Any:
        for i in range(n):
            yield i

    for func in (numbers, stream, functools.partial(numbers, n=2)):
        with pytest.raises(TypeError, match=r"generator function.*Return a list"):
            FunctionTool(func)


# -- run_async returns what the function returned -----------------------------------------


async def test_run_async_returns_the_functions_own_result() -> None:
    def five() -> int:
        """Five."""
        return 5

    tool = FunctionTool(five)
    assert await tool.run_async(args={}, tool_context=ToolContext()) == 5
    assert await AdkFunctionTool(five).run_async(args={}, tool_context=None) == 5  # type: ignore[arg-type]
    assert (await ToolRunner([tool]).call("five")) == {"result": 5}


# -- a tool's own request_confirmation leaves the model its turn --------------------------


async def test_tools_own_request_leaves_summarization_to_adk() -> None:
    def transfer(amount: int, tool_context: ToolContext) -> dict[str, Any]:
        """Transfer money."""
        if tool_context.tool_confirmation is None:
            tool_context.request_confirmation(hint="how much, really?")
            return {"status": "asked"}
        return {"sent": amount}

    tool = FunctionTool(transfer)
    runner = ToolRunner([tool])
    h = Harness([to_adk_tool(tool, runner=runner)], [], [[call("transfer", "c1", amount=5)]])
    events = await h.ask()
    responses = [ev for ev in events if ev.get_function_responses()]
    assert responses and not responses[0].actions.skip_summarization
    assert h.confirmation_call_ids()


async def test_require_confirmation_still_skips_summarization_as_adk_does(
        tmp_path: Path) -> None:
    tool = FunctionTool(make_wipe(tmp_path / "log"), require_confirmation=True)
    runner = ToolRunner([tool])
    h = Harness([to_adk_tool(tool, runner=runner)], [], [[call("wipe", "c1", target="x")]])
    events = await h.ask()
    responses = [ev for ev in events if ev.get_function_responses()]
    assert responses[0].actions.skip_summarization is True


# -- ADK's texts ---------------------------------------------------------------------------


async def test_confirmation_hint_is_adks(tmp_path: Path) -> None:
    tool = FunctionTool(make_wipe(tmp_path / "log"), require_confirmation=True)
    held = await ToolRunner([tool]).call("wipe", {"target": "x"})
    assert held["hint"] == ADK_HINT.format("wipe")
    ctx = ToolContext(function_call_id="c1")
    await tool.run_async(args={"target": "x"}, tool_context=ctx)
    assert ctx.actions.requested_tool_confirmations["c1"].hint == ADK_HINT.format("wipe")


def test_missing_call_id_error_is_adks() -> None:
    with pytest.raises(ValueError) as err:
        ToolContext().request_confirmation(hint="?")
    assert str(err.value) == ("request_confirmation requires function_call_id. "
                              "This method can only be used in a tool context.")


# -- predicates and UI callbacks -----------------------------------------------------------


async def test_predicate_declaring_tool_context_receives_it() -> None:
    seen: list[str | None] = []

    def risky(n: int, tool_context: ToolContext) -> bool:
        seen.append(tool_context.function_call_id)
        return n > 10

    def count(n: int) -> int:
        """Count."""
        return n

    runner = ToolRunner([FunctionTool(count, require_confirmation=risky)],
                        provider=AutoApprove())
    assert (await runner.call("count", {"n": 11}, call_id="c-11")) == {"result": 11}
    assert seen == ["c-11"]


async def test_ui_callback_gets_the_validated_arguments() -> None:
    shown: list[dict[str, Any]] = []
    predicate_saw: list[dict[str, Any]] = []
    ran: list[dict[str, Any]] = []

    def deploy(version: int, region: str = "eu", dry_run: bool = False) -> dict[str, Any]:
        """Deploy a version."""
        ran.append({"version": version, "region": region, "dry_run": dry_run})
        return {"deployed": version}

    def needs(version: int, region: str, dry_run: bool) -> bool:
        predicate_saw.append({"version": version, "region": region, "dry_run": dry_run})
        return not dry_run

    def ui(request: ConfirmationRequest) -> Decision:
        shown.append(dict(request.args))
        return Decision.approve()

    runner = ToolRunner([FunctionTool(deploy, require_confirmation=needs)],
                        provider=CallbackConfirmationProvider(ui))
    assert (await runner.call("deploy", {"version": "7"})) == {"deployed": 7}
    expected = {"version": 7, "region": "eu", "dry_run": False}
    assert shown == predicate_saw == ran == [expected]


async def test_ui_callback_gets_validated_arguments_inside_adk(tmp_path: Path) -> None:
    shown: list[dict[str, Any]] = []

    def ui(request: ConfirmationRequest) -> Decision:
        shown.append(dict(request.args))
        return Decision.approve()

    def resize(size: int, unit: str = "GiB") -> dict[str, Any]:
        """Resize a disk."""
        return {"size": f"{size}{unit}"}

    tool = FunctionTool(resize, require_confirmation=True)
    runner = ToolRunner([tool], provider=CallbackConfirmationProvider(ui))
    h = Harness([to_adk_tool(tool, runner=runner)], [], [[call("resize", "c1", size=3.0)]])
    await h.ask()
    assert shown == [{"size": 3, "unit": "GiB"}]
    assert h.model.responses_seen()["c1"] == {"size": "3GiB"}


async def test_adk_client_answer_applies_to_validated_arguments() -> None:
    def resize(size: int, unit: str = "GiB") -> dict[str, Any]:
        """Resize a disk."""
        return {"size": f"{size}{unit}"}

    tool = FunctionTool(resize, require_confirmation=True)
    runner = ToolRunner([tool])
    h = Harness([to_adk_tool(tool, runner=runner)], [], [[call("resize", "c1", size=3)]])
    await h.ask()
    [confirmation] = h.confirmation_call_ids()
    await h.answer(confirmation, confirmed=True)
    assert h.model.responses_seen()["c1"] == {"size": "3GiB"}


# -- clear errors ---------------------------------------------------------------------------


async def test_resume_with_a_word_says_what_to_pass(tmp_path: Path) -> None:
    runner = ToolRunner([FunctionTool(make_wipe(tmp_path / "log"), require_confirmation=True)])
    held = await runner.call("wipe", {"target": "x"})
    with pytest.raises(ConfigurationError, match=r"pass True or False"):
        await runner.resume(held["confirmation_id"], "yes")
    assert not (tmp_path / "log").exists()


async def test_call_sync_inside_an_event_loop_says_to_await(tmp_path: Path) -> None:
    runner = ToolRunner([FunctionTool(make_wipe(tmp_path / "log"))])
    with pytest.raises(RuntimeError, match=r"await runner\.call"):
        runner.call_sync("wipe", {"target": "x"})


async def test_unknown_argument_is_named(tmp_path: Path) -> None:
    runner = ToolRunner([FunctionTool(make_wipe(tmp_path / "log"))])
    result = await runner.call("wipe", {"target": "x", "force": True})
    assert result["status"] == "error"
    assert "'force'" in result["error"]


async def test_misspelt_bash_argument_is_named(tmp_path: Path) -> None:
    from sandbox import BashToolPolicy, ExecuteBashTool

    bash = ExecuteBashTool(workspace=tmp_path,
                           policy=BashToolPolicy(allowed_command_prefixes=("ls",)))
    result = await ToolRunner([bash]).call("execute_bash", {"cmd": "ls"})
    assert result["status"] == "error"
    assert "'cmd'" in result["error"] and "'command'" in result["error"]


def test_one_tool_instead_of_a_list_says_to_pass_a_list(tmp_path: Path) -> None:
    tool = FunctionTool(make_wipe(tmp_path / "log"))
    with pytest.raises(ConfigurationError, match=r"tools=\[wipe\]"):
        ToolRunner(tools=tool)  # type: ignore[arg-type]


async def test_our_function_tool_runs_with_adks_own_tool_context(tmp_path: Path) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.tool_context import ToolContext as AdkToolContext

    service = InMemorySessionService()
    session = await service.create_session(app_name="a", user_id="u")
    invocation = InvocationContext(session_service=service, invocation_id="i",
                                   agent=LlmAgent(name="a"), session=session)
    tool = FunctionTool(make_wipe(tmp_path / "log"), require_confirmation=True)
    ours_ctx = AdkToolContext(invocation, function_call_id="c1")
    adks_ctx = AdkToolContext(invocation, function_call_id="c1")
    ours = await tool.run_async(args={"target": "x"}, tool_context=ours_ctx)  # type: ignore[arg-type]
    adks = await AdkFunctionTool(make_wipe(tmp_path / "log"), require_confirmation=True).run_async(
        args={"target": "x"}, tool_context=adks_ctx)
    assert ours == adks
    assert ours_ctx.actions.skip_summarization is adks_ctx.actions.skip_summarization is True
    assert (ours_ctx.actions.requested_tool_confirmations["c1"].hint
            == adks_ctx.actions.requested_tool_confirmations["c1"].hint)
    assert not (tmp_path / "log").exists()
