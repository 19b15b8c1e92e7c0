"""`sandbox check`, `sandbox run` and `sandbox doctor`: the bash sandbox from a shell."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.errors import ConfigurationError, PolicyFileError

# Exit statuses of `sandbox run` when the command itself did not decide one; chosen to
# match what shells and timeout(1) use, so scripts can tell the cases apart.
EXIT_BLOCKED = 126  # "found but cannot execute": the policy refused it
EXIT_NOT_APPROVED = 125  # denied, or the approval failed or timed out
EXIT_TIMED_OUT = 124  # as timeout(1)

if TYPE_CHECKING:
    import anyio
    import anyio.abc


def register(sub: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    check = sub.add_parser(
        "check", help="explain whether a policy allows a bash command",
        description="Decide a command under a policy, on the bash parse tree, and explain "
                    "the decision: rule, simple command, token. Exit 0 allowed, 1 blocked.",
        epilog="examples:\n"
               "  sandbox check --policy readonly -- 'ls -la | wc -l'\n"
               "  sandbox check --policy git-readonly --json -- git log -p",
        formatter_class=fmt,
    )
    _policy_arg(check)
    check.add_argument("--json", action="store_true", help="print the decision as JSON")
    check.add_argument("command", nargs=argparse.REMAINDER,
                       help="the command (after --); several words are joined by spaces")
    check.set_defaults(handler=_check)

    run = sub.add_parser(
        "run", help="run a bash command in the sandbox, asking at the terminal",
        description="Check the command against the policy, ask for approval at the terminal "
                    "(unless the policy lists it as needing none), run it under the "
                    "policy's limits, print the result and exit with the command's status "
                    f"({EXIT_BLOCKED} blocked, {EXIT_NOT_APPROVED} not approved, "
                    f"{EXIT_TIMED_OUT} timed out).",
        epilog="examples:\n"
               "  sandbox run --policy readonly -- ls -la\n"
               "  sandbox run --policy python-dev --workspace . -- pytest -q\n"
               "  sandbox run --approve deny --json -- rm -rf build",
        formatter_class=fmt,
    )
    _policy_arg(run)
    run.add_argument("--workspace", default=".", help="working directory (default: .)")
    run.add_argument("--approve", choices=("console", "auto", "deny"), default="console",
                     help="who approves: the terminal (default), nobody (auto-approve), "
                          "or refuse everything that needs approval")
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command (after --)")
    run.set_defaults(handler=_run)

    doctor = sub.add_parser(
        "doctor", help="print the protections active on this machine",
        description="Detect what this machine offers (cgroups, PID namespaces, subreaper, "
                    "rlimits as root, privilege drop) and which mechanism the sandbox "
                    "uses here, with what is not guaranteed.",
        epilog="examples:\n  sandbox doctor\n  sandbox doctor --json",
        formatter_class=fmt,
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--policy", metavar="NAME|FILE", action="append", default=[],
                        help="also report what this policy switches off (repeatable); the "
                             "shipped ones and those of $SANDBOX_POLICY_PATH always are")
    doctor.set_defaults(handler=_doctor)


def _policy_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", metavar="NAME|FILE",
                        help="a policy's name (shipped: readonly, git-readonly, python-dev; "
                             "or NAME.toml in a $SANDBOX_POLICY_PATH directory; never a file "
                             "here) or a policy file's path (./mine.toml) (default: allow "
                             "every command, 30 s timeout)")


def _load_policy(reference: str | None, verb: str) -> Any:
    """The policy ``--policy`` names; what it switches off is printed on stderr."""
    from sandbox import policies
    from sandbox.bash import BashToolPolicy

    if reference is None:
        policy = BashToolPolicy()
    else:
        policy = BashToolPolicy.from_toml(policies.resolve(reference))
    warning = policies.banner(reference, policy)
    if warning:
        print(f"sandbox {verb}: " + warning.replace("\n", f"\nsandbox {verb}: "),
              file=sys.stderr, flush=True)
    return policy


def _has_terminal() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        return False
    return True


NO_TERMINAL = ("this command needs approval and there is no terminal to ask on; run "
               "`sandbox run` in a terminal, or choose who approves: --approve auto (run "
               "it without asking) or --approve deny (refuse whatever needs approval). "
               "The command was not run.")


def _command(args: argparse.Namespace, verb: str) -> str | None:
    """The command after ``--``; None (after saying how to give one) when there is none."""
    words = list(args.command)
    if words and words[0] == "--":
        words = words[1:]
    if not words:
        print(f"sandbox {verb}: give the command after --, e.g. sandbox {verb} -- ls -la",
              file=sys.stderr)
        return None
    return " ".join(words)


def _check(args: argparse.Namespace) -> int:
    command = _command(args, "check")
    if command is None:
        return 2
    try:
        policy = _load_policy(args.policy, "check")
    except (PolicyFileError, ConfigurationError, OSError) as exc:
        print(f"sandbox check: {exc}", file=sys.stderr)
        return 2
    evaluation = policy.evaluate(command)
    decision = evaluation.policy_decision
    if args.json:
        print(json.dumps({
            "command": command, "allowed": decision.allowed, "rule": decision.rule,
            "simple_command": decision.command, "token": decision.token,
            "reason": decision.reason, "commands": [list(c) for c in decision.commands],
            "needs_confirmation": evaluation.needs_confirmation if decision.allowed
            else None,
        }))
    else:
        print(("ALLOWED" if decision.allowed else "BLOCKED") + f": {decision.reason}")
        if not decision.allowed:
            if decision.command:
                print(f"  simple command: {decision.command}")
            if decision.token:
                print(f"  token:          {decision.token}")
        elif evaluation.needs_confirmation:
            print("  needs a human's confirmation before it runs")
    return 0 if decision.allowed else 1


def _run(args: argparse.Namespace) -> int:
    command = _command(args, "run")
    if command is None:
        return 2
    from sandbox.bash.run import warm

    # The spawner starts now, in a process of its own, while this one imports the policy
    # and the gate: the command runs through it (sandbox/bash/run/warm.py).
    warm.spawner_ahead()
    try:
        policy = _load_policy(args.policy, "run")
        from sandbox.bash import ExecuteBashTool

        tool = ExecuteBashTool(workspace=Path(args.workspace), policy=policy)
        provider = _provider(args.approve)
    except (PolicyFileError, ConfigurationError, OSError) as exc:
        print(f"sandbox run: {exc}", file=sys.stderr)
        return 2
    from sandbox.approval import ToolRunner
    from sandbox.bash.policy.decision import Decision

    if args.approve == "console" and \
            policy.evaluate(command).decision is Decision.CONFIRM and not _has_terminal():
        if args.json:
            print(json.dumps({"status": "error", "error": NO_TERMINAL}))
        else:
            print(f"sandbox run: {NO_TERMINAL}", file=sys.stderr)
        return EXIT_NOT_APPROVED
    asking = _Asking(provider) if args.approve == "console" else None
    runner = ToolRunner(tools=[tool], provider=asking or provider)
    problem = _argument_problem(runner, command)
    if problem is not None:
        # Bad input is a usage error (2), not "not approved" (125): nobody was asked.
        if args.json:
            print(json.dumps({"status": "error", "error": problem}))
        else:
            print(f"sandbox run: {problem}", file=sys.stderr)
        return 2
    import anyio

    from sandbox.bash.run import reservations

    reservations.reserve_ahead = False  # one command, then this process exits
    result = anyio.run(_call_with_status, runner, command, asking)
    if "signal" in result:
        # Ctrl-C, SIGTERM, SIGHUP: the command's tree is already killed.
        stopped = {"status": "interrupted", "signal": result["signal"],
                   "error": f"stopped by {result['signal']} before the command finished; "
                            "its whole process tree was killed"}
        if args.json:
            print(json.dumps(stopped))
        else:
            print(f"sandbox run: {stopped['error']}", file=sys.stderr)
        return 128 + int(result["signal_number"])
    if args.json:
        print(json.dumps(result, default=str))
    else:
        if result.get("stdout"):
            sys.stdout.write(result["stdout"])
            sys.stdout.flush()
        if result.get("stderr"):
            sys.stderr.write(result["stderr"])
        if result.get("error"):
            print(f"sandbox run: {result['error']}", file=sys.stderr)
        if result.get("truncated"):
            print(f"sandbox run: output truncated ({result.get('stdout_bytes_dropped', 0)} "
                  f"stdout and {result.get('stderr_bytes_dropped', 0)} stderr bytes dropped)",
                  file=sys.stderr)
    return _exit_status(result)


def _argument_problem(runner: Any, command: str) -> str | None:
    """Why the runner would refuse ``command`` as an argument (too large, not text)."""
    from sandbox.approval.models import canonical_json
    from sandbox.text import lone_surrogate, not_text_message

    found = lone_surrogate(command, "the command")
    if found:
        return not_text_message("the command", found)
    size = len(canonical_json({"command": command}))
    if size > runner.max_args_bytes:
        return (f"the command is {size:,} characters of JSON, over the runner's limit of "
                f"{runner.max_args_bytes:,}; put long input in a file in the workspace and "
                "name the file in the command")
    return None


def _provider(kind: str) -> Any:
    from sandbox.approval import AutoApprove, AutoDeny

    if kind == "auto":
        return AutoApprove()
    if kind == "deny":
        return AutoDeny("refused by sandbox run --approve deny")
    from sandbox.approval.channels.console import ConsoleConfirmationProvider

    return ConsoleConfirmationProvider()


class _Asking:
    """Wraps the terminal provider so the status line knows when a human is being asked
    (it must then stay quiet: the question and its prompt are on the same terminal)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.name: str = provider.name
        self.timeout: float | None = provider.timeout
        self.on_timeout: Any = provider.on_timeout
        self.asking = False

    async def confirm(self, request: Any) -> Any:
        self.asking = True
        try:
            return await self.provider.confirm(request)
        finally:
            self.asking = False


