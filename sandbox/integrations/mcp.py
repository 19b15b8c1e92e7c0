"""An MCP server for gated tools: `execute_bash` and your own, approvals by elicitation.

Every ``tools/call`` goes through one `ToolRunner`, so the bash policy, the gate, the
single-use grants, the journal and the audit log are the library's own. When a call
needs a human, the question goes, in this order, to:

1. **the MCP client, by elicitation**, when it declared the elicitation capability: a
   yes/no form with a reason field. On a handshake-era connection (protocol
   2025-11-25 and older) the server sends ``elicitation/create`` while the call
   waits, bounded by ``approval_timeout``. On a 2026-07-28 connection the call returns
   an ``InputRequiredResult`` carrying the form and a signed ``request_state`` that
   names the stored request; the client's retry applies the answer to that request,
   once, for exactly the same arguments. Declined, cancelled or unanswered: not run.
2. **the fallback provider** (``provider=``; ``sandbox mcp --approvals queue|deny``),
   for clients that cannot elicit, or for every call with ``elicitation=False``.
3. Neither: the call is refused at once with an explanation. It never hangs.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from typing import Any, Literal

try:
    import mcp_types as mtypes
    from mcp.server.lowlevel.server import Server
    from mcp.server.session import ServerSession
    from mcp.server.stdio import stdio_server
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"sandbox.integrations.mcp needs the MCP SDK ({exc}); install it with "
        "pip install 'sandbox[mcp]'"
    ) from exc

from ..approval.display import command_of, escape_text
from ..approval.models import ConfirmationRequest, Decision
from ..approval.providers import ConfirmationProvider, OnTimeout
from ..approval.runner import ToolRunner
from ..approval.store import ApprovalStore, new_id, open_store
from ..audit import AuditLog
from ..errors import ConfigurationError, SandboxError, UnknownConfirmationError
from ..tools.base import BaseTool

__all__ = [
    "APPROVAL_FORM",
    "ElicitationProvider",
    "GatedToolServer",
    "build_server",
    "decision_from_elicitation",
    "serve_stdio",
]

#: The form a client shows for one approval: a yes/no and a reason the model will read.
APPROVAL_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this exact call?",
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "Why (the agent reads this when you deny)",
        },
    },
    "required": ["approve"],
}

ELICITATION_CHANNEL = "mcp-elicitation"
_INPUT_KEY = "sandbox-approval"
_MAX_STATE = 4096


def approval_message(request: ConfirmationRequest) -> str:
    """The text of the elicitation: tool, escaped arguments, the tool's hint."""
    # One line per fact, every control character escaped: a model-written argument can
    # neither redraw the prompt nor hide part of itself.
    command = command_of(request.args)
    if command is not None and set(request.args) == {"command"}:
        shown = f"command: {escape_text(command)}"
    else:
        shown = "arguments: " + escape_text(json.dumps(
            request.args, sort_keys=True, ensure_ascii=False, default=repr))
    lines = [f"Approve this call to {escape_text(request.tool)}?", shown]
    if request.hint:
        lines.append(escape_text(request.hint))
    if request.kind == "edit":
        lines.append("(these arguments were edited after the model proposed the call)")
    return "\n".join(lines)


def decision_from_elicitation(
    action: str, content: dict[str, Any] | None, *, channel: str = ELICITATION_CHANNEL
) -> Decision:
    """Turn an elicitation answer into a decision; anything but a clear yes is a no."""
    content = content or {}
    reason = content.get("reason")
    reason = reason.strip() if isinstance(reason, str) and reason.strip() else None
    if action == "accept":
        approve = content.get("approve")
        if approve is True:
            return Decision.approve(channel=channel)
        if approve is False:
            return Decision.deny(reason or "denied in the MCP client", channel=channel)
        return Decision.deny("the approval form came back without a yes/no answer",
                             channel=channel)
    if action == "decline":
        return Decision.deny(reason or "declined in the MCP client", channel=channel)
    return Decision.deny(reason or "the approval was cancelled in the MCP client",
                         channel=channel)


class ElicitationProvider:
    """Asks the MCP client's user with ``elicitation/create`` while the call waits.

    For handshake-era connections, which can carry a server request in the middle of
    a call. ``timeout`` bounds the wait; when it runs out the call is recorded as timed
    out and not run.
    """

    name = ELICITATION_CHANNEL

    def __init__(self, session: ServerSession, *, related_request_id: Any = None,
                 timeout: float | None = 120.0, on_timeout: OnTimeout = "deny") -> None:
        self.session = session
        self.related_request_id = related_request_id
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        result = await self.session.elicit_form(
            message=approval_message(request), requested_schema=APPROVAL_FORM,
            related_request_id=self.related_request_id,
        )
        return decision_from_elicitation(result.action, dict(result.content or {}))


