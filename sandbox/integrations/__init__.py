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
- `sandbox.integrations.openai_agents`: the OpenAI Agents SDK (``pip install
  'sandbox[openai-agents]'``): our tools as SDK function tools and `ExecuteBashTool` as
  its ``ShellTool``, with ``RunState`` approvals recorded in the gate (`RunStateBridge`).
- `sandbox.integrations.langgraph`: LangGraph and langchain agents (``pip install
  'sandbox[langgraph]'``): langchain's human-in-the-loop middleware with every reviewed
  call behind a `ToolRunner`, and our tools as langchain tools.

Nothing is imported here, so ``import sandbox`` never pulls in an optional dependency.
"""
