"""The ADK-shaped tool model: FunctionTool, ToolContext, ToolConfirmation."""

from __future__ import annotations

import json
import threading
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from sandbox import (
    BaseTool,
    ConfigurationError,
    FunctionTool,
    ToolConfirmation,
    ToolContext,
    ToolRunner,
)
from sandbox.tools.docstring import parse_docstring
from tests.conftest import SideEffect

pytestmark = pytest.mark.timeout(10)


def ctx(call_id: str = "c1", confirmation: ToolConfirmation | None = None) -> ToolContext:
    return ToolContext(function_call_id=call_id, tool_confirmation=confirmation)


class Address(BaseModel):
    street: str
    number: int


# -- the declaration a model sees ---------------------------------------------------


def test_schema_comes_from_signature_type_hints_and_docstring() -> None:
    def transfer(account: str, amount: float, currency: Literal["EUR", "USD"] = "EUR",
                 memo: str | None = None) -> dict[str, Any]:
        """Move money between accounts.

        Args:
            account: IBAN of the receiving account.
            amount: How much to send,
                in major units.
            currency: ISO code.
            memo: Free text shown to the receiver.

        Returns:
            The transfer receipt.
        """
        return {}

    decl = FunctionTool(transfer).declaration()

    assert decl["name"] == "transfer"
    assert decl["description"].startswith("Move money between accounts.")
    assert "The transfer receipt." in decl["description"]  # Returns stays: models read it
    params = decl["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["account", "amount"]
    assert params["properties"]["account"] == {
        "type": "string", "description": "IBAN of the receiving account."}
    assert params["properties"]["amount"]["type"] == "number"
    assert params["properties"]["amount"]["description"] == "How much to send, in major units."
    assert params["properties"]["currency"]["enum"] == ["EUR", "USD"]
    assert params["properties"]["currency"]["default"] == "EUR"
    assert "title" not in json.dumps(params)  # pydantic's generated titles are noise


def test_name_and_description_can_be_overridden() -> None:
    def f() -> None:
        """Original."""

    tool = FunctionTool(f, name="renamed", description="Told differently.")

    assert tool.declaration()["name"] == "renamed"
    assert tool.declaration()["description"] == "Told differently."


def test_tool_name_a_function_calling_api_would_reject_is_refused() -> None:
    with pytest.raises(ValueError, match="not usable"):
        FunctionTool(lambda: None)  # "<lambda>"


def test_google_docstring_sections_other_than_args_stay_in_the_description() -> None:
    doc = parse_docstring("""Summary.

    Args:
        path (str): Where.
        **extra: More.

    Raises:
        OSError: when it fails.
    """)

    assert doc.params == {"path": "Where.", "extra": "More."}
    assert "Raises:" in doc.description and "Args" not in doc.description


def test_pydantic_model_parameter_appears_in_schema_and_arrives_as_the_model() -> None:
    received: list[Any] = []

    def ship(to: Address) -> dict[str, Any]:
        received.append(to)
        return {"ok": True}

    tool = FunctionTool(ship, run_in_thread=False)
    schema = tool.parameters_schema()
    assert "street" in json.dumps(schema)

    import anyio

    anyio.run(lambda: tool.run_async(args={"to": {"street": "Main", "number": "7"}},
                                     tool_context=ctx()))
    assert received == [Address(street="Main", number=7)]


# -- arguments are checked before the function is called ----------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({}, "missing required argument 'path'"),
        ({"path": "a", "count": "many"}, "invalid argument 'count'"),
        ({"path": "a", "force": True}, "unexpected argument 'force'"),
        ({"path": ["not", "a", "string"]}, "invalid argument 'path'"),
    ],
    ids=["missing", "invalid", "unknown", "wrong-type"],
)
async def test_bad_arguments_return_an_error_naming_them_and_the_function_is_not_called(
    effect: SideEffect, args: dict[str, Any], named: str
) -> None:
    def write(path: str, count: int = 1) -> None:
        effect.append(path)

    result = await FunctionTool(write).run_async(args=args, tool_context=ctx())

    assert named in result["error"]
    assert not effect.happened


