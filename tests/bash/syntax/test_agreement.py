"""R9: the policy decides only where tree-sitter-bash reads the command as bash does.

Each case is one kind of divergence found by running bash on what `check` allowed;
the fuzzer (bench/fuzz_policy.py, run by test_differential_fuzz.py) hunts for more.
"""

from __future__ import annotations

import pytest

from sandbox import BashToolPolicy
from sandbox.policies import resolve

READONLY = BashToolPolicy.from_toml(resolve("readonly"))
GIT_READONLY = BashToolPolicy.from_toml(resolve("git-readonly"))
ECHO = BashToolPolicy(allowed_command_prefixes=("echo",), blocked_operators=(";",))
ANY = BashToolPolicy()
LS = BashToolPolicy(allowed_command_prefixes=("ls", "cat", "echo", "wc", "grep"))


@pytest.mark.parametrize(
    ("policy", "command", "construct"),
    [
        (ECHO, "echo $'\\\\';touch /tmp/p;echo \\'", "ANSI-C"),
        (ECHO, "echo $'\\\\'\"';touch /tmp/p;echo \\'\"", None),
        (GIT_READONLY, "git status x =~ ;touch /tmp/p ]]", "'=~' or '=='"),
        (GIT_READONLY, "git log x == ;touch /tmp/p ]]", None),
        (READONLY, "ls {  }#;touch /tmp/p", None),
        (READONLY, "ls a}#;touch /tmp/p", None),
        (READONLY, "ls ${x:-<(touch /tmp/p)}", "process substitution inside ${...}"),
        (READONLY, "ls ${x:->(touch /tmp/p)}", "process substitution inside ${...}"),
        (READONLY, 'ls "${x:-$(touch /tmp/p)}"', None),
        (LS, "[[== >+ *|| \\& ]]", None),
        (LS, "ls <([[ ]]<(touch /tmp/p) =~ x ]])", None),
        (LS, "[[ $[1+2]a\\\n || ~ ]] | touch ]]", None),
        (LS, "ls $\n@touch", None),
        (BashToolPolicy(allowed_command_prefixes=("[", "ls")), "[b];ls -n", "glob word"),
        (BashToolPolicy(allowed_command_prefixes=("[", "ls")), "ls & [ab]", "glob word"),
        (BashToolPolicy(allowed_command_prefixes=("[", "ls")), "[ -f x]", "glob word"),
    ],
)
def test_a_divergence_is_refused_naming_the_construct(
    policy: BashToolPolicy, command: str, construct: str | None
) -> None:
    decision = policy.check(command)
    assert not decision.allowed, command
    if construct is not None:
        assert decision.rule == "R9", decision
        assert construct in decision.reason


@pytest.mark.parametrize(
    "command",
    [
        "ls {  }#;echo x>/tmp/f",
        "ls x#;echo x>/tmp/f",
        "echo $'\\\\';echo x>/tmp/f",
    ],
)
def test_a_remembered_rule_for_a_prefix_is_not_fooled(command: str) -> None:
    # rule_subjects is what a remembered "always approve ls" rule matches on: the
    # command is refused before any rule, or the second command is a subject of its own.
    subjects = ANY.rule_subjects(command)
    an_ls_rule_covers = bool(subjects) and all(s[:1] == ("ls",) for s in subjects)
    assert not an_ls_rule_covers, subjects


def test_a_loop_variable_is_an_assignment() -> None:
    decision = LS.check("for PATH in tools; do ls; done")
    assert not decision.allowed and decision.rule == "R5"
    assert "PATH" in decision.reason
    assert not ANY.check("for PATH in tools; do ls; done").allowed  # R7: PATH under '*'
    assert not LS.check("for IFS in x; do ls; done").allowed
    assert not BashToolPolicy(
        allowed_command_prefixes=("ls",), env={"PATH": "/usr/bin", "mine": "1"}
    ).check("for mine in a; do ls; done").allowed


