"""Matching a simple command: allowed prefixes on whole words (R2-R4), and the R7
hardening table against a program's options and subcommands."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from sandbox.bash.policy.hardening import (
    ANALYZERS,
    PROGRAM_SYNTAX,
    HardeningRule,
    ProgramSyntax,
)
from sandbox.bash.syntax.model import Word
from sandbox.bash.syntax.parse import parse_prefix
from sandbox.bash.syntax.words import may_be_several
from sandbox.errors import ConfigurationError


@dataclass(frozen=True)
class _Prefixes:
    """Prefix entries split into words once, indexed by their first word."""

    wildcard: bool
    by_first: Mapping[str, tuple[tuple[str, ...], ...]]
    entries: tuple[tuple[str, ...], ...]
    # Entries that pin an option after the program ("git remote -v"): a mode the
    # shipped specs keep (see `_Deciding._first_violation`).
    pins_option: frozenset[tuple[str, ...]] = frozenset()

    @classmethod
    def build(cls, name: str, entries: Sequence[str]) -> _Prefixes:
        parsed: list[tuple[str, ...]] = []
        wildcard = False
        for entry in entries:
            if entry.strip() == "*":
                wildcard = True
                continue
            try:
                parsed.append(parse_prefix(entry))
            except ValueError as exc:
                raise ConfigurationError(
                    f"{name} entry {entry!r} is invalid: {exc}. Write the command as "
                    "plain words, e.g. 'git status' or 'python3 -c', or '*' for any command."
                ) from None
        index: dict[str, list[tuple[str, ...]]] = {}
        for words in parsed:
            index.setdefault(words[0], []).append(words)
        return cls(
            wildcard,
            MappingProxyType({k: tuple(v) for k, v in index.items()}),
            tuple(parsed),
            frozenset(p for p in parsed if any(w.startswith("-") for w in p[1:])),
        )

    def match(self, words: Sequence[str | None]) -> tuple[str, ...] | None:
        if not words or words[0] is None:
            return None
        for prefix in self.by_first.get(words[0], ()):
            if len(prefix) == 1 or (
                    len(prefix) <= len(words) and tuple(words[: len(prefix)]) == prefix):
                return prefix
        return None

    def near_miss(self, words: Sequence[str | None]) -> tuple[tuple[str, ...], str] | None:
        """A prefix that the command would match but for a word boundary
        (``ls`` against ``lsblk``), with the command word that runs past it."""
        for prefix in self.entries:
            for i, want in enumerate(prefix):
                got = words[i] if i < len(words) else None
                if got == want:
                    continue
                if got is not None and got.startswith(want):
                    return prefix, got
                break
        return None


def _program_name(word: Word) -> str | None:
    value = word.value
    if value is None:
        return None
    return value.rsplit("/", 1)[-1] if "/" in value else value


# -- R7 matching -----------------------------------------------------------------


_A_NUMBER = Word("0", "0", "0", False)


def _option_matches(option: str, word: Word, syntax: ProgramSyntax) -> bool:
    """Whether ``word`` is, or (when bash expands it) could be, ``option`` as the
    program's option parser would read it."""
    if word.numeric:
        # An arithmetic expansion yields an integer; "-5" spells only a digit option.
        return option[1:].isdigit()
    value = word.value
    text = word.prefix if value is None else value
    if value is None and text == "":
        return True
    if not text.startswith("-"):
        return False
    if option.startswith("--"):
        if not text.startswith("--"):
            return value is None and text == "-"
        name = text[2:]
        wanted = option[2:]
        if "=" in name:
            name = name.split("=", 1)[0]
            return name == wanted or (bool(name) and wanted.startswith(name))
        if value is None:
            return wanted.startswith(name) or name.startswith(wanted)
        # git, argparse and getopt_long accept any unambiguous abbreviation.
        return bool(name) and wanted.startswith(name)
    if len(option) == 2:
        if text.startswith("--"):
            return False
        wanted_char = option[1]
        for ch in text[1:]:
            if ch == wanted_char:
                return True
            if ch in syntax.value_short or not ch.isalnum():
                return False
        return value is None
    if value is None:
        return option.startswith(text) or text.startswith(option)
    return value == option or value.startswith(option + "=")


