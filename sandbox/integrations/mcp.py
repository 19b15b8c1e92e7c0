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

While a call waits for a human, the server sends ``notifications/progress`` every
``progress_interval`` seconds when the client gave a ``progressToken``. The default
``approval_timeout`` is 45 seconds because the TypeScript SDK's client abandons a request
after 60 seconds (unless it resets its timeout on progress): the answer and the tool's
own run then fit inside the client's wait. A call whose client cancels it or goes away
while it waits is recorded as cancelled, in the store and the audit log.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio

try:
    import mcp_types as mtypes
    from mcp.server.lowlevel.server import Server
    from mcp.server.session import ServerSession
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError
    from mcp.shared.message import ServerMessageMetadata
    from mcp_types.jsonrpc import INVALID_PARAMS
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS, is_version_at_least
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"sandbox.integrations.mcp needs the MCP SDK ({exc}); install it with "
        "pip install 'sandbox[mcp]'"
    ) from exc

from sandbox.approval.display import command_of, escape_text
from sandbox.approval.explain import explain
from sandbox.approval.gate.results import Status
from sandbox.approval.models import ConfirmationRequest, Decision
from sandbox.approval.providers import ConfirmationProvider, OnTimeout
from sandbox.approval.runner import ToolRunner
from sandbox.approval.store import ApprovalStore, new_id, open_store
from sandbox.audit import AuditLog
from sandbox.errors import (
    ApprovalUnavailableError,
    ConfigurationError,
    SandboxError,
    UnknownConfirmationError,
)
from sandbox.text import is_text, lone_surrogate, not_text_message, printable, surrogates_as_text
from sandbox.tools.base import BaseTool
from sandbox.tools.model_view import for_model

__all__ = [
    "APPROVAL_FORM",
    "DEFAULT_APPROVAL_TIMEOUT",
    "ElicitationProvider",
    "GatedToolServer",
    "build_server",
    "decision_from_elicitation",
    "serve_http",
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

#: Seconds a call waits for a human. The TypeScript SDK's client gives up on a request
#: after 60 s unless it resets its timeout on progress; 45 s leaves the tool 15 s to run.
DEFAULT_APPROVAL_TIMEOUT = 45.0
#: Seconds between ``notifications/progress`` while a call waits for a human.
DEFAULT_PROGRESS_INTERVAL = 5.0
#: The protocol version that added ``mode`` to ``elicitation/create`` params.
_ELICITATION_MODES_SINCE = "2025-11-25"

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
    said = explain(request)
    lines = [f"Approve this call to {escape_text(request.tool)}?", shown,
             escape_text(said.what), "Why asked: " + escape_text(said.why)]
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
                 timeout: float | None = DEFAULT_APPROVAL_TIMEOUT,
                 on_timeout: OnTimeout = "deny") -> None:
        self.session = session
        self.related_request_id = related_request_id
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        message = approval_message(request)
        if is_version_at_least(self.session.protocol_version, _ELICITATION_MODES_SINCE):
            result = await self.session.elicit_form(
                message=message, requested_schema=APPROVAL_FORM,
                related_request_id=self.related_request_id,
            )
        else:
            # Before 2025-11-25 elicitation/create had no `mode`; a strict client of that
            # era rejects the unknown field, so it is left out (None is not serialised).
            params = mtypes.ElicitRequestFormParams.model_construct(
                message=message, requested_schema=APPROVAL_FORM, mode=None)
            result = await self.session.send_request(
                mtypes.ElicitRequest(params=params), mtypes.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=self.related_request_id))
        return decision_from_elicitation(result.action, dict(result.content or {}))


class _NoChannel:
    """The call needs a human and there is no way to ask one: refuse, immediately."""

    name = "none"
    timeout: float | None = None
    on_timeout: OnTimeout = "deny"

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        # Typed: the gate refuses the call at once ("status": "refused") with these words.
        raise ApprovalUnavailableError(
            "This call needs human approval, but this MCP client does not support "
            "elicitation and the server has no other approval channel (start it with "
            "--approvals queue, then answer on the web page or with `sandbox approvals`)")