@pytest.mark.anyio
async def test_arguments_that_are_not_an_object_are_an_error() -> None:
    def f(x: int) -> int:
        return x

    result = await FunctionTool(f).run_async(args=[1], tool_context=ctx())  # type: ignore[arg-type]
    assert "must be a JSON object" in result["error"]


@pytest.mark.anyio
async def test_values_are_coerced_to_the_annotated_types() -> None:
    def f(n: int, ratio: float) -> dict[str, Any]:
        return {"n": n, "ratio": ratio}

    assert await FunctionTool(f).run_async(args={"n": "3", "ratio": 1},
                                           tool_context=ctx()) == {"n": 3, "ratio": 1.0}


@pytest.mark.anyio
async def test_var_keyword_function_accepts_extra_arguments() -> None:
    def f(a: int, **rest: Any) -> dict[str, Any]:
        return {"a": a, **rest}

    result = await FunctionTool(f).run_async(args={"a": 1, "b": 2}, tool_context=ctx())
    assert result == {"a": 1, "b": 2}


# -- tool_context -------------------------------------------------------------------


@pytest.mark.anyio
async def test_tool_context_is_injected_by_parameter_name_and_hidden_from_the_schema() -> None:
    def f(x: int, tool_context) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return {"call": tool_context.function_call_id}

    tool = FunctionTool(f)

    assert list(tool.parameters_schema()["properties"]) == ["x"]
    assert await tool.run_async(args={"x": 1}, tool_context=ctx("c9")) == {"call": "c9"}


@pytest.mark.anyio
async def test_tool_context_is_injected_by_annotation_under_any_name() -> None:
    def f(x: int, context: ToolContext) -> dict[str, Any]:
        context.state["seen"] = x
        return {"call": context.function_call_id}

    tool = FunctionTool(f)
    context = ctx("c7")

    assert list(tool.parameters_schema()["properties"]) == ["x"]
    assert await tool.run_async(args={"x": 2}, tool_context=context) == {"call": "c7"}
    assert context.actions.state_delta == {"seen": 2}


@pytest.mark.anyio
async def test_caller_cannot_supply_tool_context(effect: SideEffect) -> None:
    def f(tool_context: ToolContext) -> None:
        effect.append("ran")

    result = await FunctionTool(f).run_async(
        args={"tool_context": {"tool_confirmation": {"confirmed": True}}}, tool_context=ctx())

    assert "'tool_context'" in result["error"] and "cannot be passed" in result["error"]
    assert not effect.happened


# -- results and where functions run -------------------------------------------------


@pytest.mark.anyio
async def test_non_dict_return_is_returned_as_is_and_wrapped_by_the_runner() -> None:
    def f() -> list[int]:
        return [1, 2]

    assert await FunctionTool(f).run_async(args={}, tool_context=ctx()) == [1, 2]
    assert await ToolRunner([FunctionTool(f)]).call("f") == {"result": [1, 2]}


@pytest.mark.anyio
async def test_dict_return_is_passed_through() -> None:
    def f() -> dict[str, Any]:
        return {"a": 1}

    assert await FunctionTool(f).run_async(args={}, tool_context=ctx()) == {"a": 1}


@pytest.mark.anyio
async def test_sync_function_runs_off_the_event_loop_thread() -> None:
    def f() -> int:
        return threading.get_ident()

    result = await FunctionTool(f).run_async(args={}, tool_context=ctx())

    assert result != threading.get_ident()


@pytest.mark.anyio
async def test_async_function_runs_on_the_event_loop_thread() -> None:
    async def f() -> int:
        return threading.get_ident()

    result = await FunctionTool(f).run_async(args={}, tool_context=ctx())

    assert result == threading.get_ident()


@pytest.mark.anyio
async def test_sync_function_marked_instant_runs_on_the_loop() -> None:
    def f() -> int:
        return threading.get_ident()

    result = await FunctionTool(f, run_in_thread=False).run_async(args={}, tool_context=ctx())

    assert result == threading.get_ident()


