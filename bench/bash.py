"""The bash sandbox, end to end, against Google ADK's `ExecuteBashTool` — one run, one table.

    .venv/bin/python bench/bash.py [--rounds 200] [--yes-seconds 5]

1. `true` through our `ExecuteBashTool.run_async` (confirmation pre-supplied, the default
   confinement: the spawner and its zygote) with all three limits and with none, and
   with confinement='none', vs ADK 2.13's `ExecuteBashTool` (confirmation
   pre-supplied; ADK runs no shell, so its command is `bash -c true`), vs
   `subprocess.run(['bash', '-c', 'true'])`. Rounds run every variant in a shuffled
   order so that machine noise falls on all of them alike. Table 1a calls back to
   back; table 1b pauses 50 ms (`--pause`) before each call, as an agent calls its
   tool after its model answered: the spawner prepares the next run while the agent
   waits (a cgroup move after such a pause waits ~10-20 ms for an RCU grace period,
   which the prepared run has paid ahead).
2. `BashToolPolicy.check` for a one-liner, a pipeline and a 2 KB script, then one
   adversarial input per shape of bash source at the 64 KiB cap, beside
   tree-sitter-bash's own time on it (`--check-only` prints this table alone).
3. For each escape, the time from the deadline to the call's return.
4. Peak RSS growth of this process while the tool captures 5 s of `yes`.

Goals: with the three limits and the default confinement ≤ 0.6x ADK (issue 9); with
limits through the prologue ≤ 0.9x, without limits ≤ 0.6x (issue "ExecuteBashTool"); check
≤ 20 µs median for a one-liner (from a process with google-adk imported), ≤ 1 ms for 2 KB
and ≤ 50 ms for any 64 KiB input; return ≤ timeout + 100 ms for every escape;
RSS growth ≤ 2 x the output cap + 16 MiB.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from rss import peak_rss_growth  # bench/ is the script's directory

from sandbox import BashToolPolicy, ExecuteBashTool, ToolConfirmation, ToolContext

LIMITS = {"max_memory_bytes": 1 << 30, "max_file_size_bytes": 1 << 30,
          "max_child_processes": 64}
CTX = ToolContext(function_call_id="bench", tool_confirmation=ToolConfirmation(confirmed=True))


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _adk(workspace: Path) -> Callable[[], Awaitable[Any]] | None:
    try:
        from google.adk.tools.bash_tool import BashToolPolicy as AdkPolicy
        from google.adk.tools.bash_tool import ExecuteBashTool as AdkTool
        from google.adk.tools.tool_confirmation import ToolConfirmation as AdkConfirmation
    except ImportError:
        return None
    tool = AdkTool(workspace=workspace, policy=AdkPolicy(**LIMITS))  # type: ignore[arg-type]
    ctx = types.SimpleNamespace(tool_confirmation=AdkConfirmation(confirmed=True))

    async def run() -> Any:
        return await tool.run_async(args={"command": "bash -c true"}, tool_context=ctx)  # type: ignore[arg-type]

    return run


def _ours(workspace: Path, limits: bool, via: str = "preexec_fn", *,
          confined: bool = True) -> Callable[[], Awaitable[Any]]:  # fmt: skip
    extra: dict[str, Any] = {} if confined else {"confinement": "none"}
    policy = (BashToolPolicy(**LIMITS, rlimits_via=via, **extra)  # type: ignore[arg-type]
              if limits else BashToolPolicy(**extra))
    tool = ExecuteBashTool(workspace=workspace, policy=policy)

    async def run() -> Any:
        result = await tool.run_async(args={"command": "true"}, tool_context=CTX)
        assert result["returncode"] == 0, result
        return result

    return run


async def _spawn_table(rounds: int, workspace: Path, pause: float = 0.0, *,
                       only: tuple[str, ...] = (), quiet: bool = False
                       ) -> dict[str, float]:  # fmt: skip
    """Print table 1a/1b; returns the medians (µs) by variant. only: these variants
    (and ADK's) alone; quiet: print nothing (the unprivileged child of table 1c)."""
    async def plain() -> Any:
        return subprocess.run(["bash", "-c", "true"], check=False)

    variants: dict[str, Callable[[], Awaitable[Any]]] = {
        "ours, 3 limits": _ours(workspace, True),
        "ours, 3 limits, rlimits_via=prologue": _ours(workspace, True, "prologue"),
        "ours, no limits": _ours(workspace, False),
        "ours, 3 limits, confinement='none'": _ours(workspace, True, confined=False),
        "subprocess.run(['bash','-c','true'])": plain,
    }
    if only:
        variants = {name: fn for name, fn in variants.items() if name in only}
    adk = _adk(workspace)
    if adk is not None:
        variants["ADK 2.13 ExecuteBashTool, 3 limits"] = adk
    for fn in variants.values():
        for _ in range(5):
            await fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants.items())
    for _ in range(rounds):
        random.shuffle(order)
        for name, fn in order:
            if pause:
                await anyio.sleep(pause)  # the agent waits for its model
            started = time.perf_counter()
            await fn()
            samples[name].append((time.perf_counter() - started) * 1e6)
    medians = {name: statistics.median(xs) for name, xs in samples.items()}
    if quiet:
        return medians
    adk_median = medians.get("ADK 2.13 ExecuteBashTool, 3 limits")
    # Issue 9: all three limits and the default confinement <= 0.6x ADK; the earlier
    # goals (issue "ExecuteBashTool") for the other rows.
    goals = {"ours, 3 limits": 0.6, "ours, 3 limits, rlimits_via=prologue": 0.9,
             "ours, no limits": 0.6}
    when = (f"each call after a {pause * 1000:g} ms pause, as an agent calls after its "
            "model answered" if pause else "calls back to back")  # fmt: skip
    print(f"1{'b' if pause else 'a'}. `true` end to end, {when} ({rounds} rounds, shuffled; "
          f"load average {os.getloadavg()[0]:.2f})")
    print(f"   {'variant':40} {'median µs':>10} {'p90 µs':>10} {'x ADK':>7}  goal")
    for name, xs in samples.items():
        p90 = statistics.quantiles(xs, n=10)[-1]
        ratio = medians[name] / adk_median if adk_median else float("nan")
        goal = ""
        if name in goals and adk_median:
            goal = f"≤ {goals[name]}x ADK: {_verdict(ratio <= goals[name])}"
        print(f"   {name:40} {medians[name]:10.0f} {p90:10.0f} {ratio:7.2f}  {goal}")
    return medians