_CHANNEL: contextvars.ContextVar[ConfirmationProvider] = contextvars.ContextVar(
    "sandbox_mcp_channel")
_NO_CHANNEL = _NoChannel()
#: While the current call waits for a human: called with (seconds waited, tool name).
_WAITING: contextvars.ContextVar[Callable[[float, str], Awaitable[None]] | None] = (
    contextvars.ContextVar("sandbox_mcp_waiting", default=None))


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
        channel = _CHANNEL.get(_NO_CHANNEL)
        report = _WAITING.get()
        if report is None or channel is _NO_CHANNEL:
            return await channel.confirm(request)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_tick, report, request.tool)
            try:
                decision = await channel.confirm(request)
            finally:
                tg.cancel_scope.cancel()
        return decision


async def _tick(report: Callable[[float, str], Awaitable[None]], tool: str) -> None:
    started = time.monotonic()
    while True:
        try:
            await report(time.monotonic() - started, tool)
        except Exception:  # a lost progress notification must not end the wait
            pass
        await anyio.sleep(_INTERVAL.get())


_INTERVAL: contextvars.ContextVar[float] = contextvars.ContextVar(
    "sandbox_mcp_progress_interval", default=DEFAULT_PROGRESS_INTERVAL)


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
        approval_timeout: float = DEFAULT_APPROVAL_TIMEOUT,
        store: ApprovalStore | None = None,
        audit: AuditLog | None = None,
        progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    ) -> None:
        if not tools:
            raise ConfigurationError("an MCP server needs at least one tool to serve")
        if not approval_timeout > 0:
            raise ConfigurationError(
                f"approval_timeout must be a positive number of seconds, got {approval_timeout!r}"
            )
        if not progress_interval > 0:
            raise ConfigurationError(
                f"progress_interval must be a positive number of seconds, got "
                f"{progress_interval!r}")
        self.progress_interval = progress_interval
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
            mtypes.Tool(name=tool.name, title=tool_title(tool),
                        description=tool_description(tool),
                        input_schema=tool.parameters_schema(),
                        output_schema=output_schema(tool),
                        annotations=tool_annotations(tool))
            for tool in self.runner.tools.values()
        ]

    async def call(
        self, session: ServerSession, request_id: Any, params: mtypes.CallToolRequestParams
    ) -> mtypes.CallToolResult | mtypes.InputRequiredResult:
        name, args = params.name, dict(params.arguments or {})
        if name not in self.runner.tools:
            known = ", ".join(sorted(self.runner.tools))
            # A protocol error, not a tool result (the spec's example for -32602).
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name!r}; this server has: {known}")
        if params.request_state is not None:
            result = await self._retry(name, args, params)
        else:
            result = await self._first(session, request_id, name, args,
                                       _progress_token(params) is not None)
        if isinstance(result, mtypes.InputRequiredResult):
            return result
        return _tool_result(for_model(result))

    # -- the two eras --------------------------------------------------------------------

    async def _first(self, session: ServerSession, request_id: Any, name: str,
                     args: dict[str, Any], progress: bool = False,
                     ) -> dict[str, Any] | mtypes.InputRequiredResult:
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
        timeout = channel.timeout

        async def report(waited: float, tool: str) -> None:
            left = f", {max(0.0, timeout - waited):.0f} s left" if timeout else ""
            await session.report_progress(
                waited, timeout, f"waiting for a human to approve {tool}{left}")

        call_id = new_id("call")
        tokens = (_CHANNEL.set(channel), _WAITING.set(report if progress else None),
                  _INTERVAL.set(self.progress_interval))
        try:
            result = await self.runner.call(name, args, call_id=call_id)
        except anyio.get_cancelled_exc_class():
            self._record_cancelled(call_id, name)  # synchronous: nothing to cancel it
            raise
        finally:
            _INTERVAL.reset(tokens[2])
            _WAITING.reset(tokens[1])
            _CHANNEL.reset(tokens[0])
        return result

    def _record_cancelled(self, call_id: str, tool: str) -> None:
        """The client cancelled the call or went away: a waiting request is cancelled."""
        reason = ("the MCP client cancelled the call or disconnected before an answer; "
                  "the tool was not run")
        for request in self.store.pending():
            if request.call_id != call_id:
                continue
            try:
                self.store.decide(request.id, status="cancelled", outcome="cancel",
                                  reason=reason, channel="mcp")
            except SandboxError:
                continue  # answered in the meantime: that answer stands
            except Exception:  # the cancellation itself must go on
                continue  # the request then expires as timed out: still never run
            self.audit.emit("tool.cancelled", tool=tool, call_id=call_id,
                            confirmation_id=request.id, reason=reason)

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
        if result.get("status") != Status.AWAITING:
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