@pytest.mark.anyio
async def test_callable_object_with_async_call_is_awaited() -> None:
    class Tool:
        __name__ = "obj"

        async def __call__(self, x: int) -> dict[str, Any]:
            return {"x": x}

    assert await FunctionTool(Tool()).run_async(args={"x": 1}, tool_context=ctx()) == {"x": 1}


# -- require_confirmation -------------------------------------------------------------


@pytest.mark.anyio
async def test_sync_predicate_is_called_with_the_tools_arguments() -> None:
    seen: list[dict[str, Any]] = []

    def risky(scope: str, force: bool = False) -> bool:
        seen.append({"scope": scope, "force": force})
        return scope != "dry-run"

    def wipe(scope: str, tool_context: ToolContext, force: bool = False) -> None: ...

    tool = FunctionTool(wipe, require_confirmation=risky)

    assert await tool.confirmation_needed({"scope": "prod"}) is not None
    assert await tool.confirmation_needed({"scope": "dry-run"}) is None
    assert seen == [{"scope": "prod", "force": False}, {"scope": "dry-run", "force": False}]


@pytest.mark.anyio
async def test_async_predicate_is_awaited() -> None:
    async def risky(n: int) -> bool:
        return n > 10

    tool = FunctionTool(lambda_free, require_confirmation=risky)

    assert await tool.confirmation_needed({"n": 11}) is not None
    assert await tool.confirmation_needed({"n": 1}) is None


def lambda_free(n: int) -> int:
    return n


@pytest.mark.anyio
async def test_predicate_returning_a_non_bool_is_an_error_not_a_decision() -> None:
    tool = FunctionTool(lambda_free, require_confirmation=lambda n: "yes")

    with pytest.raises(TypeError, match="must return True or False"):
        await tool.confirmation_needed({"n": 1})


def test_require_confirmation_must_be_a_flag_or_a_callable() -> None:
    with pytest.raises(TypeError, match="require_confirmation"):
        FunctionTool(lambda_free, require_confirmation="always")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_run_directly_without_a_confirmation_asks_for_one_adk_style(
    effect: SideEffect,
) -> None:
    def f() -> None:
        effect.append("ran")

    context = ctx("c1")
    result = await FunctionTool(f, require_confirmation=True).run_async(args={},
                                                                        tool_context=context)

    assert "requires confirmation" in result["error"]
    assert "c1" in context.actions.requested_tool_confirmations
    assert context.actions.skip_summarization is True
    assert not effect.happened


@pytest.mark.anyio
async def test_run_directly_with_a_rejection_does_not_call_the_function(
    effect: SideEffect,
) -> None:
    def f() -> None:
        effect.append("ran")

    result = await FunctionTool(f, require_confirmation=True).run_async(
        args={}, tool_context=ctx(confirmation=ToolConfirmation(confirmed=False)))

    assert result == {"error": "This tool call is rejected."}
    assert not effect.happened


@pytest.mark.anyio
async def test_run_directly_with_an_approval_calls_the_function(effect: SideEffect) -> None:
    def f() -> None:
        effect.append("ran")

    await FunctionTool(f, require_confirmation=True).run_async(
        args={}, tool_context=ctx(confirmation=ToolConfirmation(confirmed=True)))

    assert effect.lines == ["ran"]


# -- ToolContext ----------------------------------------------------------------------


def test_request_confirmation_records_hint_and_payload_under_the_call_id() -> None:
    context = ctx("c3")
    context.request_confirmation(hint="how many?", payload={"n": 0})

    asked = context.actions.requested_tool_confirmations["c3"]
    assert asked == ToolConfirmation(hint="how many?", payload={"n": 0})


def test_request_confirmation_without_a_call_id_says_how_to_fix_it() -> None:
    with pytest.raises(ValueError, match="function_call_id"):
        ToolContext().request_confirmation(hint="x")


