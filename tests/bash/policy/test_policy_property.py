"""Properties of `BashToolPolicy.check`, with real bash as the oracle.

Generated commands that `check` allows are run under ``strace -f -e trace=execve``
in a scratch directory; every program bash executes must be one an allowed prefix
covers. Builtins (echo, printf, true) execute nothing, and bash forks without
execve for subshells, pipelines and substitutions, so the only execve calls a
correct policy lets through are ``ls`` and ``cat``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.bash import BashToolPolicy

STRACE = shutil.which("strace")
ALLOWED = ("echo", "ls", "cat", "true", "printf")
POLICY = BashToolPolicy(allowed_command_prefixes=ALLOWED)

# -- the command grammar -----------------------------------------------------------

allowed_names = st.sampled_from(ALLOWED)
other_names = st.sampled_from(
    ["id", "touch", "uname", "whoami", "env", "sh", "eval", "exec", "command", "xargs",
     "builtin", "source", "time", "nohup", "timeout", "head"]
)  # fmt: skip
# Command words that resolve to an allowed or a forbidden program only after bash
# has expanded or quote-removed them.
tricky_names = st.sampled_from(
    ["l's'", "\\ls", "/bin/ls", "./ls", "$'\\x69d'", "ls${IFS}", "{id,}", "l[s]",
     'e"cho"', "ech$x", "$(echo id)", "`echo id`", "i\\d", "ls\u00a0", "\\\nid", "ls\\\nblk", "ls\\\ncpu", "l\\\ns"]
)  # fmt: skip
# Weighted towards allowed names: only commands `check` allows are run, and those
# are the ones that test the oracle.
program = st.one_of(*[allowed_names] * 8, other_names, tricky_names)

plain_args = st.sampled_from(["a", "-la", "x.txt", "-n", "%s", "--", "-1", "."])
tricky_args = st.sampled_from(
    ["'a;b'", '"a|b"', '"$(id)"', "'$(id)'", "`id`", "$(id)", "$((1+2))", "${x:-$(id)}",
     "$'\\x41'", "\\;", "a\\ b", "~", "*", "{a,b}", "#c", "$x", '"${x}"', "$((x))",
     "a#b", "\\`id\\`", "$'\\x60id\\x60'", '"`id`"', "<(id)", ">(id)", "$(ls)", "$(true)",
     '"a\nb"', "'a\rb'", "$'\\r'", "\\$(id)", "$[1+1]", "${x:-a}", "\"$'x'\"", "\"${x:-'$(id)'}\""]
)  # fmt: skip
argument = st.one_of(*[plain_args] * 4, tricky_args)
assignment = st.sampled_from(["X=1 ", "GIT_PAGER=id ", "x=$(id) ", "a[$(id)]=1 ", "PATH=. "])
redirect = st.sampled_from(
    [" >/dev/null", " 2>&1", " <<<word", " </dev/null", " > >(id)", " 2>/dev/null",
     " <<<$(id)", ' <<<"$(id)"', " >&2", " <<EOF\n$(id)\nEOF\n", " <<'EOF'\n$(id)\nEOF\n",
     " <<EOF\n`id`\nEOF\n", " <<-EOF\n\t$(id)\n\tEOF\n", " <<EOF\nplain\nEOF\n"]
)  # fmt: skip


# Arguments that may well be allowed, but where a parser that reads bash wrongly
# would see a different command (quotes, escapes, comments, line continuations).
benign_tricky_args = st.sampled_from(
    ["'a;b'", '"a|b"', "'$(id)'", "$'\\x41'", "\\;", "a\\ b", "#c", "a#b", "\\`id\\`",
     "$'\\x60id\\x60'", '"a\nb"', "'a\rb'", "$'\\r'", "\\$(id)", "\\\nid", "'\\'",
     '"\\""', "\\'", "'a'\\''b'", "$'\\''", '"#"', "\\#;id", "\\&id", "x\\|id", "${x:-'$(id)'}",
     "a\\\nb", '"$\\\n(id)"', "$\\\n(id)", ";\\\nid"]
)  # fmt: skip


@st.composite
def simple_command(draw: st.DrawFn, benign: bool = False) -> str:
    if benign:
        words = [
            draw(allowed_names),
            *draw(st.lists(st.one_of(plain_args, benign_tricky_args), max_size=3)),
        ]
    else:
        words = [draw(program), *draw(st.lists(argument, max_size=3))]
    text = " ".join(words)
    if not benign and draw(st.integers(0, 9)) == 0:
        text = draw(assignment) + text
    if draw(st.integers(0, 5)) == 0:
        text += draw(redirect)
    return text


separators = st.one_of(
    st.sampled_from(["; ", "\n", " && ", " || ", " | ", " |& ", " & "]),
    st.sampled_from(["\r\n", " #", " \\\n", ";\r", "\x0b", "\n\n", ";;", " ;& "]),
)


def compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pair = st.tuples(inner, separators, inner).map(lambda t: t[0] + t[1] + t[2])
    wrapped = st.one_of(
        inner.map(lambda c: f"( {c} )"),
        inner.map(lambda c: f"{{ {c}; }}"),
        inner.map(lambda c: f"echo $({c})"),
        inner.map(lambda c: f"echo `{c}`"),
        inner.map(lambda c: f'echo "$({c})"'),
        inner.map(lambda c: f"cat <({c})"),
        inner.map(lambda c: f"if true; then {c}; fi"),
        inner.map(lambda c: f"! {c}"),
        inner.map(lambda c: f"for i in 1 2; do {c}; done"),
        inner.map(lambda c: f"while ! true; do {c}; done"),
        inner.map(lambda c: f"case a in a) {c};; esac"),
        inner.map(lambda c: f"f() {{ {c}; }}; f"),
        inner.map(lambda c: f"echo ${{x:-$({c})}}"),
        inner.map(lambda c: f"[[ -n $({c}) ]]"),
        inner.map(lambda c: f"echo $(( $({c}) ))"),
        # The inner command as data: quoting it must keep it from running, and
        # quotes inside it may end the quoting early.
        inner.map(lambda c: f'echo "{c}"'),
        inner.map(lambda c: f"echo '{c}'"),
        inner.map(lambda c: f"echo $'{c}'"),
        inner.map(lambda c: f"cat <<EOF\n{c}\nEOF"),
        inner.map(lambda c: f'cat <<"E"\n{c}\nE'),
        inner.map(lambda c: f"cat <<-E\n\t{c}\n\tE\n{c}"),
        inner.map(lambda c: f"[[ a =~ {c} ]]"),
        inner.map(lambda c: f"{c} # {c}"),
        inner.map(lambda c: f"echo \\\n{c}"),
        # In double quotes and here-documents a single quote inside ${x:-...} is
        # an ordinary character: "${x:-'$(id)'}" runs id.
        inner.map(lambda c: f"echo \"${{x:-'{c}'}}\""),
        inner.map(lambda c: f"echo ${{x:-'{c}'}}"),
        inner.map(lambda c: f"cat <<EOF\n${{x:-'{c}'}}\nEOF"),
        # bash joins backslash-newline in an expanding here-document before it
        # looks for the delimiter, so the document may end earlier than it seems.
        inner.map(lambda c: f"cat <<EOF\nE\\\nOF\n{c}\nEOF"),
        inner.map(lambda c: f"cat <<EOF\na\\\n{c}\nEOF"),
    )
    return st.one_of(pair, wrapped)


# Multi-line scripts of pipelines and lists: tree-sitter-bash 0.25.1 joins the
# line after `a | b | c` to it when that line holds `||` or `&&`.


# A line may start with a forbidden program: a parser that joins it to the line
# before lets it through as mere arguments.
line_start = st.builds(
    lambda name, args: " ".join([name, *args]),
    # Forbidden programs that exist, so that running one shows in the trace.
    st.one_of(allowed_names, allowed_names, st.sampled_from(["id", "uname", "whoami", "head"])),
    st.lists(plain_args, max_size=2),
)


def _joined(operators: list[str]) -> st.SearchStrategy[str]:
    part = simple_command(benign=True)
    parts = st.tuples(line_start, st.lists(part, min_size=1, max_size=3)).map(
        lambda t: [t[0], *t[1]]
    )
    return parts.flatmap(
        lambda parts: st.lists(
            st.sampled_from(operators), min_size=len(parts) - 1, max_size=len(parts) - 1
        ).map(lambda ops: "".join(p + o for p, o in zip(parts, [*ops, ""], strict=True)))
    )


line = st.one_of(line_start, _joined([" | ", " |& "]), _joined([" || ", " && "]))
script = st.lists(line, min_size=2, max_size=3).flatmap(
    lambda lines: st.sampled_from(["\n", "\n\n", " # c\n", ";\n"]).map(lambda sep: sep.join(lines))
)

commands = st.one_of(
    st.recursive(simple_command(benign=True), compound, max_leaves=5),
    st.recursive(simple_command(), compound, max_leaves=5),
    script,
)

# -- running under strace ----------------------------------------------------------

_EXECVE = re.compile(r'^\d+\s+execve\("((?:[^"\\]|\\.)*)"')


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def executed_programs(command: str, workdir: Path) -> list[str]:
    """Paths of every execve after bash's own, running ``command`` for real."""
    assert STRACE is not None
    trace = workdir / "trace.txt"
    proc = subprocess.Popen(
        [STRACE, "-f", "-qq", "-e", "trace=execve", "-o", str(trace),
         "/bin/bash", "--norc", "--noprofile", "-c", command],
        cwd=workdir / "cwd",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        start_new_session=True,
    )  # fmt: skip
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    finally:
        _kill_group(proc)
    lines = trace.read_text(errors="replace").splitlines()
    paths = [m.group(1) for line in lines if (m := _EXECVE.match(line))]
    return paths[1:]  # the first is strace starting bash itself


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="policy-oracle-") as tmp:
        root = Path(tmp)
        (root / "cwd").mkdir()
        # An oracle that sees nothing would pass everything: prove it sees ls.
        if STRACE is not None and not any(
            p.endswith("/ls") for p in executed_programs("ls; true", root)
        ):
            pytest.skip("strace is installed but cannot trace here (ptrace not permitted)")
        yield root


