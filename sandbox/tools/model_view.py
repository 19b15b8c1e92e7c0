"""What of a tool's result the model reads.

A bash result carries a layer report for code and logs (``containment``: every
protection of the run, ``privileges``, ``duration_ms``, ``confinement_missing``): some
900 characters a model cannot act on, spent on every call, telling it which user it runs
as. The result object keeps them (``result["containment"]`` works for code, and the
audit log and the store record them); the adapters that hand a result to a model (ADK,
MCP) pass `for_model(result)`: ADK's shape (``stdout``, ``stderr``, ``returncode``,
``error``) plus what a model can act on (``timed_out``, ``truncated`` with the counts
dropped, a refusal's ``rule`` and reason, ``killed_processes``, ``network`` denials).
"""

from __future__ import annotations

from typing import Any

#: Keys of a bash result for code and logs, left out of what the model reads.
FOR_CODE_ONLY = frozenset({"containment", "privileges", "duration_ms", "confinement_missing"})


def for_model(result: Any) -> Any:
    """``result`` as the model should read it: a bash result without its layer report;
    anything else unchanged."""
    if isinstance(result, dict) and "stdout" in result and isinstance(
            result.get("containment"), dict):
        return {k: v for k, v in result.items() if k not in FOR_CODE_ONLY}
    return result
