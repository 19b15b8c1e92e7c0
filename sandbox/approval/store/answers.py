"""What an answer to a confirmation request may be, and the `Decision` it is read as:
`parse_answer` (an answer that may have crossed a process boundary: a dict or JSON text
in either shape) and `to_decision` (what a provider or callback returned). The store
checks every answer submitted to it with these (`decisions.answer_text`), and the
providers and the runner use them too (re-exported by `sandbox.approval.providers`).
Moved here from providers.py so that the store does not import the provider layer.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from sandbox.approval.models import Decision
from sandbox.errors import ConfigurationError
from sandbox.tools.context import ToolConfirmation

#: One immutable "approve once" per channel, and what the store records for it.
_PLAIN: dict[str, tuple[Decision, str]] = {}


def plain_approval(channel: str) -> Decision:
    """``Decision.approve(channel=channel)``, made (and validated) once per channel."""
    known = _PLAIN.get(channel)
    if known is not None:
        return known[0]
    decision = Decision.approve(channel=channel)
    if len(_PLAIN) < 64:
        _PLAIN[channel] = (decision, json.dumps(decision.model_dump(mode="json"),
                                                ensure_ascii=False))
    return decision


def parse_answer(answer: Any, *, channel: str) -> Decision:
    """Normalise an answer that may have crossed a process boundary.

    Accepts what `to_decision` does, plus the serialised forms: a dict or JSON text in
    either shape (a dict with ``outcome`` is a `Decision`; anything else is read as ADK's
    `ToolConfirmation`, ``{"response": json}`` wrapper included). Anything unclear is a
    `ConfigurationError` naming what was wrong.
    """
    if isinstance(answer, (str, bytes)):
        answer = _load_json(answer)
    if isinstance(answer, dict):
        answer = (
            _decision_from_dict(answer) if "outcome" in answer
            else ToolConfirmation.parse(answer)
        )
    return to_decision(answer, channel=channel)


def to_decision(answer: Any, *, channel: str) -> Decision:
    """Normalise what a provider or callback returned; anything unclear is an error."""
    if isinstance(answer, Decision):
        if answer.channel is None:
            return answer.model_copy(update={"channel": channel})
        return answer
    if isinstance(answer, bool):
        return (
            plain_approval(channel)
            if answer
            else Decision.deny(f"denied by {channel}", channel=channel)
        )
    if isinstance(answer, ToolConfirmation):
        if answer.confirmed:
            if answer.payload is None:
                return plain_approval(channel)
            return Decision.approve(payload=answer.payload, channel=channel)
        return Decision.deny(answer.hint or f"denied by {channel}", channel=channel)
    raise ConfigurationError(
        f"confirmation provider {channel!r} returned {type(answer).__name__}; return True/False, "
        "a ToolConfirmation or a Decision (Decision.approve(), Decision.deny(reason), "
        "Decision.edit(args))"
    )


def _load_json(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"the answer is not valid JSON ({exc.msg} at position {exc.pos}); send "
            '{"confirmed": true} (ADK) or {"outcome": "approve"} (a Decision)'
        ) from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ConfigurationError(
            f"the answer could not be read ({type(exc).__name__}); send UTF-8 JSON like "
            '{"confirmed": true} (ADK) or {"outcome": "approve"} (a Decision)'
        ) from None


def _decision_from_dict(data: dict[str, Any]) -> Decision:
    try:
        return Decision.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(
            f"invalid Decision ({problems}); send outcome 'approve', 'deny' (with a reason) "
            "or 'edit' (with args)"
        ) from None
