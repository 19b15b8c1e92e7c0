"""bash's ``$(< FILE)``: a substitution whose last line is only an input redirection
prints the file with no program (bash's own ``cat``). `check` decides it as ``cat FILE``
wherever bash does it, and nowhere else, whatever comments, blank lines, here-documents,
``;`` or other redirections surround it (issue 16, class 5).

The oracle is bash itself: each case runs under bench/fuzz_policy.py's harness, which
records every file of the case's directory that bash read (inotify IN_ACCESS).
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

from sandbox import BashToolPolicy
from tests.paths import REPO

BENCH = REPO / "bench" / "fuzz_policy.py"
ONLY_A = BashToolPolicy(allowed_command_prefixes=("a", "b"))
ECHO = BashToolPolicy(allowed_command_prefixes=("echo",))


def _fuzzer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_policy", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Substitutions bash reads f.txt in (checked with bash 5.2).
READS = [
    "$(< f.txt)", '"$(< f.txt #\n)"', '"$(#c\n<f.txt)"', '"`<f.txt #\n`"', "`<f.txt #\n`",
    "$(<f.txt;)", "$(<f.txt ;)", "$(<f.txt\n)", "$(\n<f.txt)", "$(<foo\n<f.txt)",
    "$( <f.txt )", "$(<f.txt;#c\n)", "$(\n#c\n<f.txt\n#d\n)", "$(<f.txt\\\n)",
    "$(<\\\nf.txt)", "<(<f.txt)", ">(<f.txt)", "<(<f.txt #\n)", "<(\n<f.txt)", "<(<f.txt;)",
    '$(<"f.txt")', "$(< f.txt\n )", "$(< f.txt;\n)", "$(:\n<f.txt)", "`<f.txt`", "`<f.txt;`",
    "`#c\n<f.txt`", '"${v:-$(<f.txt #\n)}"', "$(: <<E\nx\nE\n<f.txt)", "$({ :; }\n<f.txt)",
    "`:;\n<f.txt`", "`<f.txt;\n`", "`: &\n<f.txt`", "`<f.txt\n`", "$(b\n<f.txt)",
    "$(b $(<f.txt #\n))", "$(f(){ :; }\n<f.txt)", "$(< f.txt\n\n\n)", "$(#\n#\n<f.txt #\n)",
    "$(b <<E\n$(<f.txt #\n)\nE\n)", "x$(<f.txt #\n)y", "$(<f.t*)", "$(<./foo #\n)",
]
# Substitutions that only open the file (or fail before): bash prints nothing.
OPENS = [
    "$(<f.txt;<foo)", "$(<f.txt 2>/dev/null)", "$(2>/dev/null <f.txt)", "$(3<f.txt)",
    "$(<f.txt <foo)", "$(<f.txt&)", "$(<f.txt &)", "$({ <f.txt; })", "$( (<f.txt) )",
    "$(<f.txt <<EOF\nx\nEOF\n)", "$(<f.txt &>/dev/null)", "$(<>f.txt)", "$(<f.txt\n:)",
    "$(<f.txt;:)", "<(<f.txt &)", "<(<f.txt 2>/dev/null)", "$(<f.txt<<<x)",
    "$(<f.txt >/dev/null)", "$(<f.txt 0<&-)", "$(case x in x) <f.txt;; esac)",
]
# Where `check` counts a read that this bash skips. A backtick is run from its raw text,
# where anything after the last line's newline (here a blank) is one more, empty, line.
# bash 5.2 reprints a $( ) or <( ) it parsed, joining "a;<newline>< f" into one line;
# bash 5.1 (and 5.2's backticks) run the raw text, where "< f" is a line of its own
# and f is printed: `check` follows the raw text, whichever bash runs the command.
OVER = ["`<f.txt\n `", "$(<f.txt;\n<foo)", "$(<f.txt&\n<foo)", "$(:;\n<f.txt)",
        "$(:&\n<f.txt)", "<(:;\n<f.txt)", "$({ :\n}; <f.txt)"]


@pytest.fixture(scope="module")
def bash_reads() -> dict[str, bool]:
    """Whether bash read a file for each case, run as ``a CASE`` (``a`` is not found)."""
    fuzz = _fuzzer()
    cases = READS + OPENS + OVER
    with tempfile.TemporaryDirectory() as tmp:
        # `wait`: a process substitution runs on its own, and its read could land after
        # the next case began (attributed to that one); bash 5.1+ waits for the last one.
        ran = fuzz.run_bash([f"a {c}; wait" for c in cases], Path(tmp))
    return {c: any(name.startswith("<read ") for name in ran.get(i, ()))
            for i, c in enumerate(cases)}


def _reported_cat(text: str) -> bool:
    return any(argv and argv[0] == "cat" for argv in ONLY_A.check(text).commands)


@pytest.mark.parametrize("case", READS)
def test_bash_reads_the_file_and_check_reports_cat(case: str,
                                                   bash_reads: dict[str, bool]) -> None:
    assert bash_reads[case], f"bash 5.2 reads the file in {case!r}; the list is wrong"
    decision = ONLY_A.check(f"a {case}")
    assert _reported_cat(f"a {case}"), decision
    assert not decision.allowed


@pytest.mark.parametrize("case", OPENS)
def test_bash_only_opens_the_file_and_check_reports_no_cat(
        case: str, bash_reads: dict[str, bool]) -> None:
    assert not bash_reads[case], f"bash reads the file in {case!r}; the list is wrong"
    assert not _reported_cat(f"a {case}"), ONLY_A.check(f"a {case}")


@pytest.mark.parametrize("case", OVER)
def test_where_unsure_check_counts_the_read(case: str, bash_reads: dict[str, bool]) -> None:
    assert not bash_reads[case]
    assert _reported_cat(f"a {case}")


@pytest.mark.parametrize("command", [
    'echo "$(< notes.txt #\n)"', "echo `<notes.txt #\n`", "echo $(#c\n<notes.txt)",
    'echo "$(#\n< notes.txt)"', "echo <(< notes.txt)", "echo $(echo hi\n< notes.txt)",
])
def test_the_held_out_shapes_need_cat(command: str) -> None:
    """issue 16: these read notes.txt under policies that allow echo but not cat."""
    decision = ECHO.check(command)
    assert not decision.allowed
    assert ("cat", "notes.txt") in decision.commands


def test_the_read_is_asked_for_as_cat_under_a_policy_that_allows_cat() -> None:
    readonly = BashToolPolicy.from_toml(
        REPO / "sandbox" / "policies" / "readonly.toml")
    command = 'echo -- "$(< notes.txt #\n)"'
    assert readonly.check(command).allowed
    assert readonly.needs_confirmation(command)  # cat asks there; echo alone would not


# A command substitution in an expanding here-document body is a script bash parses when
# it expands the body; the agreement check skipped the whole body, so tree-sitter's
# '=~'/'==' misreading (the rest of the line taken as a regex) hid a command there.
# Found by the template fuzz (bench/fuzz_policy.py --templates, seed 20261127).
HIDDEN_IN_BODIES = [
    "a <<EOF\n$(! ( a ==|b ~ * {a=b}|x % ))\nEOF\n",
    "a <<EOF\n~$(b ==; a=b |& x {k=v,b}a*)\nEOF\n",
    'a <<EOF\n$(a =~ |& x ")*(!" ${v#*})\nEOF\n',
    "a <<EOF\n${v:-$(a == |x)}\nEOF\n",
    "a <<EOF\n$(a <<E\n$(a =~ |x)\nE\n)\nEOF\n",
]


@pytest.mark.parametrize("command", HIDDEN_IN_BODIES)
def test_a_substitution_in_a_here_document_body_is_compared_with_bash(command: str) -> None:
    fuzz = _fuzzer()
    with tempfile.TemporaryDirectory() as tmp:
        ran = fuzz.run_bash([command], Path(tmp))
    assert "x" in ran.get(0, set()), "bash runs x there; the case is wrong"
    decision = ONLY_A.check(command)
    assert not decision.allowed
    assert decision.rule == "R9", decision


def test_a_plain_here_document_body_with_substitutions_still_passes() -> None:
    assert ONLY_A.check("a <<EOF\nhi $(a b) ${v:-$(b -n)}\nEOF\n").allowed
    assert ONLY_A.check("a <<EOF\n$(a <<E\nx\nE\n)\nEOF\n").allowed