def _progress_token(params: mtypes.CallToolRequestParams) -> Any:
    meta: Any = params.meta  # a TypedDict: the wire's _meta
    if not isinstance(meta, dict):
        return None
    return meta.get("progress_token", meta.get("progressToken"))


def _can_elicit_form(capabilities: mtypes.ClientCapabilities | None) -> bool:
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    # An empty elicitation capability predates modes and means form.
    return elicitation.form is not None or elicitation.url is None


def _tool_result(result: Any) -> mtypes.CallToolResult:
    # structuredContent must be an object (it is checked against the outputSchema).
    structured = result if isinstance(result, dict) else {"result": result}
    # A host reads text: a lone surrogate a tool returned is shown as \udcff.
    text = surrogates_as_text(json.dumps(structured, ensure_ascii=False, default=repr))
    return mtypes.CallToolResult(
        content=[mtypes.TextContent(text=text)],
        structured_content=json.loads(text),
        is_error=bool(structured.get("error")),
    )


# -- tool metadata -----------------------------------------------------------------------

#: Programs that write nothing with any option a probe below does not catch: a bash
#: policy allowing only these (and refusing ``>``) is read-only.
READ_ONLY_PROGRAMS = frozenset({
    "ls", "pwd", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "find",
    "file", "stat", "du", "df", "tree", "sort", "uniq", "cut", "tr", "diff", "cmp",
    "basename", "dirname", "realpath", "readlink", "echo", "printf", "true", "false",
    "date", "uname", "whoami", "id", "hostname", "which", "nl", "od", "xxd", "hexdump",
    "md5sum", "sha1sum", "sha256sum", "column", "comm", "fold", "rev", "seq", "test",
    "git status", "git log", "git diff", "git show", "git blame", "git grep", "git ls-files",
    "git ls-tree", "git rev-parse", "git rev-list", "git describe", "git shortlog",
    "git cat-file", "git branch --list", "git branch --show-current", "git tag --list",
    "git remote -v", "git config --get", "git config --list", "git reflog show",
    "git stash list", "git merge-base", "git name-rev", "git for-each-ref",
    "git count-objects",
})
#: Commands that write through an option of a program above; each one must be refused.
_WRITE_PROBES = (
    "sort -o f x", "sort -uo f x", "sort --output=f x",
    "tree -o f .",
    "find . -fprint f", "find . -fprintf f x", "find . -fls f", "find . -delete",
    "uniq x f", "git log --output=f", "git diff --output=f", "git show --output=f",
)


_WRITE_REDIRECTIONS = (">", ">>", ">|", "&>", "&>>", "2>", "<>")