async def _call_with_status(runner: Any, command: str,
                            asking: _Asking | None = None) -> dict[str, Any]:
    """Run the call; on a terminal, show how long the command has been running (not
    while a human is being asked: the prompt says it is waiting for an answer)."""
    import anyio

    result: dict[str, Any] = {}
    show = sys.stderr.isatty()

    async def status() -> None:
        started: float | None = None
        shown = False
        while True:
            await anyio.sleep(0.25)
            if asking is not None and asking.asking:
                started = None
                continue
            started = started if started is not None else time.monotonic()
            if time.monotonic() - started >= 1.0:
                sys.stderr.write(f"\r\x1b[2K  … running for "
                                 f"{time.monotonic() - started:.0f}s")
                sys.stderr.flush()
                shown = True
            elif shown:
                sys.stderr.write("\r\x1b[2K")

    async def stop_on_signal(
        scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        # Ctrl-C, SIGTERM and SIGHUP cancel the call, which makes the process layer
        # kill the command's whole tree (shielded) before returning; the caller then
        # reports it (with --json, as a JSON result).
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP,
                                        signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                result["signal"] = signal.Signals(signum).name
                result["signal_number"] = int(signum)
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        if show:
            tg.start_soon(status)
        await tg.start(stop_on_signal, tg.cancel_scope)
        result.update(await runner.call("execute_bash", {"command": command}))
        tg.cancel_scope.cancel()
    if show:
        sys.stderr.write("\r\x1b[2K")
    return result


def _exit_status(result: dict[str, Any]) -> int:
    status = result.get("status")
    if status == "blocked":
        return EXIT_BLOCKED
    if status in ("denied", "timed_out", "error", "rejected", "awaiting_confirmation"):
        return EXIT_NOT_APPROVED
    if result.get("timed_out"):
        return EXIT_TIMED_OUT
    code = result.get("returncode")
    if code is None:
        return 1
    return 128 - code if code < 0 else int(code)


def _policy_report(extra: list[str]) -> dict[str, Any]:
    """Where policy names come from, and what each policy switches off (the shipped ones,
    those of $SANDBOX_POLICY_PATH, and ``extra``)."""
    from sandbox import policies
    from sandbox.bash import BashToolPolicy

    report: dict[str, Any] = {"shipped_directory": str(policies.DIRECTORY),
                              "search_path": [], "policies": {}}
    try:
        directories = policies.search_path()
    except PolicyFileError as exc:
        report["search_path_error"] = str(exc)
        directories = ()
    report["search_path"] = [str(d) for d in directories]
    references: list[str] = list(policies.names())
    for directory in directories:
        if directory.is_dir():
            references += sorted(p.stem for p in directory.glob("*.toml")
                                 if p.stem not in references)
    references += [r for r in extra if r not in references]
    for reference in references:
        entry: dict[str, Any] = {}
        try:
            if "search_path_error" in report and reference in policies.names():
                path = policies.DIRECTORY / f"{reference}.toml"  # the error is said once
            else:
                path = policies.resolve(reference)
            entry["file"] = str(path.resolve())
            entry["open_walls"] = list(policies.open_walls(BashToolPolicy.from_toml(path)))
        except (PolicyFileError, ConfigurationError, OSError) as exc:
            entry["error"] = str(exc)
        report["policies"][reference] = entry
    return report


def _doctor(args: argparse.Namespace) -> int:
    from sandbox.bash import detect_protections

    report = detect_protections()
    report["policies"] = _policy_report(args.policy)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print(f"sandbox doctor — {os.uname().sysname} {os.uname().release}, "
          f"{'root' if report.get('running_as_root') else 'uid ' + str(os.geteuid())}")
    print(f"  whole-tree kill:      {report.get('containment')}")
    if report.get("containment_detail"):
        print(f"                        ({report['containment_detail']})")
    for name, info in report.get("mechanisms", {}).items():
        mark = "yes" if info.get("available") else "no "
        print(f"    [{mark}] {name:16} {info.get('detail', '')}")
    nproc = report.get("max_child_processes", {})
    print(f"  max_child_processes:  {nproc.get('enforcement')}")
    print(f"  exit detection:       {report.get('exit_detection')}")
    for name, state in report.get("rlimits", {}).items():
        print(f"  {name + ':':22}{state}")
    env = report.get("agent_environment_readable_by_command")
    if env:
        print(f"  agent env readable:   {env}")
    confinement = report.get("confinement", {})
    print(f"  OS confinement (Landlock ABI {confinement.get('landlock_abi', 0)}), applied to "
          "every command unless the policy says confinement = \"none\":")
    for layer, state in confinement.get("layers", {}).items():
        mark = "yes" if state.startswith("available") else "no "
        print(f"    [{mark}] {layer:16} {state.split(': ', 1)[-1]}")
    print("  network modes (the policy's network = ...):")
    for mode, state in report.get("network", {}).items():
        mark = "no " if state.startswith("degraded") else "yes"
        print(f"    [{mark}] {mode:16} {state.split(': ', 1)[-1]}")
    named = report["policies"]
    search = ", ".join(named["search_path"]) or "not set"
    print(f"  policies (a name is a shipped policy or one in $SANDBOX_POLICY_PATH: "
          f"{search}; never a file of the current directory):")
    if "search_path_error" in named:
        print(f"    ERROR: {named['search_path_error']}")
    for reference, entry in named["policies"].items():
        if "error" in entry:
            print(f"    [err] {reference}: {entry['error']}")
        elif entry["open_walls"]:
            print(f"    [!!!] {reference} ({entry['file']}) switches protections off:")
            for wall in entry["open_walls"]:
                print(f"            - {wall}")
        else:
            print(f"    [ok ] {reference} ({entry['file']})")
    return 0
