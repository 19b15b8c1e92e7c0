"""Bridges to agent frameworks and protocols; each imports its optional dependency itself.

- `sandbox.integrations.adk`: Google ADK (``pip install 'sandbox[adk]'``): a plugin that
  answers ADK's tool confirmations through any `ConfirmationProvider`, and adapters that
  make our tools ADK tools.
- `sandbox.integrations.mcp`: an MCP server over stdio (``pip install 'sandbox[mcp]'``)
  whose approvals use MCP elicitation.

Nothing is imported here, so ``import sandbox`` never pulls in an optional dependency.
"""