@pytest.mark.parametrize(
    "command",
    [
        "echo $'a\\'b' ok",
        "echo 'a;b' \"c;d\" e\\;f",
        "ls -la # a comment; touch x",
        "ls x#y",
        "echo ${x:-'a b'} ${#y} ${z//a/b} \"${v:-$(ls)}\"",
        "for f in a b; do ls $f; done",
        "case x in (a|b) ls;; *) echo;; esac",
        "[[ -f x && $y =~ ^a.*b$ ]] && ls",
        "cat <<'EOF'\n$(id) `id`\nEOF",
        "echo $((1 + 2)) $(( (3) ))",
        "ls | wc -l",
        "grep -c x f.txt 2>&1",
    ],
)
def test_ordinary_commands_still_pass(command: str) -> None:
    assert LS.check(command).allowed, LS.check(command)


def test_one_call_parses_its_command_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """precheck, remembered-rule subjects and the confirmation question share one parse."""
    import sandbox.bash.policy.evaluate as policy_module

    calls: list[str] = []
    real = policy_module.parse

    def counting(source: str, **kw: object) -> object:
        calls.append(source)
        return real(source, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(policy_module, "parse", counting)
    policy = BashToolPolicy(allowed_command_prefixes=("ls", "wc"))
    command = "ls -la | wc -l  # " + "x" * 5000
    policy.check(command)
    policy.rule_subjects(command)
    policy.needs_confirmation(command)
    policy.check(command)
    assert calls == [command]


@pytest.mark.parametrize(
    "command",
    [
        "git log >/dev/null --output=/tmp/x",  # an option hidden from R7 after a redirect
        "find . >/dev/null -delete",
        "ls 2>/dev/null -la",
        "cat <f.txt /etc/passwd",
        "cat <<'EOF' /etc/passwd\nhi\nEOF",
    ],
)
def test_words_after_a_redirection_target_are_refused(command: str) -> None:
    """bash passes them to the command; tree-sitter-bash hangs them on the redirection,
    where no argv rule sees them (found by the stub-executing fuzzer)."""
    policy = BashToolPolicy(allowed_command_prefixes=("git log", "find", "ls", "cat"))
    decision = policy.check(command)
    assert not decision.allowed
    assert decision.rule == "R9", decision.reason
    assert "after a redirection" in decision.reason


@pytest.mark.parametrize(
    "command", ["ls -la 2>&1", "cat <<EOF | wc -l\nhi\nEOF", "cat <<< hi", "ls >/dev/null"]
)
def test_redirections_at_the_end_still_pass(command: str) -> None:
    assert LS.check(command).allowed, LS.check(command)


def test_ansi_c_control_escape_before_the_closing_quote_has_no_known_value() -> None:
    """bash reads $'\\c' as the two characters backslash, c; the word is not a literal."""
    from sandbox.bash.syntax.parse import scan_word

    assert scan_word("$'\\c'").value is None
    assert scan_word("$'\\cA'").value == "\x01"


def test_an_escaped_blank_before_a_line_join_joins_the_words() -> None:
    """``p\\ \\<newline>a`` is the one word "p a" to bash; tree-sitter reads two words."""
    decision = BashToolPolicy(allowed_command_prefixes=("ls",)).check("ls p\\ \\\na")
    assert not decision.allowed
    assert decision.rule in ("R6", "R9"), decision.reason


# Argument-level divergences found by bench/fuzz_argv.py (stub programs record their
# argv): bash passes different words from those `check` saw. A hidden word can carry an
# option past a program spec, so each kind is refused.
AB = BashToolPolicy(allowed_command_prefixes=("a", "b", "echo", "true"), blocked_operators=())


@pytest.mark.parametrize(
    ("command", "construct"),
    [
        # a here-string word with more glued on: one word for bash, two for tree-sitter
        ("a <<<$'\\u0027'\\&", "read as two"),
        ("( a <<<$((1<2))\\; )", "read as two"),
        ("a <<<}f$.txt", "read as two"),
        ('b p <<<$"$x;"\\>', "read as two"),
        # digits glued to '<' or '>' are a file descriptor for bash
        ("a in\\\n 2>&1", "file descriptor"),
        ("b == 2>&1", None),
        ("a x {fd}>f", "file descriptor"),
        # '-' after '<&' / '>&' is a token of its own: the rest is an argument
        ("a<& -l", "closes the descriptor"),
        ("a >&-o", "closes the descriptor"),
        # bash joins lines inside quotes within backquotes
        ("a `b '\\\n&x'p`-n", "line continuation inside a backquoted"),
    ],
)
def test_an_argument_bash_sees_differently_is_refused(command: str, construct: str | None) -> None:
    decision = AB.check(command)
    assert not decision.allowed, command
    assert decision.rule == "R9", decision
    if construct is not None:
        assert construct in decision.reason, decision.reason


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("x{},y}", None),  # bash: x} xy
        ("{},-o}", None),  # bash: } -o (a hidden option)
        ("x{a..c}", None),
        ("{}", "{}"),  # find's placeholder stays literal
        ("{x}", "{x}"),
        ("a,b}", "a,b}"),
        ("$'\\x{2d}o'", None),  # bash's \x{HH} form
        ("$'\\x2do'", "-o"),
        ("$'\\c?'", "\x7f"),
    ],
)
def test_word_values_follow_bash(word: str, value: str | None) -> None:
    from sandbox.bash.syntax.parse import scan_word

    assert scan_word(word).value == value