def bash_policy_is_read_only(policy: Any) -> bool:
    """True when ``policy`` lets through only read-only programs and no write.

    Decided from the policy itself: either the OS must enforce it (``filesystem =
    "read-only"``, no ``writable_paths``, ``network = "none"``, ``confinement =
    "required"``), or every allowed prefix must name a program in `READ_ONLY_PROGRAMS`
    and every probe in ``_WRITE_PROBES`` (and every write redirection) be refused.
    """
    if (getattr(policy, "filesystem", None) == "read-only"
            and not getattr(policy, "writable_paths", ())
            and getattr(policy, "network", None) == "none"
            and getattr(policy, "confinement", None) == "required"):
        # The OS enforces it: a command that cannot get read-only Landlock and no
        # network is refused, so whatever program runs, it writes nothing outside.
        return True
    prefixes = tuple(getattr(policy, "allowed_command_prefixes", ("*",)))
    if not prefixes or "*" in prefixes:
        return False
    probes = list(_WRITE_PROBES)
    for prefix in prefixes:
        words = prefix.split()
        if not any(" ".join(words[:n]) in READ_ONLY_PROGRAMS for n in (1, 2, 3)):
            return False
        # A redirection writes a file whatever the program.
        probes += [f"{prefix} {op} f" for op in _WRITE_REDIRECTIONS]
    return not any(policy.check(probe).allowed for probe in probes)


def tool_annotations(tool: BaseTool) -> mtypes.ToolAnnotations:
    """What a host may assume about ``tool`` (MCP hints), derived, never guessed.

    A tool may declare its own (``tool.mcp_annotations = {"readOnlyHint": True, ...}``).
    ``execute_bash`` is read-only, idempotent and closed-world exactly when its policy
    is read-only (`bash_policy_is_read_only`); anything else gets the spec's cautious
    defaults, stated explicitly: may write, may destroy, not idempotent, open world.
    """
    declared = getattr(tool, "mcp_annotations", None)
    if isinstance(declared, mtypes.ToolAnnotations):
        return declared
    if isinstance(declared, dict):
        return mtypes.ToolAnnotations.model_validate(declared)
    policy = getattr(tool, "policy", None)
    read_only = policy is not None and hasattr(policy, "check") and \
        bash_policy_is_read_only(policy)
    return mtypes.ToolAnnotations(
        title=tool_title(tool), read_only_hint=read_only, destructive_hint=not read_only,
        idempotent_hint=read_only, open_world_hint=not read_only)


def tool_description(tool: BaseTool) -> str | None:
    """The tool's description, and, for a tool under a policy that switches protections
    off (`sandbox.policies.open_walls`: confinement "none", every program allowed, no
    human asked...), a warning saying which: the host and its user see what they serve."""
    text = tool.description or None
    policy = getattr(tool, "policy", None)
    if policy is None:
        return text
    from sandbox.policies import open_walls

    walls = open_walls(policy)
    if not walls:
        return text
    warning = "WARNING: this tool's policy switches protections off: " + "; ".join(walls) + "."
    return f"{text} {warning}" if text else warning


def tool_title(tool: BaseTool) -> str:
    """A human-readable name: ``tool.title`` if set, else from the name."""
    title = getattr(tool, "title", None)
    if isinstance(title, str) and title.strip():
        return title.strip()
    if getattr(tool, "policy", None) is not None and tool.name == "execute_bash":
        if getattr(tool.policy, "confinement", None) == "none":  # type: ignore[attr-defined]
            return "Run a bash command (NOT confined: the policy turns confinement off)"
        return "Run a bash command (sandboxed)"
    return tool.name.replace("_", " ").replace("-", " ").strip().capitalize() or tool.name


_GATE_PROPERTIES: dict[str, Any] = {
    "status": {"description": "Set when the gate decided instead of the tool: blocked, "
                              "denied, timed_out, refused, rejected, error, "
                              "awaiting_confirmation."},
    "error": {"description": "Why the call did not run, or failed; a denial carries the "
                             "human's reason."},
    "confirmation_id": {"description": "The stored approval request, while one waits."},
}

BASH_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "returncode": {"type": ["integer", "null"]},
        "timed_out": {"type": "boolean"},
        "truncated": {"type": "boolean"},
        "duration_ms": {"type": ["number", "null"]},
        **_GATE_PROPERTIES,
    },
    "additionalProperties": True,
}