ADK_ROW = "ADK 2.13 ExecuteBashTool, 3 limits"
UNPRIVILEGED_ROWS = ("ours, 3 limits", "ours, no limits")


def _unprivileged_table(rounds: int, pause: float, root: dict[str, float]) -> None:
    """Table 1c: the same calls made by an agent running as an ordinary user (a
    throwaway user, made and removed here), beside ADK's in that same process, and
    beside root's (table 1b). Goals (issue 15): ≤ 0.6x ADK, ≤ 1.2x root."""
    import json

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests import matrix

    print()
    why = matrix.unavailable()
    if why:
        print(f"1c. as an unprivileged user: not measured ({why})")
        return
    python = matrix.python_for_everyone()
    assert python is not None
    path = ":".join([str(matrix.REPO), str(Path(__file__).resolve().parent),
                     *matrix.site_packages()])  # fmt: skip
    with matrix.throwaway_user() as user:
        done = subprocess.run(
            ["setpriv", "--reuid", user, "--regid", user, "--clear-groups", "env", "-i",
             "PATH=/usr/bin:/bin", f"PYTHONPATH={path}", "HOME=/tmp", python,
             str(Path(__file__).resolve()), "--unprivileged-child", "--pause-rounds",
             str(rounds), "--pause", str(pause)],
            cwd="/tmp", capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    if done.returncode != 0:
        print(f"1c. as an unprivileged user: the measuring agent failed: {done.stderr[-2000:]}")
        return
    medians: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    adk = medians.get(ADK_ROW)
    print(f"1c. `true` end to end as an ordinary user (a throwaway uid), each call after a "
          f"{pause * 1000:g} ms pause ({rounds} rounds, shuffled), beside ADK in the same "
          "process and root's table 1b")
    print(f"   {'variant':40} {'median µs':>10} {'x ADK':>7} {'x root':>7}  goal")
    for name, median in medians.items():
        x_adk = median / adk if adk else float("nan")
        x_root = median / root[name] if root.get(name) else float("nan")
        goal = ""
        if name == "ours, 3 limits":
            goal = (f"≤ 0.6x ADK: {_verdict(x_adk <= 0.6)}, ≤ 1.2x root: "
                    f"{_verdict(x_root <= 1.2)}")  # fmt: skip
        print(f"   {name + ' (unprivileged)':40} {median:10.0f} {x_adk:7.2f} {x_root:7.2f}  "
              f"{goal}")


SCRIPT_2KB = "\n".join(
    [
        'for f in *.py; do wc -l "$f" | sort -n; done',
        "if [ -d src ]; then ls -la src | grep -v '^total' | head -n 20; fi",
        'case "$1" in start) echo starting ;; stop) echo stopping ;; *) echo "usage" ;; esac',
        "git log --oneline -n 5 | cat",
        "cat README.md | grep -i 'install' | head -3",
        'echo "$(date +%s) done" && ls -1 | wc -l',
    ]
    * 8
)[:2048]


def _check_table() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=(
        "ls", "cat", "echo", "git status", "git log", "wc", "sort", "grep", "head", "date",
        "[", "cd"))
    cases = [
        ("one-liner `git status`", "git status", 20.0),
        ("pipeline (60 chars)", "git log --oneline -n 20 | grep -i fix | sort | head -n 5", None),
        (f"script ({len(SCRIPT_2KB)} bytes)", SCRIPT_2KB, 1000.0),
    ]
    try:
        import google.adk  # noqa: F401  (the goal is measured beside google-adk)
    except ImportError:
        pass
    print()
    print("2. BashToolPolicy.check (a fresh parse each time: the per-policy cache of")
    print("   decisions is bypassed; a repeated command costs a dictionary lookup)")
    print(f"   {'input':40} {'median µs':>10} {'p90 µs':>10}  goal")
    for label, command, goal in cases:
        policy._decide_uncached(command)
        xs = []
        n = 3000 if len(command) < 200 else 300
        for _ in range(n):
            started = time.perf_counter()
            policy._decide_uncached(command)
            xs.append((time.perf_counter() - started) * 1e6)
        median = statistics.median(xs)
        p90 = statistics.quantiles(xs, n=10)[-1]
        verdict = f"≤ {goal:g} µs: {_verdict(median <= goal)}" if goal else ""
        print(f"   {label:40} {median:10.1f} {p90:10.1f}  {verdict}")
    started = time.perf_counter()
    for _ in range(3000):
        policy.check("git status")
    cached = (time.perf_counter() - started) / 3000 * 1e6
    print(f"   {'`git status` again (cached decision)':40} {cached:10.1f}")
    print()
    print("   adversarial inputs at the 64 KiB cap: check (median of 5) beside tree-sitter's own")
    print("   parse of the same bytes in this process (for the shapes that take it seconds:")
    print("   a child process, stopped at 2 s); goal ≤ 50 ms for any input (load average "
          f"{os.getloadavg()[0]:.2f})")
    print(f"   {'input':32} {'bytes':>6} {'check ms':>9} {'tree-sitter':>11}  goal       decided")
    for label, command in _adversarial():
        ts = []
        decision = None
        for _ in range(5):
            started = time.perf_counter()
            decision = policy._decide_uncached(command)[0]
            ts.append((time.perf_counter() - started) * 1e3)
            if ts[-1] > 3000:
                break
        median = statistics.median(ts)
        assert decision is not None
        decided = "allowed" if decision.allowed else f"{decision.rule}: {decision.reason[:50]}"
        print(f"   {label:32} {len(command.encode()):6} {median:9.1f} "
              f"{_tree_sitter_ms(command.encode()):>11}  ≤ 50 ms: {_verdict(median <= 50)}  "
              f"{decided}")


