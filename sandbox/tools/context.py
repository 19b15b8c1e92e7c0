"""The objects a tool sees while it runs: `ToolContext`, `EventActions`, `ToolConfirmation`.

Shapes follow Google ADK (`google.adk.tools.ToolContext`, `ToolConfirmation`) so an ADK
user recognises them; nothing here depends on ADK.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, alias_generators

from sandbox.errors import ConfigurationError


class ToolConfirmation(BaseModel):
    """A human's answer to a confirmation request, as ADK shapes it.

    `confirmed` says whether the call may proceed; `payload` carries whatever data the
    tool asked the human for; `hint` is the text shown when confirmation was requested.
    Unknown fields are rejected: a confirmation with a typo in it (`confirm=True`) must
    never be read as a refusal or an approval by accident.
    """

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=alias_generators.to_camel,
        populate_by_name=True,
        frozen=True,
    )

    hint: str = ""
    confirmed: bool = False
    payload: Any | None = None

    @classmethod
    def parse(cls, data: Any) -> ToolConfirmation:
        """Build a confirmation from a dict, JSON text, or ADK's `{"response": json}` wrapper.

        Raises `ConfigurationError` naming every bad field, never a bare pydantic crash.
        """
        if isinstance(data, ToolConfirmation):
            return data
        try:
            if isinstance(data, (str, bytes)):
                data = json.loads(data)
            if isinstance(data, dict) and set(data) == {"response"} and isinstance(
                data["response"], str
            ):
                data = json.loads(data["response"])
            return cls.model_validate(data)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"ToolConfirmation is not valid JSON ({exc.msg} at position {exc.pos}); "
                'send an object like {"confirmed": true, "hint": "", "payload": null}'
            ) from None
        except (UnicodeDecodeError, RecursionError) as exc:
            # Bytes that are not UTF-8, or nesting deeper than the parser's stack: both
            # come from outside, so they are a bad answer, not a crash of the gate.
            raise ConfigurationError(
                f"ToolConfirmation could not be read ({type(exc).__name__}); send UTF-8 "
                'JSON like {"confirmed": true, "hint": "", "payload": null}'
            ) from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigurationError(
                f"invalid ToolConfirmation ({problems}); the accepted fields are "
                "'confirmed' (bool), 'hint' (str) and 'payload' (any JSON value)"
            ) from None


@dataclass
class EventActions:
    """What a tool asks the surrounding agent loop to do after it returns."""

    skip_summarization: bool | None = None
    state_delta: dict[str, Any] = field(default_factory=dict)
    transfer_to_agent: str | None = None
    escalate: bool | None = None
    requested_tool_confirmations: dict[str, ToolConfirmation] = field(default_factory=dict)


class _State(dict[str, Any]):
    """Session state that records every write into `EventActions.state_delta`."""

    def __init__(self, initial: MutableMapping[str, Any] | None, delta: dict[str, Any]) -> None:
        super().__init__(initial or {})
        self._delta = delta

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._delta[key] = value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


class ToolContext:
    """Per-call context handed to `BaseTool.run_async`.

    `tool_confirmation` is set only by the runner, after a human (or the configured
    provider) answered a confirmation request for exactly this call and arguments.
    """

    def __init__(
        self,
        *,
        function_call_id: str | None = None,
        tool_confirmation: ToolConfirmation | None = None,
        state: MutableMapping[str, Any] | None = None,
        actions: EventActions | None = None,
        session_id: str | None = None,
        gated: bool = False,
    ) -> None:
        self.function_call_id = function_call_id
        #: True when a `ToolRunner` has already run this call's gate (precheck,
        #: ``check_require_confirmation``, the human's answer): the tool must not ask again.
        self.gated = gated
        self.tool_confirmation = tool_confirmation
        # `actions` and `state` are made when first used: most calls never touch them.
        self._actions = actions
        self._initial_state = state
        self._state: _State | None = None
        self.session_id = session_id
        #: Set by a `ToolRunner` with a provider: ``await ask_network(host, port,
        #: command)`` asks whether a bash command may connect to a name its policy's
        #: allowed_domains does not list (sandbox/approval/network.py).
        self.ask_network: Callable[[str, int, str], Awaitable[bool]] | None = None

    @property
    def actions(self) -> EventActions:
        """What the tool asks the agent loop to do after it returns."""
        if self._actions is None:
            self._actions = EventActions()
        return self._actions

    @actions.setter
    def actions(self, actions: EventActions) -> None:
        self._actions = actions

    @property
    def state(self) -> dict[str, Any]:
        """Session state; every write is also recorded in ``actions.state_delta``."""
        if self._state is None:
            self._state = _State(self._initial_state, self.actions.state_delta)
        return self._state

    @state.setter
    def state(self, state: MutableMapping[str, Any]) -> None:
        self._initial_state = state
        self._state = None

    def take_confirmation_request(self) -> ToolConfirmation | None:
        """The confirmation the tool asked for during this run, taken off the context
        (the next run, after the answer, starts with none)."""
        if self._actions is None or not self.function_call_id:
            return None
        return self._actions.requested_tool_confirmations.pop(self.function_call_id, None)

    def request_confirmation(self, *, hint: str | None = None, payload: Any | None = None) -> None:
        """Ask a human to confirm this call; the tool is invoked again once they answer.

        Return from the tool right after calling this (ADK returns an
        `{"status": "awaiting_confirmation"}`-style dict); the runner discards that result
        and calls the tool again with `tool_confirmation` set.
        """
        if not self.function_call_id:
            # ADK's own words (google.adk ToolContext.request_confirmation).
            raise ValueError(
                "request_confirmation requires function_call_id. "
                "This method can only be used in a tool context."
            )
        self.actions.requested_tool_confirmations[self.function_call_id] = ToolConfirmation(
            hint=hint or "", payload=payload
        )

    def __repr__(self) -> str:
        return (
            f"ToolContext(function_call_id={self.function_call_id!r}, "
            f"tool_confirmation={self.tool_confirmation!r})"
        )


@dataclass
class OuterCall:
    """The agent loop a gated call runs inside (an ADK session): the session state the
    tool reads, and the actions it produces (state writes, ``skip_summarization``,
    ``transfer_to_agent``, ``escalate``), handed back to that loop when the call ends."""

    state: MutableMapping[str, Any] = field(default_factory=dict)
    actions: EventActions = field(default_factory=EventActions)


#: Set by an integration (`to_adk_tool`) around ``ToolRunner.call``/``resume``: the
#: `ToolContext` a tool runs with reads and writes through it.
OUTER_CALL: contextvars.ContextVar[OuterCall | None] = contextvars.ContextVar(
    "sandbox_outer_call", default=None)
