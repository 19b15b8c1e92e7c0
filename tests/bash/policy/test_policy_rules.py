"""`BashToolPolicy.check`, rule by rule (R1-R8 of docs/policy.md), plus the decision,
confirmation and construction contracts."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from sandbox.bash import (
    DEFAULT_HARDENING,
    BashToolPolicy,
    HardeningRule,
    PolicyDecision,
    escape_controls,
)
from sandbox.errors import ConfigurationError

P1 = BashToolPolicy(
    allowed_command_prefixes=("ls", "cat", "echo", "git status", "git log", "python3 -c"),
    blocked_operators=("|", ";", "&&", "||", "`", "$(", ">", "<", "&"),
)
P2 = BashToolPolicy(allowed_command_prefixes=("git", "npm test", "pytest"))
TOOLS = BashToolPolicy(allowed_command_prefixes=("echo", "ls", "cat", "true", "printf"))
ANY = BashToolPolicy()


def allowed(policy: BashToolPolicy, command: str) -> bool:
    return policy.check(command).allowed


def rule_of(policy: BashToolPolicy, command: str) -> str | None:
    decision = policy.check(command)
    assert not decision.allowed, f"{command!r} was allowed: {decision.reason}"
    return decision.rule


# -- R1: operators only where bash reads them as syntax -----------------------------


def test_operator_inside_double_quotes_is_data() -> None:
    assert allowed(BashToolPolicy(blocked_operators=(";",)), 'echo "a;b"')


def test_operator_inside_single_quotes_is_data() -> None:
    assert allowed(P1, "echo 'a|b;c&&d>e'")


def test_escaped_operator_is_data() -> None:
    assert allowed(P1, "echo a\\;b \\| c")


def test_operator_in_a_comment_is_not_syntax() -> None:
    assert allowed(P1, "echo a #; id | x")


def test_newline_is_blocked_like_a_semicolon() -> None:
    assert rule_of(P1, "ls\nls") == "R1"


def test_blocking_newline_also_blocks_semicolon() -> None:
    assert rule_of(BashToolPolicy(blocked_operators=("\n",)), "ls; ls") == "R1"


def test_pipe_and_stderr_is_blocked_by_pipe() -> None:
    assert rule_of(BashToolPolicy(blocked_operators=("|",)), "ls |& cat") == "R1"


def test_backtick_and_dollar_paren_are_the_same_operator() -> None:
    assert rule_of(BashToolPolicy(blocked_operators=("`",)), "echo $(ls)") == "R1"
    assert rule_of(BashToolPolicy(blocked_operators=("$(",)), "echo `ls`") == "R1"


def test_greater_than_blocks_every_output_redirection() -> None:
    policy = BashToolPolicy(blocked_operators=(">",))
    for command in ("ls > f", "ls >> f", "ls 2>&1", "ls &> f", "ls >| f", "cat > >(cat)"):
        assert rule_of(policy, command) == "R1", command


def test_less_than_blocks_heredoc_and_herestring() -> None:
    policy = BashToolPolicy(blocked_operators=("<",))
    assert rule_of(policy, "cat <<EOF\nhi\nEOF") == "R1"
    assert rule_of(policy, "cat <<< hi") == "R1"
    assert rule_of(policy, "cat <(ls)") == "R1"


def test_arithmetic_expansion_is_blocked_by_dollar_paren() -> None:
    assert rule_of(BashToolPolicy(blocked_operators=("$(",)), "echo $((1+1))") == "R1"


def test_blocked_operator_decision_names_the_token() -> None:
    decision = P1.check("ls && ls")
    assert (decision.rule, decision.token) == ("R1", "&&")
    assert "'&&'" in decision.reason


def test_double_ampersand_is_blocked_by_ampersand() -> None:
    assert rule_of(BashToolPolicy(blocked_operators=("&",)), "ls && ls") == "R1"


def test_fd_redirection_is_blocked_by_its_full_spelling() -> None:
    policy = BashToolPolicy(blocked_operators=("2>",))
    assert rule_of(policy, "ls 2>/dev/null") == "R1"
    assert allowed(policy, "ls > /dev/null")


def test_blocked_operator_must_be_operator_syntax() -> None:
    with pytest.raises(ConfigurationError, match="blocked_operators entry 'rm'"):
        BashToolPolicy(blocked_operators=("rm",))


# -- R2: every simple command, wherever it is ---------------------------------------

HIDING_PLACES = [
    "ls; {c}",
    "ls && {c}",
    "ls || {c}",
    "ls | {c}",
    "ls & {c}",
    "ls\n{c}",
    "( {c} )",
    "{{ {c}; }}",
    "echo $({c})",
    "echo `{c}`",
    'echo "$({c})"',
    'echo "a`{c}`b"',
    "cat <({c})",
    "echo > >({c})",
    "cat <<EOF\n$({c})\nEOF",
    "if {c}; then ls; fi",
    "if ls; then {c}; fi",
    "if ls; then ls; else {c}; fi",
    "for i in a; do {c}; done",
    "for i in $({c}); do ls; done",
    "while {c}; do ls; done",
    "case a in a) {c};; esac",
    "case $({c}) in a) ls;; esac",
    "[[ -n $({c}) ]]",
    "echo ${{x:-$({c})}}",
    'echo "${{x:-$({c})}}"',
    "echo ${{a[$({c})]}}",
    "ls > $({c})",
    "cat <<< $({c})",
    "! {c}",
    "echo $(( $({c}) ))",
    "echo $(echo $(echo $({c})))",
]


@pytest.mark.parametrize("template", HIDING_PLACES)
def test_disallowed_command_is_found_wherever_it_hides(template: str) -> None:
    decision = TOOLS.check(template.format(c="id"))
    assert not decision.allowed
    # Blocked for `id` itself (R2), not for something else: "id" alone is in "provide",
    # "inside", "valid"...
    assert decision.token == "id" and "'id' is not allowed" in decision.reason, decision


@pytest.mark.parametrize(
    "command",
    ["ls; echo a", "ls | cat", "echo $(ls)", "( ls )", "{ ls; }", "cat <(ls)",
     "if true; then ls; fi", "for i in a b; do echo $i; done", "case a in a) ls;; esac",
     "echo `ls`", "cat <<EOF\n$(ls)\nEOF", "[[ -n $(ls) ]]"],
)  # fmt: skip
def test_allowed_commands_are_allowed_in_every_position(command: str) -> None:
    assert allowed(TOOLS, command), TOOLS.check(command).reason


def test_decision_lists_every_simple_command() -> None:
    decision = TOOLS.check("echo $(ls -la) | cat 'a b'")
    assert set(decision.commands) == {("echo", "$(ls -la)"), ("ls", "-la"), ("cat", "a b")}


def test_quoted_heredoc_body_is_data() -> None:
    assert allowed(TOOLS, "cat <<'EOF'\n$(id) `id`\nEOF")


def test_backticks_in_expanding_heredoc_body_are_blocked() -> None:
    assert rule_of(TOOLS, "cat <<EOF\n`id`\nEOF") == "R6"


def test_single_quotes_inside_double_quoted_expansion_do_not_protect() -> None:
    # In "${x:-'...'}" the single quotes are ordinary characters: bash runs id.
    assert not allowed(TOOLS, "echo \"${x:-'$(id)'}\"")


def test_single_quotes_in_unquoted_expansion_protect() -> None:
    assert allowed(TOOLS, "echo ${x:-'$(id)'}")


def test_literal_arithmetic_is_allowed() -> None:
    assert allowed(TOOLS, "echo $((1 + 2 * 3)) $[4] ${x:1:2}")


@pytest.mark.parametrize(
    "command",
    ["echo $((x))", "echo $((a[0] + y))", "(( x ))", "[[ $x -eq 1 ]]", "echo ${s:n}",
     "echo ${a[i]}", "for ((i=0; i<3; i++)); do echo; done", "echo $[x]"],
)  # fmt: skip
def test_arithmetic_on_variables_is_blocked(command: str) -> None:
    # x='a[$(id)]' makes $((x)) run id: bash evaluates subscripts in arithmetic.
    assert rule_of(TOOLS, command) == "R2"


def test_indirect_expansion_is_blocked() -> None:
    assert rule_of(TOOLS, "echo ${!x}") == "R2"


def test_prompt_expansion_is_blocked() -> None:
    assert rule_of(TOOLS, "echo ${x@P}") == "R2"


# -- R3: whole words after quote removal -----------------------------------------------


@pytest.mark.parametrize(
    ("policy", "command"),
    [(P1, "lsblk"), (P1, "catx /etc/passwd"), (P1, "git statusx"), (P1, "gitstatus"),
     (P2, "git-annex info"), (P2, "npm tests"), (P2, "pytestx"), (P1, "git status-foo")],
)  # fmt: skip
def test_prefix_does_not_match_a_longer_word(policy: BashToolPolicy, command: str) -> None:
    assert rule_of(policy, command) == "R3"


def test_prefix_allows_further_arguments() -> None:
    assert allowed(P1, "ls -la /tmp") and allowed(P1, "git status -s")


def test_prefix_words_are_compared_after_quote_removal() -> None:
    assert allowed(P2, "npm te'st'") and allowed(P2, 'npm "test" -- -x')


def test_extra_blanks_between_prefix_words_do_not_matter() -> None:
    assert allowed(P1, "python3   -c 'print(2)'")


def test_option_glued_to_its_value_is_a_different_word() -> None:
    assert rule_of(P1, "python3 -c'print(1)'") == "R3"


def test_quoted_prefix_entry_is_split_like_bash() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=("git commit -m", "echo 'a b'"))
    assert allowed(policy, "git commit -m 'fix: x'")
    assert allowed(policy, "echo 'a b' c")
    assert not allowed(policy, "echo a b")


def test_reason_lists_the_allowed_forms_of_a_known_program() -> None:
    reason = P1.check("python3 -m http.server").reason
    assert "'python3' is allowed only as 'python3 -c'" in reason


def test_near_miss_reason_names_the_prefix_and_the_word() -> None:
    reason = P1.check("lsblk").reason
    assert "'ls'" in reason and "'lsblk'" in reason and "Allowed prefixes" in reason


# -- R4: the command word is a plain name ---------------------------------------------


@pytest.mark.parametrize(
    ("command", "rule"),
    [("'ls'", "R4"), ("\\ls", "R4"), ("l's' -la", "R4"), ("/bin/ls", "R4"), ("./ls", "R4"),
     ("$'ls'", "R4"), ("ls${IFS}-la", "R4"), ("$x", "R4"), ("$(echo ls)", "R4"),
     ("l*", "R4"), ("{ls,-la}", "R6"), ("l[s] -la", "R6"), ('"ls"', "R4")],
)  # fmt: skip
def test_command_word_that_is_not_a_plain_name_is_blocked(command: str, rule: str) -> None:
    assert rule_of(TOOLS, command) == rule


def test_path_named_exactly_as_a_prefix_is_allowed() -> None:
    assert allowed(BashToolPolicy(allowed_command_prefixes=("/bin/ls",)), "/bin/ls -la")


def test_path_is_never_matched_by_basename() -> None:
    assert "path" in P1.check("/tmp/cat x").reason


# -- R5: no smuggling -------------------------------------------------------------------


def test_leading_assignment_is_blocked() -> None:
    assert rule_of(P1, "FOO=1 ls") == "R5"


def test_leading_assignment_named_in_a_prefix_is_allowed() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=("CI=1 npm test",))
    assert allowed(policy, "CI=1 npm test -- -x")
    assert not allowed(policy, "CI=2 npm test")


def test_assignment_only_command_is_blocked() -> None:
    assert rule_of(TOOLS, "x=1") == "R5"
    assert rule_of(TOOLS, "a=1 b=2") == "R5"


def test_function_definition_is_blocked() -> None:
    assert rule_of(P2, "git() { touch x; }\ngit status") == "R5"


@pytest.mark.parametrize(
    "command",
    ["env ls", "command ls", "builtin echo", "exec ls", "eval ls", "xargs ls", "nice ls",
     "timeout 5 ls", "sudo ls", "sh -c ls", "bash -c ls", "time ls", "coproc ls",
     "source x", ". x", "nohup ls", "setsid ls", "alias ls=id", "trap id EXIT",
     "declare -x A=1", "export A=1", "read x", "mapfile -C id x", "unset x", "shopt -s x"],
)  # fmt: skip
def test_wrappers_and_shell_state_builtins_are_blocked(command: str) -> None:
    assert rule_of(TOOLS, command) == "R5"


def test_wrapper_named_as_a_prefix_is_allowed() -> None:
    assert allowed(BashToolPolicy(allowed_command_prefixes=("env", "git")), "env git status")


# -- R6: fail closed, fast -----------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["ls (", "echo $(ls", "if true; then ls", "cat <<EOF\nhi", "echo 'a", "ls )"]
)
def test_syntax_error_is_blocked(command: str) -> None:
    assert rule_of(ANY, command) == "R6"


def test_nul_byte_is_blocked() -> None:
    decision = P1.check("ls\x00; id")
    assert decision.rule == "R6" and "NUL" in decision.reason


def test_command_longer_than_the_limit_is_blocked_without_parsing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox.bash.syntax import parse as parse_module

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a command over max_command_bytes reached tree-sitter")

    # Both ways to tree-sitter: in this process, and in the parse worker.
    monkeypatch.setattr(parse_module, "_parse_tree", no_parse)
    monkeypatch.setattr(parse_module, "parse_in_worker", no_parse)
    policy = BashToolPolicy(max_command_bytes=1000)
    decision = policy.check("echo " + "a" * 5000)
    assert decision.rule == "R6" and "longer than 1000" in decision.reason


def test_multibyte_length_is_counted_in_bytes() -> None:
    assert rule_of(BashToolPolicy(max_command_bytes=100), "echo " + "é" * 60) == "R6"


def test_nesting_deeper_than_the_limit_is_blocked() -> None:
    policy = BashToolPolicy(max_parse_depth=20)
    assert rule_of(policy, "echo " + "$(" * 30 + "ls" + ")" * 30) == "R6"


@pytest.mark.timeout(120)  # a parse that is not cut at its deadline fails here
def test_pathological_input_is_refused_and_the_parse_ends() -> None:
    # Bounded by max_parse_seconds (and the worker's kill), not timed here: how fast is
    # bench/'s business; a loaded CI machine is no place for a stopwatch.
    policy = BashToolPolicy(max_command_bytes=131071, max_parse_seconds=0.3)
    for text in ("$(" * 20000, "(" * 30000, "{ " * 20000, '"$(' * 10000, "a | " * 8000):
        assert not policy.check(text).allowed


def test_input_that_parses_too_slowly_is_blocked() -> None:
    # tree-sitter-bash needs seconds to recover from this syntax error.
    decision = BashToolPolicy(max_parse_seconds=0.2).check("a | " * 12000)
    assert decision.rule == "R6" and "longer than 0.2 s to parse" in decision.reason


def test_long_command_is_parsed_without_importing_from_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slow-parse guard runs a child Python; a planted module must not load.
    marker = tmp_path / "planted-module-ran"
    (tmp_path / "tree_sitter.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert TOOLS.check("echo " + "a " * 3000).allowed
    assert not marker.exists()


def test_lone_surrogate_is_blocked() -> None:
    assert rule_of(ANY, "echo \ud800") == "R6"


def test_non_string_command_is_blocked() -> None:
    assert rule_of(ANY, 42) == "R6"  # type: ignore[arg-type]


def test_empty_command_is_blocked() -> None:
    for command in ("", "   ", "\n", "# just a comment"):
        assert not ANY.check(command).allowed


def test_lines_tree_sitter_joins_into_one_command_are_blocked() -> None:
    # tree-sitter-bash 0.25.1 parses `d` as an argument of `c` here; bash runs it.
    decision = TOOLS.check("echo a | cat | cat\nid || true")
    assert decision.rule == "R6" and "line break" in decision.reason


def test_backslash_newline_inside_a_word_is_blocked() -> None:
    # bash runs lsblk; tree-sitter-bash reads `ls blk`.
    assert rule_of(P1, "ls\\\nblk") == "R6"


def test_backslash_newline_after_a_blank_is_a_line_continuation() -> None:
    assert allowed(P1, "ls \\\n-la")


def test_escaped_backticks_inside_backticks_are_blocked() -> None:
    assert rule_of(P2, "git log `echo \\`id\\``") == "R6"


def test_heredoc_that_bash_ends_earlier_is_blocked() -> None:
    assert rule_of(TOOLS, "cat <<EOF\nE\\\nOF\nid\nEOF") == "R6"


def test_policy_check_never_raises_on_internal_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import sandbox.bash.policy.evaluate as module

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(module, "parse", broken)
    decision = TOOLS.check("ls")
    assert (decision.allowed, decision.rule) == (False, "R6")


# -- R7: hardening ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["git -c core.pager=id log", "git --config-env=core.pager=X log", "git -cx=y log",
     "git -\\c alias.x=!id x", "git --exec-path=/tmp log",
     "git fetch --upload-pack=id origin", "git fetch --upl=id origin",
     "git clone -u id src dst", "git ls-remote --upload-pack id .",
     "git push --receive-pack=id origin", "git rebase --exec id HEAD~2", "git rebase -x id",
     "git ls-remote 'ext::sh -c id'", "git fetch EXT::x", "git grep -Oid x", "git grep -nO id x",
     "git grep --open-files-in-pager=id x", "git difftool -x id", "git bisect run id",
     "git submodule foreach id", "git filter-branch --tree-filter id", "git config core.pager id",
     "git clone --template=/tmp/t src", "git -C . -c core.fsmonitor=id status",
     "git --no-pager -c a=b log", "git $opt log"],
)  # fmt: skip
def test_git_options_that_run_commands_are_blocked(command: str) -> None:
    assert rule_of(P2, command) == "R7"


@pytest.mark.parametrize(
    "command",
    ["git log -c", "git show -c HEAD", "git -C /tmp status", "git config --get user.name",
     "git config --list", "git commit -c HEAD", "git log --oneline -n 5", "git fetch origin",
     "git grep -n foo", "git log --grep=-O"],
)  # fmt: skip
def test_safe_git_options_are_allowed(command: str) -> None:
    assert allowed(P2, command), P2.check(command).reason


@pytest.mark.parametrize(
    "command",
    ["npm --script-shell=id test", "npm test --script-shell id", "npm exec id",
     "npm --loglevel silly exec id", "npx cowsay", "pytest --basetemp=/", "pytest --base=/",
     "find . -exec id \\;", "find . -execdir id {} +", "find . -delete", "find . -ok id \\;",
     "find . -fprint /tmp/x", "rg --pre=id x", "tar --to-command=id -xf a.tar",
     "tar -I id -xf a.tar", "tar xIf id a.tar", "tar --checkpoint-action=exec=id -cf a .",
     "sed 's/a/b/e' f", "sed -n '1e id' f", "sed 'w /tmp/x' f", "sed -e 's/a/b/w x' f",
     "sed -f script.sed f", "awk 'BEGIN{system(\"id\")}'", "awk '{print | \"id\"}' f",
     "awk -f prog.awk f", "awk 'BEGIN{f=\"system\"; @f(\"id\")}'", "printf -v PATH %s /tmp", "xargs git -c a=b log",
     "ssh -o ProxyCommand=id host", "rsync -e id a b", "split --filter=id f",
     "sort --compress-program=id f", "less +!id f", "man -P id ls", "let x=1",
     "unset 'a[$i]'", "test -v 'a[$i]'"],
)  # fmt: skip
def test_other_programs_options_that_run_commands_are_blocked(command: str) -> None:
    assert rule_of(ANY, command) == "R7"


@pytest.mark.parametrize(
    "command",
    ["find . -name '*.py' -type f", "sed -n '1,20p' f", "sed 's/a/b/g' f", "sed -i 's/x/y/' f",
     "sed '/^#/d; s/[/]/x/' f", "awk '{print $1}' f", "awk -F: '$3 > 100 {print $1}' f",
     "tar -czf out.tgz src", "tar xzf a.tgz", "rg --pretty foo", "rg -n foo src",
     "npm test -- --watch=false", "pytest -q -p no:cacheprovider", "printf '%s\\n' a"],
)  # fmt: skip
def test_ordinary_uses_of_hardened_programs_are_allowed(command: str) -> None:
    assert allowed(ANY, command), ANY.check(command).reason


@pytest.mark.parametrize(
    "command",
    ["GIT_PAGER=id git log", "LD_PRELOAD=/tmp/x.so ls", "export GIT_SSH_COMMAND=id",
     "BASH_ENV=/tmp/x bash -c ls", "PATH=/tmp ls", "env GIT_PAGER=id git log",
     "npm_config_script_shell=id npm test", "NODE_OPTIONS=--require=x node"],
)  # fmt: skip
def test_dangerous_environment_assignments_are_blocked_even_under_star(command: str) -> None:
    assert rule_of(ANY, command) == "R7"


def test_harmless_assignment_is_allowed_under_star() -> None:
    assert allowed(ANY, "CI=1 npm test")


def test_redirection_to_dev_tcp_is_blocked() -> None:
    assert rule_of(P2, "git log > /dev/tcp/127.0.0.1/9") == "R7"
    assert rule_of(P2, "git log > /dev/udp/127.0.0.1/9") == "R7"


def test_redirection_to_an_expansion_is_blocked() -> None:
    assert rule_of(P2, 'git log > "$OUT"') == "R7"


@pytest.mark.parametrize(
    "target", [".git/config", "repo/.git/hooks/pre-commit", ".gitconfig", "../.bashrc", ".profile"]
)
def test_redirection_into_files_that_run_commands_is_blocked(target: str) -> None:
    # git log --format='[core]%nfsmonitor=cmd' > .git/config, then git status runs cmd.
    assert rule_of(P2, f"git log -1 --format=x > {target}") == "R7"


def test_git_output_option_is_blocked() -> None:
    assert rule_of(P2, "git log -1 --format=x --output=.git/config") == "R7"


def test_arithmetic_argument_cannot_spell_an_option() -> None:
    assert allowed(P2, "git log -n $((1+1))")


def test_substitution_argument_may_spell_an_option() -> None:
    decision = P2.check("git log $(git rev-parse HEAD)")
    assert decision.rule == "R7" and "--output" in decision.reason


def test_redirection_to_a_literal_file_is_allowed() -> None:
    assert allowed(P2, "git log > log.txt 2>&1 && git status 2>/dev/null")


def test_hardening_decision_names_rule_and_token() -> None:
    decision = P2.check("git grep -Oid x")
    assert (decision.rule, decision.token) == ("R7", "-Oid")
    assert "git grep -O" in decision.reason and "runs the given command" in decision.reason


def test_hardening_applies_through_a_path() -> None:
    assert rule_of(ANY, "/usr/bin/git -c core.pager=id log") == "R7"


def test_hardening_applies_to_the_program_a_wrapper_runs() -> None:
    assert rule_of(ANY, "env git -c a=b log") == "R7"
    assert rule_of(ANY, "timeout 5 find . -delete") == "R7"


def test_user_rule_extends_the_table() -> None:
    rule = HardeningRule(program="curl", option="-K", why="reads options from a file")
    policy = BashToolPolicy(hardening=(*DEFAULT_HARDENING, rule))
    decision = policy.check("curl -K cfg https://x")
    assert (decision.rule, decision.token) == ("R7", "-K")
    assert "reads options from a file" in decision.reason


def test_user_rule_for_a_subcommand() -> None:
    rule = HardeningRule(program="git", subcommands=("gc",), why="rewrites the object store")
    policy = BashToolPolicy(hardening=(rule,))
    assert rule_of(policy, "git gc --aggressive") == "R7"
    assert allowed(policy, "git status")


def test_empty_table_turns_hardening_off() -> None:
    assert allowed(BashToolPolicy(hardening=()), "git -c core.pager=id log")


def test_hardening_rule_needs_a_reason() -> None:
    with pytest.raises(ConfigurationError, match="why"):
        HardeningRule(program="git", option="-c", why="")


def test_hardening_rule_needs_exactly_one_target() -> None:
    with pytest.raises(ConfigurationError, match="exactly one"):
        HardeningRule(why="x")


def test_hardening_rule_rejects_a_bad_pattern() -> None:
    with pytest.raises(ConfigurationError, match="pattern"):
        HardeningRule(program="git", pattern="(", why="x")


# -- R8: control characters ---------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["ls\r\nid", "ls\r", "touch x #\recho hello", "ls\x1b[2J", "ls\x0bid", "ls\x0cid",
     "echo \u202eabc", "echo a\u2028id", "ls\x7f"],
)  # fmt: skip
def test_control_character_outside_quotes_is_blocked(command: str) -> None:
    assert rule_of(ANY, command) == "R8"


@pytest.mark.parametrize(
    "command",
    ["echo 'a\rb'", 'echo "a\rb"', "echo $'a\\rb'", "cat <<'EOF'\na\rb\nEOF", "echo 'a\x1bb'"],
)
def test_control_character_inside_quotes_is_data(command: str) -> None:
    assert allowed(ANY, command)


def test_control_characters_in_a_decision_are_escaped() -> None:
    decision = P1.check("touch x #\recho hello")
    assert "\r" not in decision.reason and "\\r" in decision.reason


def test_escape_controls_shows_every_control_character() -> None:
    assert escape_controls("a\rb\x1b[0m\u202ec\td\ne") == "a\\rb\\x1b[0m\\u202ec\td\ne"


def test_command_field_of_a_decision_is_escaped() -> None:
    decision = TOOLS.check("echo 'x\ry' | id")
    assert decision.command is not None and "\r" not in decision.command


# -- the decision -------------------------------------------------------------------------


def test_decision_is_truthy_only_when_allowed() -> None:
    assert TOOLS.check("ls") and not TOOLS.check("id")


def test_decision_is_frozen() -> None:
    decision = TOOLS.check("ls")
    with pytest.raises(Exception, match="frozen"):
        decision.allowed = False  # type: ignore[misc]


def test_allowed_decision_names_the_prefixes_used() -> None:
    decision = P2.check("git status && npm test")
    assert decision.rule is None and "'git'" in decision.reason and "'npm test'" in decision.reason


def test_decision_round_trips_as_json() -> None:
    decision = P1.check("ls; id")
    assert PolicyDecision.model_validate_json(decision.model_dump_json()) == decision


# -- "*" ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["eval ls", "sh -c 'ls'", "./build.sh", "/bin/ls", "FOO=1 ls", "f() { ls; }; f",
     "setsid sleep 1 &", "echo $((x))", "x=1; echo $x"],
)  # fmt: skip
def test_star_allows_any_program_and_construct(command: str) -> None:
    assert allowed(ANY, command), ANY.check(command).reason


def test_star_still_applies_blocked_operators() -> None:
    assert rule_of(BashToolPolicy(blocked_operators=(";",)), "ls; ls") == "R1"


# -- needs_confirmation -------------------------------------------------------------------

CONFIRM = BashToolPolicy(
    allowed_command_prefixes=("git", "ls", "rm"),
    no_confirmation_prefixes=("git status", "git log", "ls"),
)


def test_matching_no_confirmation_prefix_needs_no_confirmation() -> None:
    assert not CONFIRM.needs_confirmation("git status && ls -la | git log")


def test_one_unmatched_command_needs_confirmation() -> None:
    assert CONFIRM.needs_confirmation("git status && rm x")


def test_blocked_command_needs_confirmation() -> None:
    assert CONFIRM.needs_confirmation("id")


def test_no_confirmation_list_is_empty_by_default() -> None:
    assert BashToolPolicy(allowed_command_prefixes=("ls",)).needs_confirmation("ls")


def test_writing_redirection_needs_confirmation() -> None:
    assert CONFIRM.needs_confirmation("ls > notes.txt")
    assert CONFIRM.needs_confirmation("ls >& notes.txt")
    assert not CONFIRM.needs_confirmation("ls 2>/dev/null 2>&1")


def test_no_confirmation_matching_applies_r4_and_r5() -> None:
    assert CONFIRM.needs_confirmation("'ls'") and CONFIRM.needs_confirmation("X=1 ls")


# -- construction ---------------------------------------------------------------------------


def test_policy_is_constructed_exactly_like_adk() -> None:
    policy = BashToolPolicy(
        allowed_command_prefixes=("git status", "ls"),
        blocked_operators=(";", "|"),
        timeout_seconds=30,
        max_memory_bytes=None,
        max_file_size_bytes=None,
        max_child_processes=None,
    )
    assert policy.check("git status").allowed and not policy.check("ls; ls").allowed


def test_defaults_match_adk() -> None:
    policy = BashToolPolicy()
    assert policy.allowed_command_prefixes == ("*",) and policy.blocked_operators == ()
    assert policy.timeout_seconds == 30
    assert (policy.max_memory_bytes, policy.max_file_size_bytes, policy.max_child_processes) == (
        None,
        None,
        None,
    )


def test_default_environment_is_minimal() -> None:
    assert dict(BashToolPolicy().env) == {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def test_policy_is_frozen_and_hashable() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=("ls",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.timeout_seconds = 5  # type: ignore[misc]
    assert hash(policy) == hash(BashToolPolicy(allowed_command_prefixes=("ls",)))


def test_policy_survives_pickle_and_deepcopy() -> None:
    import copy
    import pickle

    for clone in (pickle.loads(pickle.dumps(P1)), copy.deepcopy(P1)):
        assert clone == P1 and not clone.check("ls; id").allowed and clone.check("ls").allowed


def test_replace_builds_a_checked_policy() -> None:
    policy = dataclasses.replace(P1, allowed_command_prefixes=("id",))
    assert policy.check("id").allowed and not policy.check("ls").allowed


def test_lists_are_accepted_and_stored_as_tuples() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=["ls"], blocked_operators=[";"])  # type: ignore[arg-type]
    assert policy.allowed_command_prefixes == ("ls",) and policy.blocked_operators == (";",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"allowed_command_prefixes": "ls"}, "allowed_command_prefixes='ls'"),
     ({"allowed_command_prefixes": ("ls", "")}, "allowed_command_prefixes entry ''"),
     ({"allowed_command_prefixes": ("ls;id",)}, "allowed_command_prefixes entry 'ls;id'"),
     ({"allowed_command_prefixes": ("$x",)}, "allowed_command_prefixes entry '\\$x'"),
     ({"timeout_seconds": -1}, "timeout_seconds=-1"),
     ({"timeout_seconds": True}, "timeout_seconds=True"),
     ({"max_memory_bytes": 0}, "max_memory_bytes=0"),
     ({"max_file_size_bytes": -5}, "max_file_size_bytes=-5"),
     ({"max_child_processes": 1.5}, "max_child_processes=1.5"),
     ({"max_output_bytes": None}, "max_output_bytes=None"),
     ({"max_command_bytes": 1 << 20}, "at most 131071"),
     ({"max_parse_depth": 0}, "max_parse_depth=0"),
     ({"max_parse_seconds": 0}, "max_parse_seconds=0"),
     ({"env": {"BAD NAME": "x"}}, "env key 'BAD NAME'"),
     ({"env": {"A": 1}}, "env\\['A'\\]=1"),
     ({"inherit_env": ("A-B",)}, "inherit_env entry 'A-B'"),
     ({"drop_privileges": "yes"}, "drop_privileges='yes'"),
     ({"hardening": ("git -c",)}, "hardening entry 'git -c'"),
     ({"no_confirmation_prefixes": "ls"}, "no_confirmation_prefixes='ls'")],
)  # fmt: skip
def test_invalid_field_values_name_the_field_value_and_fix(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        BashToolPolicy(**kwargs)  # type: ignore[arg-type]


# -- concurrency ------------------------------------------------------------------------------


def test_checks_from_many_threads_agree() -> None:
    commands = ["git status", "ls; id", "echo $(ls) | cat", "git -c a=b log", "cat <<EOF\nx\nEOF"]
    expected = [P2.check(c) for c in commands]
    failures: list[str] = []

    def worker() -> None:
        for _ in range(200):
            for command, want in zip(commands, expected, strict=True):
                if P2.check(command) != want:
                    failures.append(command)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
