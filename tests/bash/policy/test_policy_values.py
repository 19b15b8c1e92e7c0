"""What bash does with values, found by attacking the policy (review round 3).

Each case is allowed by a naive reading of the tree: the words look harmless, but bash
evaluates a value as arithmetic (running a subscript's command substitution), splits an
unquoted expansion into several words (options among them) or drops it, assigns through
``${NAME:=…}``, or expands a redirection target past the rules' literal prefix. The
effect tests run bash itself to show the command does what the refusal says.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox import BashToolPolicy
from sandbox.policies import resolve

READONLY = BashToolPolicy.from_toml(resolve("readonly"))
GIT_READONLY = BashToolPolicy.from_toml(resolve("git-readonly"))
PYTHON_DEV = BashToolPolicy.from_toml(resolve("python-dev"))
TEST = BashToolPolicy(allowed_command_prefixes=("[",))


@pytest.mark.parametrize(
    ("policy", "command", "rule"),
    [
        # arithmetic on a variable holding 'a[$(id)]' runs id
        (READONLY, "[[ 'a[$(id)]' =~ .* ]]; [[ 1 -eq 0+BASH_REMATCH ]]; ls", "R2"),
        (GIT_READONLY, "[[ 'a[$(id)]' =~ .* ]]; [[ 1 -eq 0+BASH_REMATCH ]]; git status", "R2"),
        (PYTHON_DEV, "[[ 'a[$(id)]' =~ .* ]]; [[ 1 -eq 0+BASH_REMATCH ]]; ls", "R2"),
        (READONLY, "echo 'a[$(id)]'; [[ 0+_ -lt 1 ]]", "R2"),
        (READONLY, "[[ 'a[$(id)]' =~ .* ]]; [[ 1 -eq 1?BASH_REMATCH:0 ]]", "R2"),
        (READONLY, "for v in 'a[$(id)]'; do cat ./${x[0+v]}; done", None),
        # an unquoted expansion splits into options
        (READONLY, "[[ ' -exec touch M ;' =~ .* ]]; find .$BASH_REMATCH", "R7"),
        (READONLY, "[[ ' --pre=./f.txt' =~ .* ]]; rg hello$BASH_REMATCH", "R7"),
        (READONLY, "for v in ' -o M'; do sort f.txt$v; done", "R7"),
        (READONLY, "for v in 'f.txt M'; do uniq -- $v; done", "R7"),
        (READONLY, "uniq ./*.txt", "R7"),
        (GIT_READONLY, "for v in ' --output=M'; do git log HEAD$v; done", "R7"),
        (GIT_READONLY, "for v in ' --no-list -D b2'; do git branch --list --sort refname$v; done",
         "R7"),
        (GIT_READONLY, "[[ ' --no-get core.zzz yes' =~ .* ]]; git config --get --type bool"
                       "$BASH_REMATCH", "R7"),
        (PYTHON_DEV, "for v in ' -o -v a[$(id)]'; do [ x$v ]; done", "R7"),
        (TEST, "for v in ' -o -v a[$(id)]'; do [ x$v ]; done", "R7"),
        # an empty unquoted value vanishes and the next word takes its slot
        (READONLY, "grep -e $nothing -e --include=x -r hello .", "R7"),
        # ${NAME:=…} assigns a name the policy exported empty
        (GIT_READONLY, "[[ ${GIT_CONFIG_VALUE_2:='touch M; exit 0;'} ]]; git log -p", "R5"),
        (READONLY, "ls ${PATH=x}", None),
        # redirection targets that bash expands past the rules' literal prefix
        (READONLY, "cat < /dev/t${x:-cp}/127.0.0.1/80", "R7"),
        (PYTHON_DEV, "echo '[zz]' >> .gi?/config", "R7"),
        (PYTHON_DEV, "echo x >> ./.bash[r]c", "R7"),
    ],
)
def test_a_value_bash_evaluates_splits_or_assigns_is_refused(
    policy: BashToolPolicy, command: str, rule: str | None
) -> None:
    decision = policy.check(command)
    assert not decision.allowed, command
    if rule is not None:
        assert decision.rule == rule, decision


@pytest.mark.parametrize(
    "command",
    [
        'grep -e "$x" f.txt', 'cat "./$f"', "cat ./*.py", "ls -- $d", "[[ 1 -eq 2 ]]",
        "[[ 0x1f -gt 3 ]]", "grep -e \"${x:-default}\" f.txt", "cat -- \"${x[1]}\"", "cat < f.txt",
        "echo hi > out.txt", "wc -l <<< \"$x\"",
    ],
)
def test_quoted_and_literal_forms_still_pass(command: str) -> None:
    policy = BashToolPolicy(allowed_command_prefixes=("grep", "cat", "ls", "echo", "wc"),
                            program_specs="builtin")
    assert policy.check(command).allowed, policy.check(command)


def test_bash_really_splits_and_evaluates(tmp_path: Path) -> None:
    """The mechanisms the refusals name, shown on bash itself (no policy)."""
    marker = tmp_path / "ran"
    script = (f"[[ 'a[$(touch {marker})]' =~ .* ]]; [[ 1 -eq 0+BASH_REMATCH ]]; "
              "for v in ' -n'; do printf '%s|' x$v; done")
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True,
                         timeout=10, check=False)
    assert marker.exists()  # the arithmetic ran the substitution
    assert out.stdout == "x|-n|"  # one word became two, the second an option


# Review round 3, second adversary.
AB = BashToolPolicy(allowed_command_prefixes=("a", "b"))
BRACKET = BashToolPolicy(allowed_command_prefixes=("[", "test"))


@pytest.mark.parametrize(
    ("policy", "command"),
    [
        # inside `…` within "…", bash turns \" into ": the single-quoted word tree-sitter
        # read is not one, and '; x ;' runs
        (READONLY, 'echo ./"`echo \\"\'\\" ; touch /tmp/PWN ; echo \\"\'\\"`"'),
        (GIT_READONLY, 'git log -- ./"`git log \\"\'\\" ; touch /tmp/PWN ; git log \\"\'\\"`"'),
        (AB, 'a "`b \\"\'\\" ; x ; \\"\'\\"`"'),
        # test's -v after '!' or '-a' evaluates the subscript
        (PYTHON_DEV, "[ ! -v 'a[$(rm -f victim.txt; id >&2)]' ]"),
        (BRACKET, "[ x -a -v 'a[$(id)]' ]"),
        (BRACKET, "[ -n 1 -a -v 'a[$(id)]' ]"),
        (BRACKET, "[ -f $f ]"),  # f='x -a -v a[$(id)]' makes five arguments
        (BRACKET, '[ "$a" "$b" c ]'),
        # "${a[@]}" is one word per element: only the first has the literal prefix
        (READONLY, "for re in '(\\.)(-exec)(id)(;)'; do [[ '.-execid;' =~ $re ]] && "
                   'find ./"${BASH_REMATCH[@]:1}"; done'),
        (GIT_READONLY, "for re in '()(--output=/tmp/PWN)'; do [[ '--output=/tmp/PWN' =~ $re ]] "
                       '&& git log HEAD"${BASH_REMATCH[@]:1}"; done'),
        (READONLY, 'tree ./"${BASH_REMATCH[@]:1}"'),
        # a value slot filled by a word that becomes several
        (READONLY, "uniq -f {0,f.txt,/tmp/uniqout}"),
        (READONLY, "tree -L {1,-o,/tmp/x}"),
        (READONLY, "date -d {now,-s,2020-01-01}"),
        (READONLY, "tail -n {1,-f} f.txt"),
        (READONLY, 'uniq -f "${BASH_VERSINFO[@]}"'),
    ],
)
def test_round_three_findings_are_refused(policy: BashToolPolicy, command: str) -> None:
    decision = policy.check(command)
    assert not decision.allowed, command


@pytest.mark.parametrize(
    "command",
    ['[ "$a" = b ]', '[ -n "$a" ]', '[ -f "$f" ]', '[ "$a" ]', "test -f \"$x\"", "[ ! -f x ]",
     "[ -f x -a -d y ]"],
)
def test_ordinary_tests_of_quoted_values_still_pass(command: str) -> None:
    assert BRACKET.check(command).allowed, BRACKET.check(command)


def test_bash_reads_a_backslash_quote_in_backquotes_in_double_quotes_as_a_quote(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    command = f'echo "`echo \\"\'\\" ; touch {marker} ; echo \\"\'\\"`"'
    subprocess.run(["bash", "--norc", "-c", command], capture_output=True, timeout=10,
                   check=False)
    assert marker.exists()


def test_reading_a_file_through_a_substitution_is_decided_as_cat() -> None:
    """bash's "$(< file)" prints the file as "$(cat file)" does: it needs cat allowed,
    and asks where cat asks (readonly prints file contents only after a human agrees)."""
    echo_only = BashToolPolicy(allowed_command_prefixes=("echo",))
    assert not echo_only.check('echo "$(< /etc/shadow)"').allowed
    assert "'cat'" in echo_only.check('echo "$(< /etc/shadow)"').reason
    assert READONLY.check('echo -- "$(< /etc/shadow)"').allowed
    assert READONLY.needs_confirmation('echo -- "$(< /etc/shadow)"')
    assert READONLY.needs_confirmation("echo -- `< /etc/shadow`")
    assert not READONLY.needs_confirmation("echo -- hi")


@pytest.mark.parametrize(
    ("policy", "command"),
    [
        # these print the lines of a file in their error messages, and run unasked
        (READONLY, "date -f /etc/shadow"), (READONLY, "file -f /etc/shadow"),
        (READONLY, "wc --files0-from=/etc/shadow"), (READONLY, "du --files0-from=/etc/shadow"),
        (GIT_READONLY, "git blame --contents /etc/passwd f.txt"),
        # tail's obsolete '+Nf' operand follows the file until the timeout
        (READONLY, "tail +1f f.txt"),
    ],
)
def test_options_that_print_other_files_or_hang_are_refused(
    policy: BashToolPolicy, command: str
) -> None:
    assert not policy.check(command).allowed, command


def test_python_dev_asks_before_linters_that_can_change_files() -> None:
    assert PYTHON_DEV.needs_confirmation("ruff check --fix .")
    assert PYTHON_DEV.needs_confirmation("mypy --install-types --non-interactive src")
    assert not PYTHON_DEV.needs_confirmation("pytest -q tests")


# Review round 3, third policy adversary.
@pytest.mark.parametrize(
    ("policy", "command"),
    [
        # pytest writes what -o log_file / --junitxml name: code the next pytest runs
        (PYTHON_DEV, "pytest -q -o log_file=test_zz.py -o 'log_file_format=import os #%(levelno)s'"),
        (PYTHON_DEV, "pytest -q --junitxml=keep.py"),
        (PYTHON_DEV, "pytest --log-file=conftest.py"),
        (PYTHON_DEV, "pytest -c evil.ini"),
        (PYTHON_DEV, "pytest -q @/dev/stdin <<< $'-olog_file=test_zz.py'"),
        (PYTHON_DEV, "pytest @args.txt"),
        (PYTHON_DEV, "pytest --cov-report=xml:F"),
        # git config reads options only up to its first operand: this sets core.fsmonitor
        (BashToolPolicy(allowed_command_prefixes=("git",)),
         'git config core.fsmonitor "touch x" --get; git status --short'),
        (BashToolPolicy(allowed_command_prefixes=("git config", "git status"),
                        program_specs="builtin"),
         'git config core.fsmonitor "touch x" --get'),
        (BashToolPolicy(allowed_command_prefixes=("git",)), "git config get core.bare"),
        # git diff with a path outside the work tree is an implicit --no-index
        (GIT_READONLY, "git diff /etc/hostname /dev/null"),
        (GIT_READONLY, "git diff ../secret.txt /dev/null"),
        (PYTHON_DEV, "git diff /etc/hostname /dev/null"),
    ],
)
def test_round_three_third_findings_are_refused(policy: BashToolPolicy, command: str) -> None:
    assert not policy.check(command).allowed, command


def test_a_file_fed_to_stdin_asks_where_cat_would() -> None:
    """'git name-rev --annotate-stdin < FILE' copies the file to stdout."""
    assert GIT_READONLY.check("git name-rev --annotate-stdin < /etc/passwd").allowed
    assert GIT_READONLY.needs_confirmation("git name-rev --annotate-stdin < /etc/passwd")
    assert not GIT_READONLY.needs_confirmation("git log -1 < /dev/null")
    assert PYTHON_DEV.needs_confirmation("python3 -m pytest -q")
    assert not PYTHON_DEV.needs_confirmation("pytest -q tests")


@pytest.mark.parametrize("command", ["\t\n", "\n \n", " ", ""])
def test_whitespace_only_input_is_empty_not_an_internal_error(command: str) -> None:
    decision = BashToolPolicy().check(command)
    assert not decision.allowed and "internal error" not in decision.reason


def test_the_git_config_spec_reads_only_even_without_the_r7_table() -> None:
    specs_only = BashToolPolicy(allowed_command_prefixes=("git config",),
                                program_specs="builtin", hardening=())
    for command in ("git config core.fsmonitor cmd", "git config core.fsmonitor cmd --get"):
        assert not specs_only.check(command).allowed, command
    for command in ("git config --get core.bare", "git config --list"):
        assert specs_only.check(command).allowed, command


def test_last_round_findings() -> None:
    # git grep -f reads patterns from any file and prints a line of it in its error
    assert not GIT_READONLY.check("git grep -E -f /etc/login.defs").allowed
    # commit signing with gpg.format=ssh runs gpg.ssh.defaultKeyCommand from the repo
    for policy in (GIT_READONLY, PYTHON_DEV):
        overridden = {policy.env[k]: policy.env[k.replace("KEY", "VALUE")]
                      for k in policy.env if k.startswith("GIT_CONFIG_KEY_")}
        assert overridden["gpg.ssh.defaultKeyCommand"] == ""
        assert int(policy.env["GIT_CONFIG_COUNT"]) == len(overridden)