class _Subcommand(NamedTuple):
    position: int  # first word after the global options (len(args) if none)
    candidates: tuple[int, ...]
    unknown: bool  # an expansion where the subcommand could be


def _locate_subcommand(args: Sequence[Word], syntax: ProgramSyntax) -> _Subcommand:
    candidates: list[int] = []
    i = 0
    while i < len(args):
        value = args[i].value
        if value is None:
            return _Subcommand(i, tuple(candidates), True)
        if value.startswith("-") and value != "-":
            if value in syntax.value_options:
                i += 2
                continue
            nxt = args[i + 1].value if i + 1 < len(args) else ""
            if (
                not syntax.complete
                and "=" not in value
                and nxt is not None
                and nxt[:1] not in ("-", "")
            ):
                # The option may take the next word as its value, or not: that
                # word may be the subcommand, and so may the one after it.
                candidates.append(i + 1)
                i += 2
                continue
            i += 1
            continue
        candidates.append(i)
        return _Subcommand(i, tuple(candidates), False)
    return _Subcommand(len(args), tuple(candidates), False)


class _Hit(NamedTuple):
    token: str  # the argv word at fault
    label: str  # "git ls-remote --upload-pack"
    why: str


@dataclass(frozen=True)
class _ProgramRules:
    """The hardening rules of one program, indexed by subcommand so that a
    command is checked only against the rules that can apply to it."""

    program: str
    syntax: ProgramSyntax
    general: tuple[HardeningRule, ...]  # no subcommands; patterns, analyzers, always-on
    general_options: tuple[HardeningRule, ...]  # option-only rules without subcommands
    by_head: Mapping[str, tuple[HardeningRule, ...]]
    with_subcommands: tuple[HardeningRule, ...]

    @classmethod
    def build(cls, program: str, rules: Sequence[HardeningRule]) -> _ProgramRules:
        by_head: dict[str, list[HardeningRule]] = {}
        for rule in rules:
            for sub in rule.subcommands:
                bucket = by_head.setdefault(sub.split()[0], [])
                if rule not in bucket:
                    bucket.append(rule)

        def option_only(rule: HardeningRule) -> bool:
            return rule.option is not None and rule.pattern is None and rule.analyzer is None

        general = [r for r in rules if not r.subcommands]
        return cls(
            program,
            PROGRAM_SYNTAX.get(program, ProgramSyntax()),
            tuple(r for r in general if not option_only(r)),
            tuple(r for r in general if option_only(r)),
            MappingProxyType({k: tuple(v) for k, v in by_head.items()}),
            tuple(r for r in rules if r.subcommands),
        )

    def check(self, words: Sequence[Word]) -> _Hit | None:
        args = list(words[1:])
        syntax = self.syntax
        if syntax.bundle_first_arg and args:
            first = args[0]
            if first.value and not first.value.startswith("-"):
                args[0] = Word(first.text, "-" + first.value, "-" + first.value, False)
        located = _locate_subcommand(args, syntax)
        # Only words that are, or may expand to, an option can match an option
        # rule; in most commands that is a handful, often none.
        options = [
            i
            for i, w in enumerate(args)
            if (w.value is None and w.prefix[:1] in ("", "-") and not w.numeric)
            or (w.value or "")[:1] == "-"
        ]
        if self.program in ("[", "test"):
            options = [i for i in options if i in _test_operator_positions(args, self.program)]
        rules = self.general + self.general_options if options else self.general
        if located.unknown:
            rules += self.with_subcommands
        else:
            for idx in located.candidates:
                rules += self.by_head.get(args[idx].value or "", ())
        for rule in rules:
            hit = _rule_fires(rule, words, args, located, options, syntax)
            if hit is not None:
                return hit
        return None


def _negates(word: Word, options: Sequence[str]) -> bool:
    """Whether ``word`` is ``--no-X`` (X possibly abbreviated) for an ``--X`` in ``options``."""
    if word.value is None or not word.value.startswith("--no-"):
        return False
    name = "--" + word.value[5:].partition("=")[0]
    return len(name) > 2 and any(o.startswith(name) for o in options if o.startswith("--"))


