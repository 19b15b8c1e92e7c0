"""`FunctionTool`: any Python callable as a tool, with ADK's `require_confirmation`."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from sandbox.tools.base import BaseTool, ToolArgumentError, confirmation_hint_text
from sandbox.tools.context import ToolContext
from sandbox.tools.docstring import parse_docstring

#: ``require_confirmation`` accepts a flag or a predicate over the call's arguments.
ConfirmationPredicate = Callable[..., bool | Awaitable[bool]]
RequireConfirmation = bool | ConfirmationPredicate


class _CheckedArgs(dict[str, Any]):
    """Arguments `FunctionTool.validate_args` accepted (a copy), with the keyword
    arguments they converted to: the gate runs the tool without converting again."""

    __slots__ = ("kwargs", "tool")
    kwargs: dict[str, Any]
    tool: FunctionTool


class FunctionTool(BaseTool):
    """Wrap a function as a tool: schema from its signature, arguments checked by pydantic.

    - The JSON schema comes from the parameters' type hints and the Google-style
      docstring (`Args:` entries become parameter descriptions).
    - A parameter named `tool_context`, or annotated `ToolContext`, is injected and hidden
      from the schema.
    - Missing, unknown or ill-typed arguments produce an error dict naming them; the
      function is not called. Parameters annotated with a pydantic model receive the model.
    - Sync functions run in a worker thread so they never block the event loop (pass
      ``run_in_thread=False`` for functions that are known to be instant).
    - ``require_confirmation`` is ``True``, ``False`` or a predicate (sync or async) called
      with the validated arguments, returning whether a human must confirm this call.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        require_confirmation: RequireConfirmation = False,
        name: str | None = None,
        description: str | None = None,
        run_in_thread: bool = True,
        is_long_running: bool = False,
        custom_metadata: dict[str, Any] | None = None,
    ) -> None:
        if not callable(func):
            raise TypeError(f"FunctionTool needs a callable, got {type(func).__name__}")
        if not isinstance(require_confirmation, bool) and not callable(require_confirmation):
            raise TypeError(
                "require_confirmation must be True, False or a callable predicate over the "
                f"tool's arguments, got {type(require_confirmation).__name__}"
            )
        if _is_generator_callable(func):
            raise TypeError(
                f"{callable_name(func)} is a generator function: FunctionTool runs a function "
                "once and returns its result, and the gate approves that one result. Return "
                "a list (or a dict) of the items instead of yielding them"
            )
        doc = parse_docstring(callable_doc(func))
        super().__init__(
            name=name or callable_name(func),
            description=description if description is not None else doc.description,
            is_long_running=is_long_running,
            custom_metadata=custom_metadata,
        )
        self.func = func
        self.require_confirmation = require_confirmation
        self._is_async = _is_async_callable(func)
        self._run_in_thread = run_in_thread
        self._context_param, self._model, self._accepts_any = _arguments_model(
            func, self.name, doc.params
        )
        self._schema = _clean_schema(self._model.model_json_schema())
        self._field_names = tuple(self._model.model_fields)
        self._predicate_is_async = (
            callable(require_confirmation)
            and not isinstance(require_confirmation, bool)
            and _is_async_callable(require_confirmation)
        )
        self._predicate_context = (
            None if isinstance(require_confirmation, bool)
            else _context_parameter(require_confirmation)
        )

    # -- declaration -----------------------------------------------------------------

    def parameters_schema(self) -> dict[str, Any]:
        return self._schema

    # -- the gate's hooks ------------------------------------------------------------

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments as the function will get them, defaults filled and types
        converted, in JSON form: what the gate digests, stores, shows a human and runs."""
        model = self._validated(args)
        kwargs = self._kwargs(model)
        checked = _CheckedArgs(self._normalised(args, model))  # the one copy
        checked.kwargs = kwargs
        checked.tool = self
        return checked

    async def check_require_confirmation(
        self, args: dict[str, Any], tool_context: ToolContext
    ) -> bool:
        """Evaluate ``require_confirmation`` for these (raw) arguments, as ADK does.

        A predicate gets the validated arguments (defaults filled, types converted) and,
        if it declares a ``tool_context`` parameter, the call's context.
        """
        rc = self.require_confirmation
        if isinstance(rc, bool):
            return rc
        kwargs = args.kwargs if type(args) is _CheckedArgs and args.tool is self else (
            self._convert(args))
        return await self._needs_confirmation(kwargs, tool_context)

    async def confirmation_hint(
        self, args: dict[str, Any], tool_context: ToolContext
    ) -> str | None:
        if await self.check_require_confirmation(args, tool_context):
            return confirmation_hint_text(self.name)
        return None

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        """Evaluate ``require_confirmation`` for these arguments; return the hint if needed."""
        return await self.confirmation_hint(args, ToolContext())

    # -- running ---------------------------------------------------------------------

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        """Run the function and return what it returned (a dict or not), as ADK does.

        An awaitable result (an ``async def`` behind a plain decorator) is awaited.
        """
        gate_checked = getattr(tool_context, "gated", False)  # an ADK ToolContext has none
        if gate_checked and type(args) is _CheckedArgs and args.tool is self:
            # Converted by validate_args for the runner, which has not changed them since.
            kwargs = dict(args.kwargs)
        else:
            try:
                kwargs = self._convert(args)
            except ToolArgumentError as exc:
                return {"error": exc.message}
        confirmation = tool_context.tool_confirmation
        # The runner has already evaluated the gate for this exact call; re-evaluating a
        # predicate here would run user code twice per call.
        if not gate_checked:
            if confirmation is None and await self.check_require_confirmation(
                    args, tool_context):
                tool_context.request_confirmation(hint=confirmation_hint_text(self.name))
                tool_context.actions.skip_summarization = True
                return {"error": "This tool call requires confirmation, please approve or reject."}
        if confirmation is not None and not confirmation.confirmed:
            return {"error": "This tool call is rejected."}
        if self._context_param is not None:
            kwargs[self._context_param] = tool_context
        if self._is_async:
            result = await self.func(**kwargs)
            if type(result) is dict:  # the common case: nothing more to await
                return result
        elif self._run_in_thread:
            result = await anyio.to_thread.run_sync(functools.partial(self.func, **kwargs))
        else:
            result = self.func(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    # -- internals -------------------------------------------------------------------

    async def _needs_confirmation(self, kwargs: dict[str, Any],
                                  tool_context: ToolContext) -> bool:
        rc = self.require_confirmation
        if isinstance(rc, bool):
            return rc
        pred_kwargs = {k: v for k, v in kwargs.items() if k != self._context_param}
        if self._predicate_context is not None:
            pred_kwargs[self._predicate_context] = tool_context
        verdict: Any = rc(**pred_kwargs)
        if self._predicate_is_async or inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, bool):
            raise TypeError(
                f"require_confirmation predicate of {self.name} returned "
                f"{type(verdict).__name__}; it must return True or False"
            )
        return verdict

    def _normalised(self, args: dict[str, Any], model: BaseModel) -> dict[str, Any]:
        fields = self._field_names
        if len(args) == len(fields):
            for name in fields:  # a loop, not all(genexpr): this runs on every call
                value = getattr(model, name, _MISSING)
                if type(value) is not type(args.get(name, _MISSING)) or value != args[name]:
                    break
            else:
                # Every argument sent, none converted (the common case): they are the
                # normalised form already (copied by the caller). Not JSON values are
                # refused by the gate, by name.
                return args
        if not _is_json_value(args):
            return dict(args)  # as sent: the gate refuses what is not JSON, by name
        try:
            return dict(model.model_dump(mode="json"))
        except Exception:  # a converted value with no JSON form: the caller's own
            return dict(args)

    def _convert(self, args: dict[str, Any]) -> dict[str, Any]:
        return self._kwargs(self._validated(args))

    def _validated(self, args: dict[str, Any]) -> BaseModel:
        if not isinstance(args, dict):
            raise ToolArgumentError(
                f"arguments to {self.name} must be a JSON object, got {type(args).__name__}"
            )
        if self._context_param is not None and self._context_param in args:
            raise ToolArgumentError(
                f"argument {self._context_param!r} of {self.name} is supplied by the runner "
                "and cannot be passed by the caller"
            )
        try:  # the validator itself: BaseModel.model_validate is a Python layer over it
            return self._model.__pydantic_validator__.validate_python(  # type: ignore[no-any-return]
                args)
        except ValidationError as exc:
            raise ToolArgumentError(_describe_validation_error(self.name, exc)) from None

    def _kwargs(self, model: BaseModel) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for name in self._field_names:  # a loop, not a comprehension: every call
            kwargs[name] = getattr(model, name)
        if self._accepts_any and model.model_extra:
            kwargs.update(model.model_extra)
        return kwargs


_MISSING = object()
_DEFAULT_PARTIAL_DOC = inspect.getdoc(functools.partial)
_DEFAULT_CALL_DOC = inspect.getdoc(type.__call__)


def callable_name(func: Any) -> str:
    """The name a callable is declared under, as ADK names it: a partial takes its
    wrapped function's name (two partials of different functions do not collide), a
    callable object its class name."""
    if isinstance(func, functools.partial) and not hasattr(func, "__name__"):
        return callable_name(func.func)
    return str(getattr(func, "__name__", None) or type(func).__name__)


def callable_doc(func: Any) -> str:
    """The docstring a callable is described by, as ADK reads it: a partial without a
    docstring of its own has its wrapped function's, a callable object without one has
    its ``__call__``'s."""
    doc = inspect.getdoc(func) or "" if not isinstance(func, type) else (
        inspect.cleandoc(func.__doc__) if isinstance(func.__doc__, str) else "")
    if isinstance(func, functools.partial) and doc == _DEFAULT_PARTIAL_DOC:
        return callable_doc(func.func)
    if not doc and not inspect.isroutine(func) and not isinstance(func, type):
        call = getattr(func, "__call__", None)  # noqa: B004 - a callable object
        call_doc = inspect.getdoc(call) if call is not None else None
        if call_doc and call_doc != _DEFAULT_CALL_DOC:
            doc = call_doc
    return "" if doc == _DEFAULT_CALL_DOC else doc


