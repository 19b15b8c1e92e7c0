"""The sed and awk analyzers, differentially: what they accept runs nothing and writes
nothing under the real programs.

Scripts and programs are generated (derandomized: the same cases on every run) from
the constructs that run a command or write a file (sed's ``e``, ``s///e``, ``w``,
``W``, ``s///w``; awk's ``system``, pipes, ``getline``, ``>``, ``@load``) mixed with
noise that moves their boundaries: quotes, slashes, brackets, backslashes, newlines,
comments, braces, a/i/c text. Each one the analyzer accepts is run by GNU sed, by
mawk (Debian's awk) and by gawk, in a scratch directory, with PATH holding only a
stub ``touch`` that logs its call: a command run through the shell either calls the
stub (the generated commands are all ``touch MARK``, and so is the input line, which
``e`` and ``s///e`` run) or makes sh say "not found". Nothing may run and no file may
appear. The harness is checked too: refused cases do run commands. Two oracles see
what a run does not reach: GNU sed --sandbox (refuses e and w when it compiles) and
gawk's debugger dump of the compiled program (system, getline, redirections, pipes).

A CI budget of a few thousand cases; SANDBOX_FUZZ_CASES raises it for a long run.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox.bash.policy.analyzers import awk_program_danger, sed_script_danger

CASES = int(os.environ.get("SANDBOX_FUZZ_CASES", "1500"))
INPUT = "touch MARK\nx [y] a/b\n"

SED_PIECES = [
    # what runs or writes
    "e touch MARK", "e", "s/x/touch MARK/e", "s/^/touch MARK;/e", "s/x/y/w OUT", "w OUT",
    "W OUT", "s/x/y/gpw OUT", "1e touch MARK", "$!e touch MARK", "s/.*/touch MARK/2e",
    # what moves the boundaries
    "y/[/x/", "y/x/[/", "s/[/]/x/", "s/[[:alpha:]/]/x/", "s/[]/]/x/", "/[/]/", "/x\\/y/",
    "\\%x%", "\\,x,", "s,x,y,", "s|x|[|", "a x\\\\", "a x\\", "a\\", "i\\\\", "c\\", "a text",
    "a\\text", ":a", ":a ", "b", "bz", "t", "T", "v", "v 4.2", "#c", "#", "l 3", "q", "Q",
    "r in.txt", "R in.txt", "r OUT", "{", "}", ";", "\n", " ", "\t", "!", ",", "1", "$",
    "0~2", "+1", "~2", "I", "M", "p", "g", "n", "N", "=", "x", "[", "]", "/", "\\", "\\\n",
    "s", "y", "a", "i", "c", "w", "W", "e", "2", "&", "F", "z", "\\n",
]  # fmt: skip

AWK_PIECES = [
    # what runs or writes
    'system("touch MARK")', "system (\"touch MARK\")", 'print "x" > "OUT"',
    'print "x" >> "OUT"', 'print "x" | "touch MARK"', '"touch MARK" | getline',
    'getline x < "in.txt"', 'printf "x" > "OUT"', '@load "x"', 'f = "system"; @f("touch MARK")',
    '$0 | getline', "print $0 | \"sh\"", 'print >"OUT"', 'print(1)>"OUT"',
    # what moves the boundaries
    '"', "/", '"/"', "/\"/", "/[/]/", "/[\"]/", '"\\""', "\\\n", "#", "\n", ";", " ", "{", "}",
    "(", ")", "[", "]", "x", "1", "$1", ">", "|", "||", '"}"', '"{"', '">"', '"|"', '"#"', "print",
    "if (x) ", "a = b / c", "/x/", "~", "!", "NR", ",", "2 /", "x++", "BEGIN", "END", "&&",
]  # fmt: skip

TEMPLATES = ["{}", "BEGIN{{{}}}", "/{}/ {{print}}", '{{ x = "{}" }}', "# {}\n{{print}}",
             "{{ print ({}) }}", "$1 ~ /{}/", "{} {{ print }}"]


def _sed_case(rng: random.Random) -> list[str]:
    script = "".join(rng.choice(SED_PIECES) for _ in range(rng.randint(1, 8)))
    if rng.random() < 0.2 and len(script) > 2:  # two -e chunks, as specs.py checks them
        cut = rng.randrange(1, len(script))
        return [script[:cut], script[cut:]]
    return [script]


def _awk_case(rng: random.Random) -> list[str]:
    inner = "".join(rng.choice(AWK_PIECES) for _ in range(rng.randint(1, 6)))
    return [rng.choice(TEMPLATES).replace("{}", inner, 1) if rng.random() < 0.7 else inner]


def _stubs(root: Path) -> tuple[Path, Path]:
    stub_dir = root / "stubs"
    stub_dir.mkdir()
    log = root / "ran.log"
    touch = stub_dir / "touch"
    touch.write_text(f'#!/bin/sh\necho "touch $*" >> {log}\n')
    touch.chmod(0o755)
    return stub_dir, log


def _run(argv: list[str], stub_dir: Path, log: Path) -> str | None:
    """Run argv in a fresh scratch directory: what it ran or wrote, or None."""
    with tempfile.TemporaryDirectory(dir=stub_dir.parent) as scratch:
        (Path(scratch) / "in.txt").write_text(INPUT)
        try:
            proc = subprocess.run(argv, cwd=scratch, env={"PATH": str(stub_dir), "LC_ALL": "C"},
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=3,
                                  check=False)
            err = proc.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            err = ""
        made = sorted(set(os.listdir(scratch)) - {"in.txt"})
    if made:
        return f"wrote {made}"
    if "not found" in err:
        return f"ran a command ({err.strip()[:120]!r})"
    return None


def _differential(tmp_path: Path, make: Callable[[random.Random], list[str]],
                  danger: Callable[[str], str | None],
                  argvs: Callable[[list[str]], list[list[str]]], seed: int) -> None:
    stub_dir, log = _stubs(tmp_path)
    rng = random.Random(seed)
    accepted: list[list[str]] = []
    refused: list[list[str]] = []
    for _ in range(CASES):
        chunks = make(rng)
        (refused if any(danger(c) is not None for c in chunks) else accepted).append(chunks)
    runs = [(chunks, argv) for chunks in accepted for argv in argvs(chunks)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda r: _run(r[1], stub_dir, log), runs))
    bad = [(argv, what) for (_, argv), what in zip(runs, results, strict=True) if what]
    ran = log.read_text() if log.exists() else ""
    assert not bad and not ran, f"accepted, yet: {bad[:5]} {ran[:200]!r}"
    assert len(accepted) > CASES // 10, "the generator hardly makes anything acceptable"
    # The harness sees what refused cases do: some of them do run or write.
    probe = [argv for chunks in refused[:150] for argv in argvs(chunks)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        seen = [w for w in pool.map(lambda a: _run(a, stub_dir, log), probe) if w]
    assert seen or log.exists(), "no refused case ran anything: the harness sees nothing"


def test_sed_scripts_the_analyzer_accepts_run_and_write_nothing(tmp_path: Path) -> None:
    sed = shutil.which("sed")
    assert sed is not None

    def argvs(chunks: list[str]) -> list[list[str]]:
        args = [a for c in chunks for a in ("-e", c)]
        return [[sed, *args, "in.txt"]]

    _differential(tmp_path, _sed_case, sed_script_danger, argvs, seed=8)


def test_sed_scripts_the_analyzer_accepts_compile_under_sed_sandbox() -> None:
    """GNU sed --sandbox refuses e, r and w when it compiles the script, reached or
    not (an address that never matches hides an 'e' from the run above)."""
    sed = shutil.which("sed")
    assert sed is not None
    rng = random.Random(9)
    checked = 0
    for _ in range(CASES):
        chunks = _sed_case(rng)
        if any(sed_script_danger(c) is not None for c in chunks) or any(
                "r" in c or "R" in c for c in chunks):
            continue
        args = [a for c in chunks for a in ("-e", c)]
        proc = subprocess.run([sed, "--sandbox", "-n", *args, "/dev/null"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=5,
                              check=False)
        assert b"disabled in sandbox mode" not in proc.stderr, chunks
        checked += 1
    assert checked > CASES // 10


def test_awk_programs_the_analyzer_accepts_run_and_write_nothing(tmp_path: Path) -> None:
    awks = [shutil.which(a) for a in ("mawk", "gawk")]
    if None in awks:
        pytest.fail("install mawk and gawk (scripts/test.sh does) to fuzz the awk analyzer")

    def argvs(chunks: list[str]) -> list[list[str]]:
        return [[awk, chunks[0], "in.txt"] for awk in awks if awk]

    _differential(tmp_path, _awk_case, awk_program_danger, argvs, seed=8)


_GAWK_DANGER = re.compile(r'Op_builtin\s+:\s+system\b|redir_type = " [^"]|Op_K_getline|'
                          r"Op_indirect_func_call")


def test_awk_programs_the_analyzer_accepts_compile_to_no_dangerous_op_in_gawk(
        tmp_path: Path) -> None:
    """gawk's debugger dumps the compiled program before it runs: no call of system,
    no getline, no redirection or pipe, reached or not (a pattern that never matches
    hides a system() from the run above)."""
    gawk = shutil.which("gawk")
    if gawk is None:
        pytest.fail("install gawk (scripts/test.sh does) to fuzz the awk analyzer")
    rng = random.Random(10)
    programs = []
    for _ in range(CASES):
        (program,) = _awk_case(rng)
        if awk_program_danger(program) is None:
            programs.append(program)

    def dump(job: tuple[int, str]) -> tuple[str, str]:
        path = tmp_path / f"p{job[0]}.awk"
        path.write_text(job[1])
        proc = subprocess.run([gawk, "-D", "-f", str(path)], input="dump\nquit\n",
                              capture_output=True, text=True, errors="replace", timeout=10,
                              cwd=tmp_path, env={"PATH": "/nonexistent"}, check=False)
        return job[1], proc.stdout

    with ThreadPoolExecutor(max_workers=2) as pool:
        dumps = list(pool.map(dump, enumerate(programs)))
    bad = [(program, m.group(0)) for program, out in dumps
           if (m := _GAWK_DANGER.search(out))]
    assert not bad, bad[:5]
    compiled = sum("Op_" in out for _, out in dumps)
    assert compiled > len(programs) // 4, "gawk compiled hardly any of them"
    # and the oracle sees what the analyzer refuses
    refused = 'BEGIN { if (0) print "x" > "OUT"; if (0) system("x") }'
    assert _GAWK_DANGER.search(dump((-1, refused))[1])


@pytest.mark.parametrize("script", [
    "y/[/x/;e touch M;s/]//", "a x\\\\\ne touch M", "i\\\\\ne touch M", ":a e touch M",
    "v 4.2 e touch M", "s/[/]/x/;e touch M", "1!G;h;$!d;s/x/y/w M", "s/a/b/ w M",
    "y/abc/xyz/;W M", "#n\ne touch M", "$!{e touch M\n}", "s/x/\\\n/e",
])
def test_sed_reports_what_gnu_sed_runs(script: str) -> None:
    assert sed_script_danger(script) is not None, script


@pytest.mark.parametrize("program", [
    'BEGIN{system\\\n("touch M")}', 'BEGIN{print "}" > "M"}', 'BEGIN{print "x" \\\n > "M"}',
    'BEGIN{ if (x) /"/; system("touch M") }', '{ print "(" > "M" }', 'BEGIN{print(1) > "M"}',
    '{print | "sh"}', '"date" | getline d', "@include \"x\"", '/"/ { x = 1 } { system("id") }',
    '{ a = b /x/; system("id") }', 'BEGIN { print 1system("id") }',
])
def test_awk_reports_what_awk_runs(program: str) -> None:
    assert awk_program_danger(program) is not None, program


@pytest.mark.parametrize("program", [
    "{print $1}", "$3 > 100 {print $1}", "{ if ($1 > 2) print }", "/a|b/ {print}",
    "{n = NF / 2; print n}", '{print $1 "|" $2}', "a || b", "$1 ~ /x>y/", '/"/ {print}',
    "BEGIN { FS = \":\" } { print $1 }", "{ s += $2 } END { print s / NR }",
])
def test_ordinary_awk_programs_pass(program: str) -> None:
    assert awk_program_danger(program) is None, (program, awk_program_danger(program))


@pytest.mark.parametrize("command", [
    "gawk --source='BEGIN{system(\"touch M\")}' /dev/null",
    "gawk --sou 'BEGIN{system(\"touch M\")}' /dev/null",
    "gawk -be'BEGIN{system(\"touch M\")}' /dev/null",
    "awk -e 'BEGIN{print}' -e 'BEGIN{system(\"touch M\")}'",
    "awk -- '{system(\"touch M\")}' f", "gawk -o out '{print}' f", "gawk --profile=p 1 f",
    "gawk -d 1 f", "sed -n 'y/[/x/;e touch M;s/]//' f.txt",
])
def test_without_specs_the_r7_table_finds_the_program_in_any_option_form(command: str) -> None:
    """A Python policy without program specs: the R7 table's analyzers read awk's
    -e/--source in every getopt form (on main, '--source=PROG' went unread)."""
    from sandbox import BashToolPolicy

    program = command.split()[0]
    decision = BashToolPolicy(allowed_command_prefixes=(program,)).check(command)
    assert not decision.allowed and decision.rule == "R7", decision.reason


def test_every_short_sed_script_the_analyzer_accepts_compiles_under_sed_sandbox() -> None:
    """Exhaustively, every script of up to three characters from sed's structural
    characters and the commands that run or write: what the analyzer accepts, GNU sed
    --sandbox compiles without an e or w (r is left out: --sandbox refuses it too)."""
    sed = shutil.which("sed")
    assert sed is not None
    alphabet = ["e", "w", "W", "s", "y", "/", "[", "]", "\\", "\n", ";", "}", "{", "a", ":",
                "b", "#", "1", ",", "!", " ", "I"]
    accepted = [s for n in (1, 2, 3) for s in map("".join, itertools.product(alphabet, repeat=n))
                if sed_script_danger(s) is None]

    def sandboxed(script: str) -> tuple[str, bool]:
        proc = subprocess.run([sed, "--sandbox", "-n", "-e", script, "/dev/null"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=5,
                              check=False)
        return script, b"disabled in sandbox mode" in proc.stderr

    with ThreadPoolExecutor(max_workers=2) as pool:
        bad = [s for s, refused in pool.map(sandboxed, accepted) if refused]
    assert not bad, bad[:10]
    assert len(accepted) > 1000