# test's binary operators: with three arguments, a binary operator in the middle makes
# the other two plain strings (bash's three_arguments checks it first).
_TEST_BINARY = frozenset({
    "=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef",
    "-a", "-o",
})  # fmt: skip


def _test_operator_positions(args: Sequence[Word], program: str) -> range | set[int]:
    """The argument positions bash's ``test`` / ``[`` may read as a unary operator
    (``-v NAME`` evaluates NAME's subscript). With one to three arguments POSIX fixes
    the reading (``[ -f "$f" ]``: the operand is never an operator); from four on
    bash parses an expression, and any position may be one."""
    a = list(args[:-1]) if program == "[" and args and args[-1].value == "]" else list(args)
    n = len(a)
    if any(may_be_several(w) for w in a):
        return range(len(args))  # the count, and so the reading, is not known

    def bang(w: Word) -> bool:  # may be '!'
        return w.value is None or w.value == "!"

    if n <= 1:
        return set()
    if n == 2:
        return set() if a[0].value == "!" else {0}
    if n == 3:
        if a[1].value in _TEST_BINARY:
            return set()
        return {1} if bang(a[0]) else set()
    return range(len(args))


def _rule_fires(
    rule: HardeningRule,
    words: Sequence[Word],
    args: Sequence[Word],
    located: _Subcommand,
    options: Sequence[int],
    syntax: ProgramSyntax,
) -> _Hit | None:
    """Whether ``rule`` applies to ``words`` (program first; ``args`` are the rest
    as the program reads them; ``options`` the indexes of args that may be
    options), and where."""
    if rule.unless_any:
        # git config reads options only up to its first operand: 'git config NAME VALUE
        # --get' sets NAME. An exempting option counts only before the first operand
        # after the subcommand.
        head: list[Word] = []
        seen_sub = not rule.subcommands
        for w in args:
            if not seen_sub:
                seen_sub = w.value in rule.subcommands
                continue
            if w.value is None or not w.value.startswith("-"):
                break
            head.append(w)
        if (any(w.value in rule.unless_any for w in head)
                # A negation (--no-get, or abbreviated --no-g) undoes the exempting
                # option, as git's parse-options reads it.
                and not any(_negates(w, rule.unless_any) for w in args)):
            return None
    program = rule.program or ""
    label = program
    if rule.subcommands:
        sub = _matching_subcommand(rule.subcommands, args, located)
        if sub is None:
            return None
        label = f"{program} {sub}"
        if rule.option is None and rule.pattern is None and rule.analyzer is None:
            return _Hit(sub, label, rule.why)
    limit = len(args)
    if rule.before_subcommand:
        limit = located.position + (1 if located.unknown else 0)
    if rule.option is not None:
        for i in options:
            if i >= limit:
                break
            if _option_matches(rule.option, args[i], syntax):
                return _Hit(args[i].text, f"{label} {rule.option}", rule.why)
    if rule.pattern is not None:
        for w in args[:limit]:
            if w.numeric:
                w = _A_NUMBER
            if w.value is None or rule.search(w.value):
                return _Hit(w.text, f"{label} /{rule.pattern}/", rule.why)
    if rule.analyzer is not None:
        danger = ANALYZERS[rule.analyzer](args)
        if danger:
            return _Hit(program, f"{label} <{rule.analyzer}>", danger)
    if rule.option is None and rule.pattern is None and rule.analyzer is None:
        return _Hit(words[0].text, label, rule.why)
    return None


def _matching_subcommand(
    subcommands: Sequence[str], args: Sequence[Word], located: _Subcommand
) -> str | None:
    """The first of ``subcommands`` (``"bisect run"``: later words anywhere after
    the first) that ``args`` may invoke; an expansion where the subcommand could
    be matches every one."""
    for sub in subcommands:
        head, *tail = sub.split()
        for idx in located.candidates:
            if args[idx].value == head and all(
                any(w.value == t for w in args[idx + 1 :]) for t in tail
            ):
                return sub
    if located.unknown:
        return subcommands[0] if subcommands else None
    return None


