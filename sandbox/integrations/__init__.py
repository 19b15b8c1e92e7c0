"""Bridges to agent frameworks and protocols; each imports its optional dependency itself.

- `sandbox.integrations.adk`: Google ADK (``pip install 'sandbox[adk]'``): a plugin that
  answers ADK's tool confirmations through any `ConfirmationProvider`, and adapters that
  make our tools ADK tools.
- `sandbox.integrations.mcp`: an MCP server over stdio (``pip install 'sandbox[mcp]'``)
  whose approvals use MCP elicitation.
- `sandbox.integrations.pydantic_ai`: Pydantic AI (``pip install 'sandbox[pydantic-ai]'``):
  `SandboxApprovalToolset`, a `WrapperToolset` whose approvals go through the gate and
  Pydantic AI's own deferred flow, and `toolset(runner)` for this library's tools.
- `sandbox.integrations.common`: what every framework adapter needs from the gate
  (`run_call`, `answer_call`, `GateOutcome`, `session_key`); no optional dependency.

Nothing is imported here, so ``import sandbox`` never pulls in an optional dependency.
"""