class _NoChannel:
    """The call needs a human and there is no way to ask one: refuse, immediately."""

    name = "none"
    timeout: float | None = None
    on_timeout: OnTimeout = "deny"

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        raise _NoApprovalChannel(
            "this call needs human approval, but the MCP client does not support "
            "elicitation and the server has no other approval channel (start it with "
            "--approvals queue and answer on the web page or with `sandbox approvals`)"
        )


class _NoApprovalChannel(SandboxError):
    pass


_CHANNEL: contextvars.ContextVar[ConfirmationProvider] = contextvars.ContextVar(
    "sandbox_mcp_channel")
_NO_CHANNEL = _NoChannel()


class _PerCallProvider:
    """The runner's provider: whichever channel the current call can use."""

    @property
    def name(self) -> str:
        return _CHANNEL.get(_NO_CHANNEL).name

    @property
    def timeout(self) -> float | None:
        return _CHANNEL.get(_NO_CHANNEL).timeout

    @property
    def on_timeout(self) -> OnTimeout:
        return _CHANNEL.get(_NO_CHANNEL).on_timeout

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        return await _CHANNEL.get(_NO_CHANNEL).confirm(request)


class _StateSigner:
    """``request_state`` for 2026-07-28 retries: the stored request id, HMAC-signed.

    The key lives only in this process, so a state from before a restart (or made up by
    a client) is refused; the store still binds the request to its call id and digest.
    """

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def sign(self, confirmation_id: str, tool: str) -> str:
        body = base64.urlsafe_b64encode(
            json.dumps({"cid": confirmation_id, "tool": tool}).encode()).decode()
        return f"{body}.{self._mac(body)}"

    def open(self, state: str) -> tuple[str, str] | None:
        if len(state) > _MAX_STATE or state.count(".") != 1:
            return None
        body, mac = state.split(".")
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body.encode()))
            return str(data["cid"]), str(data["tool"])
        except (ValueError, KeyError, TypeError):
            return None

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()