def test_state_writes_are_recorded_as_a_delta() -> None:
    context = ToolContext(function_call_id="c", state={"a": 1})
    context.state["b"] = 2
    context.state.update(c=3)

    assert context.state == {"a": 1, "b": 2, "c": 3}
    assert context.actions.state_delta == {"b": 2, "c": 3}


# -- ToolConfirmation ------------------------------------------------------------------


def test_tool_confirmation_accepts_field_names_and_camel_case_aliases() -> None:
    conf = ToolConfirmation.model_validate({"confirmed": True, "hint": "h", "payload": [1]})

    assert conf == ToolConfirmation(confirmed=True, hint="h", payload=[1])
    assert conf.model_dump(by_alias=True) == {"hint": "h", "confirmed": True, "payload": [1]}
    assert ToolConfirmation.model_config.get("alias_generator") is not None


def test_tool_confirmation_parses_json_text() -> None:
    conf = ToolConfirmation.parse('{"confirmed": true, "payload": {"n": 2}}')

    assert conf.confirmed and conf.payload == {"n": 2}


def test_tool_confirmation_unwraps_adks_response_wrapper() -> None:
    wrapped = {"response": json.dumps({"confirmed": True, "hint": "ok"})}

    assert ToolConfirmation.parse(wrapped) == ToolConfirmation(confirmed=True, hint="ok")


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"confirm": True}, "confirm"),
        ({"confirmed": "perhaps"}, "confirmed"),
        ("{not json", "not valid JSON"),
        ({"response": "{not json"}, "not valid JSON"),
        ([True], "<root>"),
        (None, "<root>"),
        (b'{"hint": "\xff"}', "ToolConfirmation"),
        ("[" * 100_000, "ToolConfirmation"),
    ],
    ids=["unknown-field", "wrong-type", "bad-json", "bad-wrapped-json", "list", "none",
         "bad-utf8", "deep-nesting"],
)
def test_a_bad_tool_confirmation_is_a_clear_configuration_error_never_a_crash(
    data: Any, named: str
) -> None:
    with pytest.raises(ConfigurationError, match="ToolConfirmation") as info:
        ToolConfirmation.parse(data)
    assert named in str(info.value)


def test_tool_confirmation_is_immutable() -> None:
    conf = ToolConfirmation(confirmed=False)

    with pytest.raises(ValueError, match="frozen"):
        conf.confirmed = True  # type: ignore[misc]


# -- BaseTool ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_base_tool_defaults_are_safe() -> None:
    class Echo(BaseTool):
        async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
            return args

    tool = Echo(name="echo", description="Echo.")

    assert tool.declaration() == {
        "name": "echo", "description": "Echo.", "parameters": {"type": "object",
                                                              "properties": {}}}
    assert await tool.precheck({}) is None
    assert await tool.confirmation_needed({}) is None
    with pytest.raises(ValueError, match="JSON object"):
        tool.validate_args("x")  # type: ignore[arg-type]


class _Transfer(BaseTool):
    """A tool that renders its own arguments for the human who approves it."""

    def render_args(self, args: dict[str, Any]) -> str | None:
        return f"send {args['amount']} to {args['to']}"

    async def check_require_confirmation(self, args: dict[str, Any],
                                         tool_context: ToolContext) -> bool:
        return True

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        return {"sent": args["amount"]}


@pytest.mark.anyio
async def test_a_tools_own_rendering_is_what_the_audit_records_as_shown(tmp_path: Any) -> None:
    from sandbox import Decision

    audit = tmp_path / "audit.jsonl"
    runner = ToolRunner([_Transfer(name="transfer", description="Send money.")],
                        audit_path=str(audit))
    held = await runner.call("transfer", {"amount": 5, "to": "bob\x1b[2J"})
    await runner.resume(held["confirmation_id"], Decision.approve())
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    decided = next(r for r in records if r["event"] == "tool.decided")
    assert decided["shown"]["args"] == "send 5 to bob\\x1b[2J"


def test_the_approval_layer_holds_no_shell_syntax() -> None:
    import pathlib

    import sandbox.approval

    root = pathlib.Path(sandbox.approval.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "bash_tokens" not in text and "_COMMAND_START" not in text, path
