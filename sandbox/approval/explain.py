"""A request in a human's words: what will happen, why it was asked, who asked, and what
each answer does. Every channel (the terminal, the web page, `sandbox approvals`, MCP
elicitation) shows these instead of the developer text a request carries.

The request's ``hint`` is written for the model's side: ADK's own words ("Please approve
or reject the tool call deploy() by responding with a FunctionResponse with an expected
ToolConfirmation payload") stay in the request, the store and what ADK's client reads;
a human sees them only when a tool wrote its own question (`request_confirmation`).
Texts here are plain; each channel escapes them (`display.escape_text`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from sandbox.approval.display import command_of, rule_subjects_of
from sandbox.approval.models import ConfirmationRequest
from sandbox.tools.base import confirmation_hint_text

#: The prefix of the bash tool's hint for the model (`ExecuteBashTool.confirmation_needed`).
_BASH_HINT = "Please approve or reject the bash command:"


@dataclass(frozen=True)
class Explanation:
    """What a card says, in plain words (unescaped: a channel escapes them)."""

    what: str
    why: str
    who: str
    #: The tool's own question, when it wrote one (``None`` for developer text).
    tool_says: str | None
    #: (answer, what it does), in the order channels offer them.
    answers: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.what, "why": self.why, "who": self.who,
                "tool_says": self.tool_says,
                "answers": [{"answer": a, "does": d} for a, d in self.answers]}


def is_developer_hint(request: ConfirmationRequest) -> bool:
    """Whether the request's hint is text for the model's side, not for a human."""
    hint = request.hint.strip()
    return (not hint or hint == confirmation_hint_text(request.tool)
            or hint.startswith(_BASH_HINT)
            or ("FunctionResponse" in hint and "ToolConfirmation" in hint))


def explain(request: ConfirmationRequest) -> Explanation:
    """The plain words for ``request``."""
    command = command_of(request.args)
    policy = request.details.get("policy")
    is_bash = command is not None and isinstance(policy, dict)
    tool_says = None if is_developer_hint(request) else request.hint.strip()
    return Explanation(
        what=_what(request, command if is_bash else None),
        why=_why(request, policy if is_bash else None, tool_says),
        who=_who(request),
        tool_says=tool_says,
        answers=_answers(request, is_bash),
    )


def _what(request: ConfirmationRequest, command: str | None) -> str:
    workspace = request.details.get("workspace")
    if command is not None:
        subjects = rule_subjects_of(request) or []
        programs = sorted({argv[0] for argv in subjects if argv})
        where = f" in {workspace}" if isinstance(workspace, str) else ""
        runs = f" (it runs {', '.join(programs)})" if programs else ""
        return (f"Runs the bash command below{where}{runs}, confined to that workspace "
                "by the sandbox.")
    description = request.details.get("tool_description")
    first = _first_sentence(description) if isinstance(description, str) else ""
    call = f"Calls {request.tool} with these arguments"
    return f"{call}: {first}" if first else f"{call}."


def _why(request: ConfirmationRequest, policy: dict[str, Any] | None,
         tool_says: str | None) -> str:
    if request.kind == "edit":
        source = f" of request {request.edited_from}" if request.edited_from else ""
        return (f"A human edited the arguments{source}; the edited call is checked again "
                "and needs its own approval.")
    if request.kind == "tool":
        return ("The tool itself stopped to ask before going on"
                + (f": \u201c{tool_says}\u201d" if tool_says else "."))
    if policy is not None:
        reason = str(policy.get("reason") or "").strip()
        if reason.lower().startswith("allowed:"):
            reason = reason[len("allowed:"):].strip()
        verdict = f"The bash policy allows it ({reason})" if reason else \
            "The bash policy allows it"
        return (f"{verdict}, and asks a human first for every command not on its "
                "no-confirmation list.")
    said = f" It says: \u201c{tool_says}\u201d" if tool_says else ""
    if request.kind == "predicate":
        return (f"{request.tool}'s confirmation rule (its require_confirmation check) asked "
                f"for these arguments; other arguments may run without asking.{said}")
    return f"{request.tool} always asks a human before it runs (require_confirmation).{said}"


def _who(request: ConfirmationRequest) -> str:
    session = (f"the agent of session {request.session_id}" if request.session_id
               else "an agent (no session named)")
    return f"{session}, call {request.call_id}"


def _answers(request: ConfirmationRequest, is_bash: bool) -> tuple[tuple[str, str], ...]:
    subjects = rule_subjects_of(request)
    if is_bash and subjects:
        same = "the same command" + ("s " if len(subjects) > 1 else " ") + "(" + "; ".join(
            " ".join(shlex.quote(w) for w in argv) for argv in subjects) + ")"
    elif is_bash:
        same = "nothing more (this command cannot be remembered: it writes a file or " \
               "defines a function)"
    else:
        same = f"{request.tool} with exactly these arguments"
    session = request.session_id or "this agent's session"
    return (
        ("approve once", "it runs now, this exact call, once; a retry or a changed call "
                         "asks again"),
        ("approve for this session", f"it runs now, and {same} run again without asking "
                                     f"in {session}"),
        ("always", f"it runs now, and a rule lets {same} run in every session for 30 days "
                   "(revocable with `sandbox approvals rules`)"),
        ("deny", "it does not run; the model reads your reason"),
        ("edit", "your changed arguments run instead, after being checked again"),
    )


def _first_sentence(text: str) -> str:
    line = text.strip().split("\n\n")[0].replace("\n", " ").strip()
    end = line.find(". ")
    return (line[:end + 1] if end != -1 else line)[:300]
