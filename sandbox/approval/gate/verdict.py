"""`CallVerdict`: what the gate would do with a call, seen without recording anything.

`ToolRunner.would_ask` returns one. Agent frameworks ask it before they run a tool
(OpenAI Agents' ``needs_approval``, a LangGraph middleware deciding whether to
``interrupt()``, a Pydantic AI toolset deciding whether to raise ``ApprovalRequired``):
their hook must not run the tool and must not leave a record behind, yet must agree with
what `ToolRunner.call` will do, remembered rules and the call id's history included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: - ``run``: no human is needed (no confirmation asked, or remembered rules approve it);
#: - ``ask``: a human must confirm first (``hint`` is the question);
#: - ``pending``: this call id already waits for a human (``confirmation_id``; ``answer``
#:   is the answer another channel recorded and nobody has applied yet, if any);
#: - ``refuse``: the gate ends the call without running it and without asking (invalid
#:   arguments, a hard refusal such as a blocked bash command, a call id already used for
#:   other arguments), ``reason`` says why;
#: - ``replay``: the call id was used before and is decided or done; `ToolRunner.call`
#:   answers it from its record (``state``) and never runs it again.
Action = Literal["run", "ask", "pending", "refuse", "replay"]


@dataclass(frozen=True, slots=True)
class CallVerdict:
    """What `ToolRunner.call` would do with a call now. ``bool(verdict)`` and
    ``verdict.asks`` are true when a human would be (or already is being) asked.

    A tool that asks from inside its own run (``tool_context.request_confirmation``)
    cannot be foreseen without running it: for such a tool the verdict is ``run``.
    """

    action: Action
    hint: str | None = None
    reason: str | None = None
    confirmation_id: str | None = None
    #: The remembered rules that would approve the call (``run``).
    rules: tuple[str, ...] = ()
    #: The call's recorded state (``replay``), or the gate's (``refuse`` by a check).
    state: str | None = None
    #: ``pending``: an answer recorded by another channel (web page, CLI), not applied yet.
    answer: dict[str, Any] | None = None

    @property
    def asks(self) -> bool:
        return self.action in ("ask", "pending")

    def __bool__(self) -> bool:
        return self.asks