_CAP = 65536


def _fill(head: str, unit: str, sep: str = " ", cap: int = _CAP) -> str:
    """``head`` then as many ``unit``s (joined by ``sep``) as fit in ``cap`` bytes."""
    count = (cap - len(head.encode())) // len((unit + sep).encode())
    return head + sep.join([unit] * count)


def _adversarial() -> list[tuple[str, str]]:
    """One input per shape of bash source, each filled to the command cap."""
    return [
        ("words", _fill("ls ", "a")),
        ("long words", _fill("ls ", "abcdefghijklmnop")),
        ("single-quoted strings", _fill("echo ", "'a b'")),
        ("double-quoted strings", _fill("echo ", '"a b"')),
        ("double quotes with $x", _fill("echo ", '"a $x b"')),
        ("ANSI-C $'...'", _fill("echo ", "$'a\\n'")),
        ("quoted backquotes '`'", _fill("echo ", "'`'")),
        ("quoted '$('", _fill("echo ", "'$('")),
        ("quoted control chars", _fill("echo ", "'\x01'")),
        ("backquote substitutions", _fill("echo ", "`ls`")),
        ("$( ) substitutions", _fill("echo ", "$(ls)")),
        ("$( ) nested 50 deep", _fill("echo ", "$(" * 50 + "a" + ")" * 50)),
        ("${x} expansions", _fill("echo ", "${x}")),
        ("${x:-y} expansions", _fill("echo ", "${x:-y}")),
        ("brace expansions {a,b}", _fill("echo ", "{a,b}")),
        ("$(( )) arithmetic", _fill("echo ", "$((1+2))")),
        ("an array a=(...)", "a=(" + _fill("", "x", cap=_CAP - 4) + ")"),
        ("commands a; a; ...", _fill("", "a;")),
        ("commands on lines", _fill("", "ls a", "\n")),
        ("a && a && ...", _fill("", "a &&") + " a"),
        ("pipeline a | b; ...", _fill("", "a | b;")),
        ("subshells (a); ...", _fill("", "(a)", ";")),
        ("groups { a; }; ...", _fill("", "{ a; }", ";")),
        ("redirections", _fill("ls ", ">/dev/null")),
        ("one here-document", ("cat <<EOF\n" + "line of text\n" * 6000)[: _CAP - 4] + "\nEOF"),
        ("many here-documents", _fill("", "cat <<E\nx\nE", "\n")),
        ("comments", _fill("", "# c", "\n")),
        ("[[ ]] tests", _fill("", "[[ a == b ]]", ";")),
        ("line continuations in quotes", _fill("echo ", "'\\\n'")),
        ("'(' nested 1000 deep", "(" * 1000 + "a" + ")" * 1000),
        ("'a | ' flood (syntax error)", ("a | " * 16384)[:_CAP]),
        ("'[`<do' (syntax error)", ("[`<do" * 20000)[:_CAP]),
    ]