TOOL_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The tool's result object (a non-object result is under \"result\"), "
                   "or the gate's answer when the tool did not run.",
    "properties": {"result": {"description": "A result that is not an object."},
                   **_GATE_PROPERTIES},
    "additionalProperties": True,
}


def output_schema(tool: BaseTool) -> dict[str, Any]:
    """The schema every ``structuredContent`` of ``tool`` matches, gate answers included."""
    declared = getattr(tool, "mcp_output_schema", None)
    if isinstance(declared, dict):
        return declared
    if getattr(tool, "policy", None) is not None and tool.name == "execute_bash":
        return BASH_OUTPUT_SCHEMA
    return TOOL_OUTPUT_SCHEMA


def build_server(gate: GatedToolServer, *, name: str = "sandbox") -> Server[Any]:
    """The low-level MCP `Server` whose handlers are ``gate``'s."""
    from sandbox import __version__

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
        send, receive = anyio.create_memory_object_stream[Any](0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_answer_unreadable, read_stream, send, write_stream)
            await server.run(receive, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()


async def _answer_unreadable(read_stream: Any, forward: Any, write_stream: Any) -> None:
    """Pass the client's messages on; answer a request the SDK could not read.

    The SDK hands a line it cannot validate to the session as an exception, which
    drops it: the client then waits for a reply that never comes. JSON with a lone
    surrogate (``"\\ud800"``) is such a line (pydantic refuses it, Python's json reads
    it). When the line still names a request id, it gets an answer: a tool call a
    refusal naming where the text is broken, anything else a JSON-RPC error.
    """
    async with forward:
        async for item in read_stream:
            if isinstance(item, Exception):
                reply = _reply_to_unreadable(item)
                if reply is not None:
                    await write_stream.send(reply)
                    continue
            await forward.send(item)


def _reply_to_unreadable(exc: Exception) -> Any:
    from mcp.shared.message import SessionMessage

    errors = getattr(exc, "errors", None)
    raw = errors()[0].get("input") if callable(errors) and errors() else None
    if not isinstance(raw, (str, bytes)):
        return None
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(message, dict) or "id" not in message or "method" not in message:
        return None
    rid = message["id"]
    if not isinstance(rid, (int, str)) or (isinstance(rid, str) and not is_text(rid)):
        return None
    found = lone_surrogate(message.get("params"), "params")
    why = (not_text_message("this request", found) if found
           else f"this request could not be read: {printable(str(exc)).splitlines()[0]}")
    if message.get("method") == "tools/call" and found:
        result = _tool_result({"status": Status.ERROR.value, "error": why})
        body = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        return SessionMessage(mtypes.JSONRPCResponse(jsonrpc="2.0", id=rid, result=body))
    return SessionMessage(mtypes.JSONRPCError(
        jsonrpc="2.0", id=rid, error=mtypes.ErrorData(code=INVALID_PARAMS, message=why)))


class BearerTokenAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer TOKEN``."""

    def __init__(self, app: Any, token: str) -> None:
        if len(token) < 16:
            raise ConfigurationError("the bearer token must be at least 16 characters")
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps({"error": "missing or wrong bearer token: send the header "
                                            "Authorization: Bearer <token printed by "
                                            "sandbox mcp --http>"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="sandbox"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def serve_http(gate: GatedToolServer, *, host: str, port: int, token: str,
                     name: str = "sandbox",
                     ready: Callable[[str], None] | None = None) -> None:
    """Serve ``gate``'s tools over Streamable HTTP at ``http://host:port/mcp``.

    Every request needs ``Authorization: Bearer token``. ``ready`` is called with the
    endpoint's URL once the socket listens (port 0 picks a free port).
    """
    import socket

    import uvicorn

    server = build_server(gate, name=name)
    app = BearerTokenAuth(server.streamable_http_app(host=host), token)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    if ready is not None:
        ready(f"http://{shown}:{bound}/mcp")
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()
