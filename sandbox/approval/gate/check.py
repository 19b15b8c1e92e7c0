"""The gate's question about one call: precheck → predicate → rules → verdict.

`check` asks the tool's own refusal check (`BaseTool.precheck`: a blocked bash command
never reaches a human), then its confirmation predicate (`confirmation_hint`:
``require_confirmation``, ADK's ``check_require_confirmation``), and returns a typed
verdict: `Proceed` (no human needed), `Ask` (a human must confirm; a remembered rule may
answer, see `rules_answer`) or `Stop` (the call ends here). A check that raises stops the
call: fail closed. Nothing here touches the store or the audit log.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sandbox.approval.gate.results import Blocked, NotRun, Outcome, Status
from sandbox.approval.models import Decision
from sandbox.approval.rules import Rule
from sandbox.tools.base import BaseTool, confirmation_hint_text
from sandbox.tools.context import ToolContext


@dataclass(frozen=True, slots=True)
class Proceed:
    """No human is needed: run."""


@dataclass(frozen=True, slots=True)
class Ask:
    """A human must confirm first: ``hint`` is the question, ``kind`` why it is asked."""

    hint: str
    kind: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The call ends here: ``state`` is recorded, ``result`` returned, ``event`` audited."""

    state: str
    result: Outcome
    event: str


Verdict = Proceed | Ask | Stop
PROCEED = Proceed()


async def refusal(tool: BaseTool, args: dict[str, Any]) -> Stop | None:
    """The tool's hard refusal of these (validated) arguments (a blocked bash command),
    or None. No human's approval overrides it: an approved or edited call is refused
    here too."""
    try:
        blocked = await tool.precheck(args)
    except Exception as exc:  # a broken check must not let the call through
        return Stop("error", NotRun(
            Status.ERROR, f"{tool.name}: checking the call failed ({type(exc).__name__}: "
                          f"{exc}); the tool was not run"), "tool.failed")
    if blocked is not None:
        return Stop("blocked", Blocked(blocked), "tool.blocked")
    return None


_NO_PRECHECK = BaseTool.precheck
_NO_SUBJECTS = BaseTool.rule_subjects
_NO_DETAILS = BaseTool.describe


#: `FunctionTool.confirmation_hint` and `.check_require_confirmation`, once that module
#: is loaded (not imported from here: a runner of other tools does without it).
_FLAG_HOOK: list[Any] = []


def _flag_hook() -> Any:
    if not _FLAG_HOOK:
        module = sys.modules.get("sandbox.tools.function")
        if module is None:
            return None
        _FLAG_HOOK.extend((module.FunctionTool.confirmation_hint,
                           module.FunctionTool.check_require_confirmation))
    return _FLAG_HOOK[0]


def known(tool: BaseTool) -> Verdict | None:
    """`check`'s verdict when it is known without awaiting anything: the tool refuses
    nothing (`BaseTool.precheck` as it is) and asks by a flag (a `FunctionTool` with
    ``require_confirmation=True`` or ``False``, its hook as it is). None: `check` it."""
    if getattr(tool.precheck, "__func__", None) is not _NO_PRECHECK:
        return None
    hook = getattr(tool.confirmation_hint, "__func__", None)
    if hook is None or hook is not (_FLAG_HOOK[0] if _FLAG_HOOK else _flag_hook()):
        return None
    if getattr(tool.check_require_confirmation, "__func__", None) is not _FLAG_HOOK[1]:
        return None  # a subclass's own predicate (ADK's hook): it is asked
    flag = tool.require_confirmation  # type: ignore[attr-defined]
    if flag is True:  # what FunctionTool's hook returns for the flag
        ask = _STATIC_ASKS.get(tool.name)
        if ask is None:
            ask = Ask(confirmation_hint_text(tool.name), "static")
            if len(_STATIC_ASKS) < 1024:
                _STATIC_ASKS[tool.name] = ask
        return ask
    return PROCEED if flag is False else None


#: The (immutable) verdict of a tool that always asks, per tool name.
_STATIC_ASKS: dict[str, Ask] = {}


async def check(tool: BaseTool, args: dict[str, Any], ctx: ToolContext) -> Verdict:
    """Precheck, then the predicate, for these (validated) arguments."""
    if getattr(tool.precheck, "__func__", None) is not _NO_PRECHECK:  # else: refuses nothing
        stopped = await refusal(tool, args)
        if stopped is not None:
            return stopped
    try:
        hint = await tool.confirmation_hint(args, ctx)
    except Exception as exc:
        return Stop("error", NotRun(
            Status.ERROR, f"{tool.name}: require_confirmation failed ({type(exc).__name__}: "
                          f"{exc}); the tool was not run"), "tool.failed")
    if hint is None:
        return PROCEED
    return Ask(hint, ask_kind(tool))


def ask_kind(tool: BaseTool) -> str:
    """Why a tool's own predicate asks: a function of the arguments, or always."""
    return "predicate" if callable(getattr(tool, "require_confirmation", None)) else "static"


def rule_subjects(tool: BaseTool, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
    """The tool's parsed commands for a rule to cover; a failing parse covers nothing."""
    if getattr(tool.rule_subjects, "__func__", None) is _NO_SUBJECTS:
        return None  # BaseTool's: rules match on the tool and its exact arguments
    try:
        subjects = tool.rule_subjects(args)
    except Exception:
        return ()
    if subjects is None:
        return None
    return tuple(tuple(str(word) for word in argv) for argv in subjects)


def request_details(tool: BaseTool, args: dict[str, Any],
                    subjects: Sequence[Sequence[str]] | None) -> dict[str, Any]:
    """What a human asked about this call sees beside its arguments."""
    if getattr(tool.describe, "__func__", None) is _NO_DETAILS:
        details: dict[str, Any] = {}  # BaseTool's: nothing to add
    else:
        try:
            details = tool.describe(args)
        except Exception:
            details = {}
    if tool.description:  # what the tool does (the page shows it)
        details = {**details, "tool_description": tool.description[:2000]}
    if subjects is not None:
        details = {**details, "rule_subjects": [list(argv) for argv in subjects]}
    return details


def rules_answer(rules: list[Rule] | None) -> Decision | None:
    """The approval remembered rules give a parked request, or None to ask a human."""
    if not rules:
        return None
    return Decision.approve(decided_by=",".join(r.id for r in rules), channel="rule")
