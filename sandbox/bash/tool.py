"""`ExecuteBashTool`: ADK's bash tool, with a policy that parses bash and a process layer
that nothing escapes.

Validation order is ADK's: command required → policy → confirmation → run. A command
the policy blocks is refused before anyone is asked, so a human never sees (and can
never approve) a command that would not be allowed to run.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

from sandbox.bash import display as _display  # noqa: F401 - registers the "bash" highlighter
from sandbox.bash.config import ConfinementRequest
from sandbox.bash.config import resolve_patterns as resolve_protected
from sandbox.bash.network.allowlist import Allowlist
from sandbox.bash.policy.evaluate import BashToolPolicy, PolicyDecision
from sandbox.bash.run import warm
from sandbox.bash.run.checks import _unprivileged_identity
from sandbox.bash.run.gitguard import guard_readable_paths, guarded_env
from sandbox.bash.run.process import (
    Limits,
    NetworkAccess,
    ProcessResult,
    run_bash,
)
from sandbox.bash.syntax.parse import ParseOffLoop, escape_controls, loop_budget
from sandbox.errors import ConfigurationError, SandboxError
from sandbox.tools.base import BaseTool, ToolArgumentError
from sandbox.tools.context import ToolContext

# A command is decided on the event loop only when that is cheap: a decision already
# made, or a command of at most this many characters that needs no parse worker and
# that tree-sitter parses within _LOOP_PARSE_SECONDS (parse.loop_budget). Anything else
# is decided in a worker thread, where a parse hands the GIL back every ~60 µs: a
# crafted 4,096-byte command kept tree-sitter busy for seconds, and the walk and rules
# after the parse are linear or worse in the command (at 512 characters they take a
# few ms at worst; at 4,096, 2,048 `a;` took 60-150 ms).
_CHECK_ON_LOOP_CHARS = 512
_LOOP_PARSE_SECONDS = 0.01
T = TypeVar("T")


class ExecuteBashTool(BaseTool):
    """Run one bash command in ``workspace`` under ``policy``.

    The result dict has ADK's keys ``stdout``, ``stderr``, ``returncode`` and, when the
    command was blocked, rejected, timed out or failed, ``error``; plus ``timed_out``,
    ``truncated`` (with ``stdout_bytes_dropped``/``stderr_bytes_dropped``),
    ``duration_ms`` and ``containment`` (the mechanism that killed the process tree).
    """

    def __init__(
        self,
        *,
        workspace: pathlib.Path | str | None = None,
        policy: BashToolPolicy | None = None,
        name: str = "execute_bash",
    ) -> None:
        workspace = pathlib.Path.cwd() if workspace is None else pathlib.Path(workspace)
        if not workspace.is_dir():
            raise ConfigurationError(
                f"ExecuteBashTool workspace {str(workspace)!r} is not an existing directory; "
                "create it first or pass workspace=<an existing directory>"
            )
        policy = policy if policy is not None else BashToolPolicy()
        if not isinstance(policy, BashToolPolicy):
            raise ConfigurationError(
                f"policy must be a sandbox BashToolPolicy, got {type(policy).__name__}; "
                "load one with BashToolPolicy.from_toml(path)"
            )
        allowed = (
            "any command"
            if "*" in policy.allowed_command_prefixes
            else "commands starting with: " + ", ".join(policy.allowed_command_prefixes)
        )
        blocked = (
            f" Operators not allowed: {' '.join(policy.blocked_operators)}."
            if policy.blocked_operators
            else ""
        )
        super().__init__(
            name=name,
            description=(
                "Executes a bash command with the working directory set to the workspace. "
                f"Allowed: {allowed}.{blocked} Commands may require user confirmation. "
                "Returns stdout, stderr and returncode; a refused command returns 'error' "
                "with the reason."
            ),
        )
        self.workspace = workspace.resolve()
        self.policy = policy
        self._identity: tuple[int, int] = (os.geteuid(), os.getegid())
        self._drop = self._decide_privileges(policy.drop_privileges)
        # One call asks the policy up to four times (refusal, confirmation, what the human
        # sees, rule matching): each is a view of policy.evaluate, kept in the policy's LRU.
        self._confinement = ConfinementRequest(
            filesystem=policy.filesystem,
            # the git guard (gitguard.py) is first on every command's PATH
            readable_paths=(*policy.readable_paths, *guard_readable_paths()),
            writable_paths=policy.writable_paths,
            network=policy.network,
            mode=policy.confinement,
            protected_paths=_with_agent_code(resolve_protected(policy.protected_paths),
                                             self.workspace),
        )
        self._allowlist = Allowlist.parse(policy.allowed_domains)
        self._limits = Limits(
            max_memory_bytes=policy.max_memory_bytes,
            max_file_size_bytes=policy.max_file_size_bytes,
            max_child_processes=policy.max_child_processes,
        )
        # The spawner and the probes, started now (once per process) so that the first
        # command does not wait for them (sandbox/bash/run/warm.py).
        warm.ahead(confined=policy.confinement != "none")

    def _decide_privileges(self, wanted: bool | None) -> bool:
        """Whether commands run as an unprivileged user.

        ``True`` requires it (and fails here, with the fix, when the workspace does not
        allow it); ``False`` keeps the agent's identity; ``None`` drops root when the
        workspace allows it and otherwise keeps root, saying so in every result
        (``"privileges"``) and in `sandbox doctor`.
        """
        if wanted is False or os.geteuid() != 0:
            return False
        try:
            self._identity = _unprivileged_identity(str(self.workspace))
        except ConfigurationError:
            if wanted:
                raise
            return False
        return True

    # -- declaration -----------------------------------------------------------------

    def parameters_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command to execute."}
            },
            "required": ["command"],
        }

    # -- the gate's hooks ------------------------------------------------------------

    def validate_args(self, args: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(args, dict):
            raise ToolArgumentError(
                f"arguments to {self.name} must be a JSON object, got {type(args).__name__}"
            )
        extra = sorted(set(args) - {"command"})
        if extra:  # named first: {"cmd": ...} is a misspelt key, not a missing command
            raise ToolArgumentError(
                f"unexpected argument(s) {', '.join(map(repr, extra))}; {self.name} takes "
                "only 'command'"
            )
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolArgumentError("Command is required.")
        return args

    async def _check(self, command: str) -> PolicyDecision:
        return (await _off_the_loop_if_slow(self.policy.evaluate, command)).policy_decision

    async def precheck(self, args: dict[str, Any]) -> dict[str, Any] | None:
        decision = await self._check(args["command"])
        if decision.allowed:
            return None
        return {"error": f"Command blocked: {decision.reason}", "rule": decision.rule,
                "stdout": "", "stderr": "", "returncode": None, "timed_out": False,
                "truncated": False}

    async def confirmation_needed(self, args: dict[str, Any]) -> str | None:
        command = args["command"]
        evaluation = await _off_the_loop_if_slow(self.policy.evaluate, command)
        if not evaluation.needs_confirmation:
            return None
        return f"Please approve or reject the bash command: {escape_controls(command)}"

    def describe(self, args: dict[str, Any]) -> dict[str, Any]:
        decision = self.policy.evaluate(args["command"]).policy_decision
        return {
            "policy": {"allowed": decision.allowed, "reason": decision.reason,
                       "rule": decision.rule},
            "commands": [list(argv) for argv in decision.commands],
            "workspace": str(self.workspace),
        }

    def render_args(self, args: dict[str, Any]) -> str | None:
        """The command line itself, as a human reads it (channels escape it)."""
        command = args.get("command")
        return command if isinstance(command, str) else None

    def rule_subjects(self, args: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        return self.policy.evaluate(args.get("command", "")).subjects

    # -- running ---------------------------------------------------------------------

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        try:
            args = self.validate_args(args)
        except ToolArgumentError as exc:
            return {"error": exc.message}
        command: str = args["command"]
        refused = await self.precheck(args)
        if refused is not None:
            return refused
        confirmation = tool_context.tool_confirmation
        if not getattr(tool_context, "gated", False) and confirmation is None:
            hint = await self.confirmation_needed(args)
            if hint is not None:
                tool_context.request_confirmation(hint=hint)
                tool_context.actions.skip_summarization = True
                return {"error": "This tool call requires confirmation, please approve or reject."}
        if confirmation is not None and not confirmation.confirmed:
            return {"error": "This tool call is rejected."}
        return await self._run(command, self._network_access(tool_context, command))

    def _network_access(self, tool_context: ToolContext | None, command: str = ""
                        ) -> NetworkAccess | None:  # fmt: skip
        """network="allowlist": the allowlist, and a way to ask about an unlisted name
        when the policy says so and the runner offers one (ToolContext.ask_network)."""
        if self.policy.network != "allowlist":
            return None
        asker = getattr(tool_context, "ask_network", None)
        if not self.policy.ask_for_unlisted_domains or asker is None:
            return NetworkAccess(self._allowlist)

        async def ask(host: str, port: int) -> bool:
            return bool(await asker(host, port, command))

        return NetworkAccess(self._allowlist, ask=ask)

    async def _run(self, command: str, network: NetworkAccess | None = None) -> dict[str, Any]:
        env = dict(self.policy.env)
        for name in self.policy.inherit_env:
            if name in os.environ:
                env[name] = os.environ[name]
        env = guarded_env(env)  # git runs no program a repository's config names
        try:
            outcome = await run_bash(
                command,
                cwd=self.workspace,
                env=env,
                timeout=self.policy.timeout_seconds,
                limits=self._limits,
                max_output_bytes=self.policy.max_output_bytes,
                drop_privileges=self._drop,
                rlimits_via=self.policy.rlimits_via,
                confinement=self._confinement,
                network=network if network is not None else self._network_access(None),
            )
        except (SandboxError, OSError, RuntimeError) as exc:
            # A result, never an exception out of the tool (which ends the agent's run):
            # a set-up the kernel refused (EAGAIN while another command holds every
            # process of this uid), a spawner that died, a thread that could not start.
            return {"error": f"Execution failed: {exc}", "stdout": "", "stderr": "",
                    "returncode": None, "timed_out": False, "truncated": False}
        result: dict[str, Any] = {
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "returncode": outcome.returncode,
            "timed_out": outcome.timed_out,
            "truncated": outcome.truncated,
            "duration_ms": round(outcome.duration_ms, 3),
            "containment": _containment_report(outcome, self._limits),
            "privileges": f"uid {self._identity[0]}" if self._drop else (
                "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"),
        }
        if outcome.network is not None:
            result["network"] = outcome.network
        missing = (outcome.protections or {}).get("missing")
        if missing:
            result["confinement_missing"] = missing
        if outcome.truncated:
            result["stdout_bytes_dropped"] = outcome.stdout_bytes_dropped
            result["stderr_bytes_dropped"] = outcome.stderr_bytes_dropped
        if outcome.killed_processes:
            result["killed_processes"] = outcome.killed_processes
        if outcome.timed_out:
            result["error"] = (
                f"Command timed out after {self.policy.timeout_seconds:g} seconds; the whole "
                "process tree was killed. Output produced before that is included."
            )
        return result


async def _off_the_loop_if_slow(decide: Callable[[str], T], command: str) -> T:
    """``decide(command)`` here when its parse fits the loop's budget, else in a thread."""
    try:
        with loop_budget(_LOOP_PARSE_SECONDS, _CHECK_ON_LOOP_CHARS):
            return decide(command)
    except ParseOffLoop:
        return await anyio.to_thread.run_sync(decide, command)