# Of the 250 generated commands, 76-95 reached bash in five runs (30-38%): a floor well
# under that, so that a generator or a policy that lets (almost) nothing through, which
# would pass every example by returning early, fails instead.
EXAMPLES = 250
MIN_REACHED_BASH = 40


@pytest.mark.needs_strace
def test_allowed_commands_execute_only_allowed_programs(workdir: Path) -> None:
    reached_bash: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(command=commands)
    def allowed_runs_only_allowed_programs(command: str) -> None:
        decision = POLICY.check(command)
        if not decision.allowed:
            return
        reached_bash.append(command)
        for entry in (workdir / "cwd").iterdir():  # a previous command may have made files
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        ran = executed_programs(command, workdir)
        names = {os.path.basename(path) for path in ran}
        assert names <= set(ALLOWED), (
            f"check allowed {command!r} but bash executed {sorted(names - set(ALLOWED))}"
        )

    allowed_runs_only_allowed_programs()
    assert len(set(reached_bash)) >= MIN_REACHED_BASH, (
        f"only {len(set(reached_bash))} of {EXAMPLES} generated commands were allowed and "
        f"run by bash (at least {MIN_REACHED_BASH} expected): the property checked almost "
        "nothing; the generator or the policy lets too little through"
    )


# -- never raises, never hangs -------------------------------------------------------