def _is_json_value(value: Any) -> bool:
    """Whether ``value`` is made of JSON types only (what a model can send)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, list):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def _unwrapped(func: Any) -> Any:
    while isinstance(func, functools.partial):
        func = func.func
    return func


def _is_generator_callable(func: Any) -> bool:
    func = _unwrapped(func)
    call = getattr(func, "__call__", None)  # noqa: B004
    return any(inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f)
               for f in (func, call) if f is not None)


def _context_parameter(func: Any) -> str | None:
    """The parameter of ``func`` that takes the `ToolContext`: named ``tool_context`` or
    annotated `ToolContext`."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    try:
        hints = typing.get_type_hints(_unwrapped(func))
    except Exception:
        hints = {}
    for pname, param in signature.parameters.items():
        if pname == "tool_context" or hints.get(pname, param.annotation) is ToolContext:
            return pname
    return None


def _is_async_callable(func: Any) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


def _arguments_model(
    func: Callable[..., Any], tool_name: str, descriptions: dict[str, str]
) -> tuple[str | None, type[BaseModel], bool]:
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {}
    fields: dict[str, Any] = {}
    context_param: str | None = None
    accepts_any = False
    for pname, param in signature.parameters.items():
        annotation = hints.get(pname, param.annotation)
        if pname == "tool_context" or annotation is ToolContext:
            context_param = pname
            continue
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_any = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"{tool_name}: positional-only parameter {pname!r} cannot be passed by name; "
                "remove the '/' from the signature"
            )
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=descriptions.get(pname)))
    config = ConfigDict(extra="allow" if accepts_any else "forbid", arbitrary_types_allowed=True)
    model = create_model(f"{tool_name}_arguments", __config__=config, **fields)
    return context_param, model, accepts_any


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles, which models read as noise."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: strip(v)
                for k, v in node.items()
                if not (k == "title" and isinstance(v, str))
                and not (k == "additionalProperties" and v is True)
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    cleaned = strip(schema)
    cleaned.setdefault("properties", {})
    cleaned["type"] = "object"
    return typing.cast(dict[str, Any], cleaned)


def _describe_validation_error(tool: str, exc: ValidationError) -> str:
    """ADK's framing (`FunctionTool._build_validation_error_response`: one line per
    parameter, "validation error", the invitation to retry), with each error located
    to the exact element (``items.0.price``) and what was sent."""
    by_param: dict[str, list[str]] = {}
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<arguments>"
        param = str(err["loc"][0]) if err["loc"] else "<arguments>"
        if err["type"] == "missing":
            said = f"missing required argument {loc!r}"
        elif err["type"] == "extra_forbidden":
            said = f"unexpected argument {loc!r}"
        else:
            said = f"invalid argument {loc!r}: {err['msg']} (got {err.get('input')!r:.80})"
        by_param.setdefault(param, []).append(said)
    lines = "\n".join(f"Parameter {param!r}: validation error: " + "; ".join(said)
                      for param, said in by_param.items())
    return (f"Invoking `{tool}()` failed due to argument validation errors:\n{lines}\n"
            "You could retry calling this tool with corrected argument types.")