def _containment_report(outcome: ProcessResult, limits: Limits) -> dict[str, str]:
    """Every protection of one run, "active: ..." or "inactive: <reason>"."""
    report = {"process-tree": f"active: {outcome.containment}" + (
        " (misses setsid escapes)" if outcome.containment == "killpg" else "")}
    for layer, state in (outcome.protections or {}).items():
        if layer != "missing":
            report[layer] = state
    rlimits = [name for name, value in (("RLIMIT_AS", limits.max_memory_bytes),
               ("RLIMIT_FSIZE", limits.max_file_size_bytes),
               ("RLIMIT_NPROC", limits.max_child_processes)) if value is not None]  # fmt: skip
    report["rlimits"] = f"active: {', '.join(rlimits)}" if rlimits else "inactive: none set"
    if outcome.nproc_enforcement is not None:
        state = "inactive" if "ineffective" in outcome.nproc_enforcement else "active"
        report["max-child-processes"] = f"{state}: {outcome.nproc_enforcement}"
    return report


def _with_agent_code(patterns: tuple[str, ...], workspace: pathlib.Path) -> tuple[str, ...]:
    """`patterns` and, anchored, every directory of the agent's own code that lies inside
    the workspace: this package (an editable install of the repository the agent works
    on) and the interpreter's environment and site-packages (a ``./.venv``). A command
    that rewrote them would run its code in the agent, the spawner, the parse worker or
    the proxy's forwarder when they next import it, outside the confinement. Not when
    the policy protects nothing (``protected_paths=()``: that wall is switched off, and
    `open_walls` says so), nor a directory that is the workspace itself."""
    if not patterns:
        return patterns
    import site
    import sys

    candidates = {pathlib.Path(__file__).resolve().parents[1], pathlib.Path(sys.prefix)}
    with contextlib.suppress(AttributeError, OSError):
        candidates.update(pathlib.Path(p) for p in site.getsitepackages())
    extra: list[str] = []
    for candidate in sorted(candidates):
        try:
            inside = candidate.resolve().relative_to(workspace)
        except (OSError, ValueError):
            continue
        entry = "/" + inside.as_posix()
        if not inside.parts or entry in patterns or entry in extra:
            continue
        try:
            resolve_protected((entry,))  # a name no pattern can spell (wildcards) is left
        except ConfigurationError:
            continue
        extra.append(entry)
    return (*patterns, *extra)

