"""The parse module's paths give one answer: the plain-words shortcut, the general
path in this process, and long commands parsed first by the parse worker (which
also answers R9 for them)."""

from __future__ import annotations

import itertools
import random

import pytest

from sandbox.bash import BashToolPolicy
from sandbox.bash.syntax import guard
from sandbox.bash.syntax import parse as parse_module
from sandbox.bash.syntax.agreement import check_agreement
from sandbox.bash.syntax.parse import parse

GENERAL = parse_module._parse_general

# Plain-looking words on which tree-sitter-bash builds something other than a
# command of words: reserved words, declarations, assignments, test operators.
TOKENS = [
    "ls", "git", "status", "if", "then", "fi", "time", "coproc", "function", "select",
    "case", "in", "esac", "do", "done", "while", "until", "for", "x=y", "a=b", "==", "=",
    "-eq", "2", "0", "-", "--", "%", "+", ",", ".", "/", "a:b", "@", "^", "_", "1a",
    "x==y", "=x", "export", "declare", "local", "readonly", "typeset", "unset", "elif",
    "else", "-v", "-n", ":", "10", "1.5", "-1", "a=", "=a=", "@x", "%x", "x%", "-la",
]  # fmt: skip


def _general(source: str, max_depth: int = 100) -> parse_module.ParsedScript:
    return GENERAL(source, 65536, max_depth, 1.0)


def _in_process(source: str) -> parse_module.ParsedScript:
    """The general path, all in this process (R9 included)."""
    return parse_module._parse_tree(source, source.encode(), 100, check_agreement)


@pytest.mark.parametrize("max_depth", [1, 2, 100])
def test_the_plain_words_shortcut_gives_the_general_parse(max_depth: int) -> None:
    # The shortcut relies on the walk and R9 accepting every command tree of plain
    # words as such; a rule that refuses some plain word must fail here (and then
    # the shortcut must learn it).
    rng = random.Random(8)
    sources = {" ".join(pair) for pair in itertools.product(TOKENS, repeat=2)}
    for _ in range(3000):
        words = [rng.choice(TOKENS) for _ in range(rng.randint(1, 6))]
        sources.add(
            rng.choice(["", "  ", "\n", " \n"])
            + rng.choice([" ", "  ", "\t", " \t "]).join(words)
            + rng.choice(["", " ", "\n", "\n\n"])
        )
    # and random words over every character the shortcut accepts
    alphabet = "%+,-./0123456789:=@ABCXYZ^_abcxyz"
    for _ in range(2000):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
                 for _ in range(rng.randint(1, 4))]
        sources.add(" ".join(words))
    for source in sorted(sources):
        assert parse(source, max_depth=max_depth) == _general(source, max_depth), source


def test_the_shortcut_is_taken_for_a_plain_command() -> None:
    match = parse_module._PLAIN_SOURCE.fullmatch("git log -n 5")
    assert match is not None
    assert parse_module._plain_script("git log -n 5", match, 100) is not None
    # tree-sitter reads a regex after =~ and ==: the general path decides (R9)
    match = parse_module._PLAIN_SOURCE.fullmatch("git status x == y")
    assert match is not None
    assert parse_module._plain_script("git status x == y", match, 100) is None


LONG = [
    "echo " + "a " * 3000,
    'echo "$HOME" x=1 > /dev/null; FOO=bar ls -la <<EOF\nhello $USER\nEOF\n' * 80,
    "for f in *.py; do wc -l \"$f\" | sort -n; done\n" * 120,
    "echo 'é ü 日本' $'\\x41' \"${x:-y}\" $((1+2)) `date`\n" * 100,
    "ls " + "'a\x01b' " * 1000,  # a control character in quotes: data
    "ls \r\n" + "a " * 3000,  # a carriage return outside quotes: R8
    "echo $(" * 300 + "ls" + ")" * 300,  # short, but many openers
    "git status x =~ ;touch /tmp/p ]] " + "a " * 3000,  # R9
    "echo " + "a " * 3000 + "| |",  # a syntax error
]


@pytest.mark.parametrize("source", LONG, ids=range(len(LONG)))
def test_the_worker_gives_the_parse_of_this_process(source: str) -> None:
    assert parse_module._needs_guard(source.encode())
    assert parse(source) == _in_process(source)


def test_every_reply_belongs_to_its_own_command() -> None:
    # A command refused before R9 (a control character, a syntax error, too deep)
    # leaves the worker's verdict unread; the next command must not get it.
    for first, second in itertools.product(LONG, repeat=2):
        parse(first)
        assert parse(second) == _in_process(second)


def test_the_worker_is_started_once_and_reused() -> None:
    parse("echo " + "a " * 3000)
    first = guard._worker
    assert first is not None
    parse("echo " + "b " * 3000)
    assert guard._worker is first and first.process.poll() is None


def test_a_worker_that_overruns_is_killed_and_the_next_command_gets_a_new_one() -> None:
    parse("echo " + "a " * 3000)
    before = guard._worker
    assert before is not None
    slow = parse("a | " * 12000, max_seconds=0.2)
    assert [f.rule for f in slow.findings] == ["R6"]
    assert "longer than 0.2 s to parse" in slow.findings[0].message
    assert before.process.returncode is not None  # killed and reaped
    assert parse("echo " + "a " * 3000).findings == ()
    assert guard._worker is not None and guard._worker is not before


def test_a_worker_that_dies_between_commands_is_replaced() -> None:
    parse("echo " + "a " * 3000)
    worker = guard._worker
    assert worker is not None
    worker.process.kill()
    worker.process.wait()
    assert parse("echo " + "c " * 3000).findings == ()
    assert guard._worker is not None and guard._worker is not worker


def test_a_long_command_is_decided_the_same_through_the_policy() -> None:
    policy = BashToolPolicy(allowed_command_prefixes=("echo", "ls"), blocked_operators=(";",))
    for source in LONG:
        script = _in_process(source)
        assert parse(source) == script
        assert policy.check(source).allowed == policy._decide_uncached(source)[0].allowed


def test_words_built_on_the_fast_paths_have_every_field() -> None:
    # The hot paths build Words with tuple.__new__; a field added to Word must not
    # leave them short.
    from sandbox.bash.syntax.parse import Word

    sources = ["git log -n 5", "ls 'a b' c\\ d \"$x\" $'\\n' ./*.py {a,b} ~/x", "echo " + "a " * 3000]
    for source in sources:
        for command in parse(source).commands:
            for word in command.words:
                assert len(word) == len(Word._fields) and word == Word(*word), word


def test_a_reply_nobody_read_is_read_or_its_worker_replaced() -> None:
    # The worker walks the command and runs R9 only when the walk refused nothing: R9
    # on 1,000 nested ${x:- (seconds) is never run, and the worker is kept.
    deep = "(" * 1000 + "a" + ")" * 1000
    assert "nesting deeper" in parse(deep).findings[0].message
    kept = guard._worker
    assert parse("echo " + "a " * 3000).findings == ()
    assert guard._worker is kept
    slow_r9 = "${x:-" * 1000 + "}" * 1000
    assert "nesting deeper" in parse(slow_r9).findings[0].message
    assert parse("echo " + "b " * 3000).findings == ()
    assert guard._worker is kept
    # A caller that failed between the parse and its script left a reply unread: the
    # next command reads it (or replaces the worker), never takes it for its own.
    assert kept is not None and kept.parse(("echo " + "c " * 3000).encode(), 100, 5.0) == "parsed"
    assert parse("echo " + "d " * 3000).commands[0].argv[1] == "d"