def _tree_sitter_ms(data: bytes, cap: float = 2.0) -> str:
    """tree-sitter-bash alone on ``data``, in ms. In a child process first (it cannot
    be interrupted here, and some shapes take it seconds): reported as "> 2 s"
    when the child is not done by then, else measured again here."""
    code = ("import sys, time, tree_sitter as t, tree_sitter_bash as b\n"
            "p = t.Parser(t.Language(b.language())); d = sys.stdin.buffer.read()\n"
            "s = time.perf_counter(); p.parse(d); print(time.perf_counter() - s)\n")
    try:
        subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                       timeout=cap, check=True)
    except subprocess.TimeoutExpired:
        return f"> {cap:g} s"
    from sandbox.bash.syntax.parse import _parser

    parser_ms = []
    for _ in range(3):
        started = time.perf_counter()
        _parser().parse(data)
        parser_ms.append((time.perf_counter() - started) * 1e3)
    return f"{min(parser_ms):.1f} ms"


ESCAPES = [
    ("setsid sleep", "setsid sleep 300; sleep 300"),
    ("setsid -f", "setsid -f sleep 301; sleep 300"),
    ("double-forked daemon", "(setsid sleep 302 &) ; sleep 300"),
    ("background job holding stdout", "sleep 303 & sleep 300"),
    ("fork bomb", "b() { b | b & }; b"),
    ("read from stdin", "cat; sleep 300"),
    ("yes", "yes"),
    ("multi-GB cat", "head -c 4G /dev/zero | cat"),
]