class GatedToolServer:
    """The tools, the runners and the MCP request handlers (one per server process)."""

    def __init__(
        self,
        tools: Sequence[BaseTool],
        *,
        provider: ConfirmationProvider | None = None,
        elicitation: bool = True,
        approval_timeout: float = 120.0,
        store: ApprovalStore | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        if not tools:
            raise ConfigurationError("an MCP server needs at least one tool to serve")
        if not approval_timeout > 0:
            raise ConfigurationError(
                f"approval_timeout must be a positive number of seconds, got {approval_timeout!r}"
            )
        self.provider = provider
        self.elicitation = elicitation
        self.approval_timeout = approval_timeout
        self.store = store if store is not None else open_store()
        self.audit = audit if audit is not None else AuditLog()
        session = new_id("mcp")
        # One runner asks whichever channel the call has; the other leaves the request
        # pending for a 2026-07-28 client to answer on its retry. Both share the store,
        # so a grant, a journal entry or a decision is the same whichever applies it.
        # (_PerCallProvider's name/timeout/on_timeout are read-only views of the call's
        # channel; the Protocol declares them as plain attributes.)
        self.runner = ToolRunner(tools, provider=_PerCallProvider(),  # type: ignore[arg-type]
                                 store=self.store, audit=self.audit, session_id=session)
        self.parking = ToolRunner(tools, store=self.store, audit=self.audit,
                                  session_id=session, approval_ttl=approval_timeout)
        self._signer = _StateSigner()

    async def list_tools(self) -> list[mtypes.Tool]:
        return [
            mtypes.Tool(name=tool.name, description=tool.description or None,
                        input_schema=tool.parameters_schema())
            for tool in self.runner.tools.values()
        ]

    async def call(
        self, session: ServerSession, request_id: Any, params: mtypes.CallToolRequestParams
    ) -> mtypes.CallToolResult | mtypes.InputRequiredResult:
        name, args = params.name, dict(params.arguments or {})
        if name not in self.runner.tools:
            known = ", ".join(sorted(self.runner.tools))
            return _tool_result({"status": "error",
                                 "error": f"unknown tool {name!r}; this server has: {known}"})
        if params.request_state is not None:
            result = await self._retry(name, args, params)
        else:
            result = await self._first(session, request_id, name, args)
        if isinstance(result, mtypes.InputRequiredResult):
            return result
        return _tool_result(result)

    # -- the two eras --------------------------------------------------------------------

    async def _first(self, session: ServerSession, request_id: Any, name: str,
                     args: dict[str, Any]) -> dict[str, Any] | mtypes.InputRequiredResult:
        mode = self._channel_for(session)
        if mode == "input_required":
            result = await self.parking.call(name, args)
            return self._ask_on_retry(result)
        channel: ConfirmationProvider
        if mode == "elicit":
            channel = ElicitationProvider(session, related_request_id=request_id,
                                          timeout=self.approval_timeout)
        else:
            channel = self.provider if self.provider is not None else _NO_CHANNEL
        token = _CHANNEL.set(channel)
        try:
            result = await self.runner.call(name, args)
        finally:
            _CHANNEL.reset(token)
        if channel is _NO_CHANNEL and "_NoApprovalChannel" in str(result.get("error", "")):
            result = {**result, "status": "refused", "error": (
                "This call needs human approval, but this MCP client does not support "
                "elicitation and the server has no other approval channel (start it with "
                "--approvals queue, then answer on the web page or with `sandbox "
                "approvals`). The tool was not run.")}
        return result

    async def _retry(
        self, name: str, args: dict[str, Any], params: mtypes.CallToolRequestParams
    ) -> dict[str, Any] | mtypes.InputRequiredResult:
        opened = self._signer.open(params.request_state or "")
        if opened is None or opened[1] != name:
            return {"status": "rejected", "error": (
                "request_state is not one this server issued (or the server restarted); "
                "call the tool again without it to be asked afresh. Nothing was run.")}
        confirmation_id = opened[0]
        response = (params.input_responses or {}).get(_INPUT_KEY)
        if isinstance(response, mtypes.ElicitResult):
            decision = decision_from_elicitation(response.action, dict(response.content or {}))
        elif isinstance(response, dict) and isinstance(response.get("action"), str):
            decision = decision_from_elicitation(response["action"], response.get("content"))
        else:
            decision = Decision.deny("the client retried without answering the approval",
                                     channel=ELICITATION_CHANNEL)
        try:
            result = await self.parking.resume(confirmation_id, decision, args=args,
                                               channel=ELICITATION_CHANNEL)
        except UnknownConfirmationError as exc:
            return {"status": "rejected", "error": f"{exc}. Nothing was run."}
        return self._ask_on_retry(result)

    def _ask_on_retry(self, result: dict[str, Any]) -> dict[str, Any] | mtypes.InputRequiredResult:
        if result.get("status") != "awaiting_confirmation":
            return result
        confirmation_id = str(result["confirmation_id"])
        request = self.store.get_request(confirmation_id)
        form = mtypes.ElicitRequest(params=mtypes.ElicitRequestFormParams(
            message=approval_message(request), requested_schema=APPROVAL_FORM))
        return mtypes.InputRequiredResult(
            input_requests={_INPUT_KEY: form},
            request_state=self._signer.sign(confirmation_id, request.tool),
        )

    def _channel_for(self, session: ServerSession) -> Literal["elicit", "input_required",
                                                              "provider"]:
        if not self.elicitation or not _can_elicit_form(session.client_capabilities):
            return "provider"
        if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return "input_required"
        return "elicit" if session.can_send_request else "provider"


def _can_elicit_form(capabilities: mtypes.ClientCapabilities | None) -> bool:
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    # An empty elicitation capability predates modes and means form.
    return elicitation.form is not None or elicitation.url is None


def _tool_result(result: dict[str, Any]) -> mtypes.CallToolResult:
    text = json.dumps(result, ensure_ascii=False, default=repr)
    return mtypes.CallToolResult(
        content=[mtypes.TextContent(text=text)],
        structured_content=json.loads(text),
        is_error=bool(result.get("error")),
    )


def build_server(gate: GatedToolServer, *, name: str = "sandbox") -> Server[Any]:
    """The low-level MCP `Server` whose handlers are ``gate``'s."""
    from .. import __version__

    async def on_list_tools(ctx: Any, params: Any) -> mtypes.ListToolsResult:
        return mtypes.ListToolsResult(tools=await gate.list_tools())

    async def on_call_tool(ctx: Any, params: mtypes.CallToolRequestParams
                           ) -> mtypes.CallToolResult | mtypes.InputRequiredResult:
        return await gate.call(ctx.session, ctx.request_id, params)

    return Server(
        name, version=__version__,
        instructions=("Tools run behind a human approval gate: a call that needs approval "
                      "returns what the human decided, with their reason."),
        on_list_tools=on_list_tools, on_call_tool=on_call_tool,
    )


async def serve_stdio(gate: GatedToolServer, *, name: str = "sandbox") -> None:
    """Serve ``gate``'s tools over this process's stdin/stdout until the client leaves."""
    server = build_server(gate, name=name)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
