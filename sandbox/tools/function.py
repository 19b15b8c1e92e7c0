"""`FunctionTool`: any Python callable as a tool, with ADK's `require_confirmation`."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .base import BaseTool, ToolArgumentError
from .context import ToolContext
from .docstring import parse_docstring

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
        doc = parse_docstring(inspect.getdoc(func))
        super().__init__(
            name=name or str(getattr(func, "__name__", type(func).__name__)),
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

    # -- declaration -----------------------------------------------------------------

    def parameters_schema(self) -> dict[str, Any]:
        return self._schema

    # -- the gate's hooks ------------------------------------------------------------

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        kwargs = self._convert(args)
        checked = _CheckedArgs(args)
        checked.kwargs = kwargs
        checked.tool = self
        return checked

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        """Evaluate ``require_confirmation`` for these arguments; return the hint if needed."""
        rc = self.require_confirmation
        if rc if isinstance(rc, bool) else await self._needs_confirmation(self._convert(args)):
            return f"Please approve or reject the tool call {self.name}()."
        return None

    # -- running ---------------------------------------------------------------------

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        gate_checked = getattr(tool_context, "_gate_checked", False)
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
            if confirmation is None and await self._needs_confirmation(kwargs):
                tool_context.request_confirmation(
                    hint=f"Please approve or reject the tool call {self.name}()."
                )
                tool_context.actions.skip_summarization = True
                return {"error": "This tool call requires confirmation, please approve or reject."}
        if confirmation is not None and not confirmation.confirmed:
            return {"error": "This tool call is rejected."}
        if self._context_param is not None:
            kwargs[self._context_param] = tool_context
        if self._is_async:
            result = await self.func(**kwargs)
        elif self._run_in_thread:
            result = await anyio.to_thread.run_sync(functools.partial(self.func, **kwargs))
        else:
            result = self.func(**kwargs)
        return result if isinstance(result, dict) else {"result": result}

    # -- internals -------------------------------------------------------------------

    async def _needs_confirmation(self, kwargs: dict[str, Any]) -> bool:
        rc = self.require_confirmation
        if isinstance(rc, bool):
            return rc
        pred_kwargs = {k: v for k, v in kwargs.items() if k != self._context_param}
        verdict: Any = rc(**pred_kwargs)
        if self._predicate_is_async or inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, bool):
            raise TypeError(
                f"require_confirmation predicate of {self.name} returned "
                f"{type(verdict).__name__}; it must return True or False"
            )
        return verdict

    def _convert(self, args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolArgumentError(
                f"arguments to {self.name} must be a JSON object, got {type(args).__name__}"
            )
        if self._context_param is not None and self._context_param in args:
            raise ToolArgumentError(
                f"argument {self._context_param!r} of {self.name} is supplied by the runner "
                "and cannot be passed by the caller"
            )
        try:
            model = self._model.model_validate(args)
        except ValidationError as exc:
            raise ToolArgumentError(_describe_validation_error(self.name, exc)) from None
        kwargs = {name: getattr(model, name) for name in self._field_names}
        if self._accepts_any and model.model_extra:
            kwargs.update(model.model_extra)
        return kwargs


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
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<arguments>"
        if err["type"] == "missing":
            parts.append(f"missing required argument {loc!r}")
        elif err["type"] == "extra_forbidden":
            parts.append(f"unexpected argument {loc!r}")
        else:
            parts.append(f"invalid argument {loc!r}: {err['msg']} (got {err.get('input')!r:.80})")
    return f"Invalid arguments for {tool}: " + "; ".join(parts)