nasty_text = st.lists(
    st.sampled_from(
        [
            *"ab ;|&$()`'\"\\<>{}[]#!*?~=\n\t-",
            "\r",
            "\x00",
            "\x0b",
            "\u00a0",
            "\u202e",
            "\ud800",
            "$(",
            "<<EOF\n",
            "EOF\n",
        ]
    ),
    max_size=300,
).map("".join)
nested = st.integers(1, 5000).flatmap(
    lambda n: st.sampled_from(
        ["$(" * n + "ls" + ")" * n, "(" * n, "{ " * n + "ls" + "; }" * n, "`" * n,
         "$((" * n + "1" + "))" * n, '"$(' * n, "<<E\n" * n, "${x:-" * n + "}" * n,
         "a=(" * n, "[[ " * n, "case x in " * n, "if true; then " * n + "ls" + "; fi" * n]
    )
)  # fmt: skip


@pytest.mark.timeout(300)  # a parse that does not end fails the test (not a speed check)
@settings(max_examples=300, deadline=None)
@given(text=st.one_of(nasty_text, nested, st.text(max_size=200)))
def test_check_never_raises_and_always_ends(text: str) -> None:
    # Over 4 KiB a command is parsed in a child first, killed after max_parse_seconds;
    # the parse here is cut at that deadline too. How fast is bench/'s business (no
    # timed assertion: a loaded CI machine took 2.5 s for one where 0.25 s is usual).
    policy = BashToolPolicy(
        allowed_command_prefixes=ALLOWED, blocked_operators=(";",), max_parse_seconds=0.25
    )
    decision = policy.check(text)
    assert isinstance(decision.allowed, bool)
    assert decision.reason


# -- the sed-script analyzer, with GNU sed --sandbox as the oracle --------------------

SED = shutil.which("sed")
sed_pieces = st.sampled_from(
    ["p", "d", "e id", "w out", "W out", "s/a/b/", "s/a/b/e", "s/a/b/w out", "s|a|b|g",
     "s/[/]/x/", "s/a/b/2e", "y/ab/ba/", "1", "$", "/x/", "\\%x%", "1,3", "0~2", "!", "{",
     "}", ";", "\n", " ", ":a", "ba", "ta", "l 5", "q", "=", "n", "N", "a text", "i text",
     "#c\n", "e", "w", "s", "/", "\\", "I", "M", "g", "2", "x", "v", "v 4.2", "\t"]
)  # fmt: skip


# 68-100 of the 300 generated scripts were judged safe (and so run) in five runs.
SED_EXAMPLES = 300
MIN_SED_RUN = 30


@pytest.mark.needs_program("sed")
def test_sed_scripts_judged_safe_run_no_command_and_write_no_file() -> None:
    from sandbox.bash.policy.analyzers import sed_script_danger

    run: list[str] = []

    @settings(max_examples=SED_EXAMPLES, deadline=None)
    @given(script=st.lists(sed_pieces, min_size=1, max_size=8).map("".join))
    def safe_scripts_run_nothing(script: str) -> None:
        if sed_script_danger(script) is not None:
            return
        run.append(script)
        assert SED is not None
        # --sandbox makes GNU sed refuse e, r and w; the pieces above hold no r.
        result = subprocess.run(
            [SED, "--sandbox", "-n", "-e", script],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=5,
            check=False,
        )
        assert b"disabled in sandbox mode" not in result.stderr, (script, result.stderr)

    safe_scripts_run_nothing()
    assert len(set(run)) >= MIN_SED_RUN, (
        f"only {len(set(run))} of {SED_EXAMPLES} generated sed scripts were judged safe and "
        f"run (at least {MIN_SED_RUN} expected): the property checked almost nothing"
    )