async def _escape_table(workspace: Path, timeout: float) -> None:  # noqa: ASYNC109
    policy = BashToolPolicy(timeout_seconds=timeout, **LIMITS)  # type: ignore[arg-type]
    tool = ExecuteBashTool(workspace=workspace, policy=policy)
    print()
    print(f"3. escapes, timeout {timeout:g} s: time from the deadline to the return")
    print(f"   {'escape':32} {'returned after ms':>18} {'past deadline ms':>17}  goal ≤ 100 ms")
    for label, command in ESCAPES:
        started = time.perf_counter()
        result = await tool.run_async(args={"command": command}, tool_context=CTX)
        elapsed = (time.perf_counter() - started) * 1000
        over = elapsed - timeout * 1000
        ok = over <= 100
        note = "" if result.get("timed_out") else f" (ended by itself, rc={result['returncode']})"
        print(f"   {label:32} {elapsed:18.1f} {over:17.1f}  {_verdict(ok)}{note}")


async def _yes_rss(workspace: Path, seconds: float) -> None:
    cap = 1 << 20
    policy = BashToolPolicy(timeout_seconds=seconds, max_output_bytes=cap)
    tool = ExecuteBashTool(workspace=workspace, policy=policy)
    result, grown = await peak_rss_growth(tool.run_async(args={"command": "yes"},
                                                         tool_context=CTX))
    mib = 1 << 20
    growth = grown / mib
    bound = 2 * cap / mib + 16
    print()
    print(f"4. `yes` for {seconds:g} s with a {cap // 1024} KiB cap per stream: "
          f"{result.get('stdout_bytes_dropped', 0) / mib:.0f} MiB dropped, peak RSS growth "
          f"{growth:.1f} MiB (goal ≤ {bound:.0f} MiB: {_verdict(growth <= bound)})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--yes-seconds", type=float, default=5.0)
    parser.add_argument("--pause", type=float, default=0.05,
                        help="seconds before each call in table 1b")
    parser.add_argument("--pause-rounds", type=int, default=100)
    parser.add_argument("--check-only", action="store_true",
                        help="only table 2 (BashToolPolicy.check)")
    parser.add_argument("--unprivileged-child", action="store_true",
                        help=argparse.SUPPRESS)  # table 1c's measuring agent
    parser.add_argument("--no-unprivileged", action="store_true",
                        help="skip table 1c (an agent as a throwaway user)")
    args = parser.parse_args()
    if args.check_only:
        _check_table()
        return
    if args.unprivileged_child:
        import json

        with tempfile.TemporaryDirectory() as tmp:
            found = await _spawn_table(args.pause_rounds, Path(tmp), args.pause,
                                       only=UNPRIVILEGED_ROWS, quiet=True)  # fmt: skip
        print(json.dumps(found))
        return
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        await _spawn_table(args.rounds, workspace)
        print()
        root = await _spawn_table(args.pause_rounds, workspace, args.pause)
        if not args.no_unprivileged and os.geteuid() == 0:
            _unprivileged_table(args.pause_rounds, args.pause, root)
        _check_table()
        await _escape_table(workspace, args.timeout)
        await _yes_rss(workspace, args.yes_seconds)


if __name__ == "__main__":
    anyio.run(main)