def test_ordinary_redirections_and_fd_duplications_still_pass() -> None:
    for command in ("a 2>&1", "a x 2>/dev/null", "a >&2", "a <&-", "a 2>&-", "a `b c`", "echo \"`b c`\""):
        assert AB.check(command).allowed, (command, AB.check(command))


@pytest.mark.parametrize(
    ("command", "construct"),
    [
        # bash's delimiter is 'EOF<newline>': the command line goes on after it
        ("b x <<'EOF\n' && coproc a --k=v?\n${x}\nEOF", "delimiter"),
        # bash gives the first body ($(x), expanded) to the first operator
        ('true <<-E | b 1 ${x#$"\' x"-l} << "E"\n$(x)\nE\na;x\nE', "another order"),
        # bash removes the line continuation: the delimiter is EOF, unquoted, and the
        # body is expanded (found by bench/fuzz_policy.py, seed 20261223)
        ("b EOF<<EOF\\\n\n${v:-)$(x)}\nEOF\n", "line continuation"),
    ],
)
def test_here_documents_bash_reads_differently_are_refused(command: str, construct: str) -> None:
    decision = AB.check(command)
    assert not decision.allowed, command
    assert decision.rule == "R9" and construct in decision.reason, decision.reason


@pytest.mark.parametrize("command", ["b <<E\\\nOF\n$(x)\nEOF\n",
                                     'b <<"E\\\nOF"\n$(x)\nEOF\n'])
def test_a_line_continuation_inside_a_delimiter_is_refused(command: str) -> None:
    assert not AB.check(command).allowed


@pytest.mark.parametrize("command", [
    # bash parses $( ) from the raw body: \\\\ is an escaped backslash, & ends `b`, and
    # `id` runs (found by bench/fuzz_policy.py, seed 20261225)
    "b <<EOF\n$(b \\\\& id)\nEOF\n",
    "a <<EOF\n$(a ~a'$;b'\\\\& \\ )\nEOF\n",
])
def test_an_escaped_backslash_in_a_here_document_substitution_is_refused(command: str) -> None:
    decision = AB.check(command)
    assert not decision.allowed and "here-document body" in decision.reason, decision


def test_ordinary_here_documents_still_pass() -> None:
    for command in ("a <<EOF\nx\nEOF", "a <<'EOF'\n$(x)\nEOF", 'a <<-"E"\n\tx\n\tE',
                    "a <<A | b\n1\nA", "b <<EOF\n$(b x)\nC:\\\\p\nEOF\n"):
        assert AB.check(command).allowed, (command, AB.check(command))
