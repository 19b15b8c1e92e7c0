"""`BashToolPolicy`: what an agent may run, decided on the bash parse tree.

``policy.check(command)`` parses the command with tree-sitter-bash
(`sandbox.bash.syntax.parse`) and applies the rules of docs/policy.md in this order, so the
first reason given is the most useful one:

- R8 control characters outside quotes, R6 anything that cannot be parsed
  safely (syntax errors, NUL, too long, too deep, constructs tree-sitter reads
  differently from bash);
- R1 blocked operators, only where bash treats them as syntax;
- R5 function definitions; then for each simple command in source order R4
  (plain command word), R5 (assignments, wrappers), R2/R3 (prefix match on
  whole words); R2 for commands hidden in arithmetic or expansions;
- R7 the hardening table: options that make a program run commands (per
  simple command), then assignments of dangerous variables and redirections
  into ``/dev/tcp``, ``.git/`` or shell start-up files.

``allowed_command_prefixes=("*",)`` (the default, as in ADK) allows every
program, wrappers, paths, assignments and functions included: R2-R5 exist to
keep a command inside an allowlist, and ``*`` has none. R1, R6, R7 and R8 still
apply. Under ``*`` R7 is a guard against accidents and injected one-liners, not
a boundary (``sh -c '…'`` is allowed); use prefixes for a boundary.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from sandbox.bash.config import DEFAULTS as DEFAULT_PROTECTED
from sandbox.bash.config import (
    ConfinementRequest,
)
from sandbox.bash.config import resolve_patterns as resolve_protected
from sandbox.bash.policy.hardening import (
    ANALYZERS,
    DEFAULT_HARDENING,
    PROGRAM_SYNTAX,
    HardeningRule,
    ProgramSyntax,
)
from sandbox.bash.policy.specs import ProgramSpec, builtin_specs, check_spec, runs_programs
from sandbox.bash.syntax.parse import (
    ParsedScript,
    SimpleCommand,
    Word,
    escape_controls,
    may_be_several,
    parse,
    parse_prefix,
    scan_word,
)
from sandbox.errors import ConfigurationError, PolicyFileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["DEFAULT_ENV", "WRAPPERS", "BashToolPolicy", "PolicyDecision"]

DEFAULT_ENV: Mapping[str, str] = MappingProxyType(
    {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
)

# R5: programs and builtins that run their arguments as a command, or change
# what a later name runs. Blocked unless a prefix names them.
_RUNS_ARGUMENTS = frozenset({
    "env", "command", "builtin", "exec", "eval", "xargs", "nice", "timeout", "sudo",
    "doas", "su", "runuser", "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish",
    "csh", "tcsh", "busybox", "time", "coproc", "source", ".", "nohup", "setsid",
    "stdbuf", "chroot", "unshare", "nsenter", "flock", "watch", "parallel",
    "strace", "ltrace", "ionice", "taskset", "chrt", "prlimit", "systemd-run",
    "script", "fakeroot", "trap", "fc", "sg", "newgrp", "pkexec", "firejail",
    "bwrap", "cgexec", "dbus-run-session", "xvfb-run", "catchsegv", "valgrind",
})  # fmt: skip
_CHANGES_NAMES = frozenset({"alias", "unalias", "enable", "hash", "complete", "compgen",
                            "shopt", "set", "bind"})  # fmt: skip
_ASSIGNS = frozenset({"read", "mapfile", "readarray", "let", "declare", "typeset", "export",
                      "local", "readonly", "unset", "getopts"})  # fmt: skip
WRAPPERS: frozenset[str] = _RUNS_ARGUMENTS | _CHANGES_NAMES | _ASSIGNS

_RULE_TITLES = {
    "R1": "blocked operator",
    "R2": "command not allowed",
    "R3": "prefix must match whole words",
    "R4": "command word must be a plain name",
    "R5": "no smuggling",
    "R6": "cannot be parsed safely",
    "R7": "hardening",
    "R8": "control character",
    "R9": "parser agreement",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Loop variables that only the script itself reads: lower case, and not one of the
# lower-case names that programs (proxies) or bash read.
_LOOP_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
_READ_LOWERCASE = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy",
                             "no_proxy", "auto_resume", "histchars"})  # fmt: skip
_ASSIGNMENT_ARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")
_MAX_COMMAND_BYTES = 131071  # Linux MAX_ARG_STRLEN minus the NUL: bash -c fails past it
_OPERATOR_CHARS = frozenset(";&|<>()$`{}[]!\n-0123456789")
_WRITE_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|"})
_SIZE = re.compile(r"\s*(\d+)\s*([kKmMgGtT]i?[bB]?|[bB])?\s*\Z")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "ki": 1024, "m": 1000**2, "mi": 1024**2,
               "g": 1000**3, "gi": 1024**3, "t": 1000**4, "ti": 1024**4}  # fmt: skip


def _shown(text: str, limit: int = 120) -> str:
    text = escape_controls(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _q(text: str, limit: int = 120) -> str:
    """``text`` quoted for a reason: repr escapes every non-printable character."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


class PolicyDecision(BaseModel):
    """What `BashToolPolicy.check` decided, and why.

    ``reason`` is written for both the model and a human: the rule, the simple
    command and token at fault, and what would be allowed instead. Every control
    character in ``reason``, ``command`` and ``token`` is escaped. ``commands``
    holds the argv of every simple command found (unescaped; for matching
    remembered decisions). Truthiness is ``allowed``, so ``if policy.check(c):``
    does what it reads as.
    """

    model_config = ConfigDict(frozen=True)

    allowed: bool
    reason: str
    rule: str | None = None
    command: str | None = None
    token: str | None = None
    commands: tuple[tuple[str, ...], ...] = ()

    def __bool__(self) -> bool:
        return self.allowed


class _Blocked(NamedTuple):
    rule: str | None
    detail: str
    command: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class _Prefixes:
    """Prefix entries split into words once, indexed by their first word."""

    wildcard: bool
    by_first: Mapping[str, tuple[tuple[str, ...], ...]]
    entries: tuple[tuple[str, ...], ...]

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
        )

    def match(self, words: Sequence[str | None]) -> tuple[str, ...] | None:
        if not words or words[0] is None:
            return None
        for prefix in self.by_first.get(words[0], ()):
            if len(prefix) <= len(words) and all(
                words[i] == prefix[i] for i in range(1, len(prefix))
            ):
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


# -- the policy -------------------------------------------------------------------


def _tuple_of_str(
    name: str, value: object, example: str, *, blank_ok: bool = False
) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigurationError(
            f"{name}={value!r} is invalid: it must be a tuple of strings, not one string. "
            f"Write {name}=({value!r},)."
        )
    if not isinstance(value, Iterable):
        raise ConfigurationError(
            f"{name}={value!r} is invalid: it must be a tuple of strings, e.g. {example}."
        )
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not (item if blank_ok else item.strip()):
            raise ConfigurationError(
                f"{name} entry {item!r} is invalid: entries must be non-empty strings, "
                f"e.g. {example}."
            )
    return items


_NO_SPECS: Mapping[str, ProgramSpec] = MappingProxyType({})
# Decisions a policy keeps (commands are at most max_command_bytes long).
_MEMO_SIZE = 64


def _specs_field(value: object) -> Mapping[str, ProgramSpec]:
    """``program_specs``: a mapping of program (or "prog sub") to `ProgramSpec`, or
    ``"builtin"`` for the specs shipped with the package."""
    if isinstance(value, str):
        if value != "builtin":
            raise ConfigurationError(
                f"program_specs={value!r} is invalid: use \"builtin\" or a mapping of "
                "program names to ProgramSpec.")
        return builtin_specs()
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, ProgramSpec) for k, v in value.items()):
        raise ConfigurationError(
            f"program_specs={value!r} is invalid: use \"builtin\" or a mapping of program "
            "names to ProgramSpec (sandbox.bash.policy.specs).")
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


def _limit(name: str, value: object, *, optional: bool, maximum: int | None = None) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        none = " or None for no limit" if optional else ""
        raise ConfigurationError(
            f"{name}={value!r} is invalid: it must be a positive integer (bytes or a count){none}."
        )
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{name}={value!r} is invalid: it must be at most {maximum}.")


def _allowed_domains(policy: BashToolPolicy) -> tuple[str, ...]:
    """allowed_domains as a tuple, every entry checked (a bad one is named)."""
    from sandbox.bash.network.allowlist import Allowlist

    entries = policy.allowed_domains
    if isinstance(entries, list):
        entries = tuple(entries)
    Allowlist.parse(entries)
    if not isinstance(policy.ask_for_unlisted_domains, bool):
        raise ConfigurationError(
            f"ask_for_unlisted_domains={policy.ask_for_unlisted_domains!r} is invalid: use "
            "True or False."
        )
    if policy.network != "allowlist" and (entries or policy.ask_for_unlisted_domains):
        what = "allowed_domains" if entries else "ask_for_unlisted_domains"
        raise ConfigurationError(
            f"{what} is set but network={policy.network!r}: domains are only let through "
            "with network='allowlist'. Set network='allowlist', or remove " + what + "."
        )
    if policy.network == "allowlist" and not entries and not policy.ask_for_unlisted_domains:
        raise ConfigurationError(
            "network='allowlist' with no allowed_domains and ask_for_unlisted_domains=False "
            "lets nothing through: list the names (e.g. allowed_domains=('pypi.org', "
            "'*.pythonhosted.org')), or use network='none'."
        )
    return entries


@dataclass(frozen=True)
class BashToolPolicy:
    """Which bash commands an agent may run, and the limits they run under.

    Constructed exactly like ADK's: ``BashToolPolicy(allowed_command_prefixes=
    ("git status", "ls"), blocked_operators=(";", "|"), timeout_seconds=30,
    max_memory_bytes=None, max_file_size_bytes=None, max_child_processes=None)``.

    ``allowed_command_prefixes`` match whole words of every simple command after
    quote removal (``ls`` allows ``ls -la``, not ``lsblk`` nor ``/bin/ls``);
    ``("*",)`` allows any program. ``blocked_operators`` are matched only where
    bash reads them as syntax; an entry blocks every operator spelled with it
    (``>`` blocks ``>>`` and ``2>&1``, ``<`` blocks here-documents), a newline
    is ``;`` and a backtick is ``$(``.

    The remaining fields are this library's: output and input bounds, the child's
    environment (nothing is inherited unless named in ``inherit_env``), whether to
    drop root privileges (None: when running as root), the commands that need no
    human confirmation, the R7 hardening table, and the OS confinement of every
    command (``filesystem``, ``readable_paths``, ``writable_paths``, ``network``,
    ``confinement``; see sandbox/bash/linux/confinement.py and SECURITY.md).
    """

    allowed_command_prefixes: tuple[str, ...] = ("*",)
    blocked_operators: tuple[str, ...] = ()
    timeout_seconds: float | None = 30
    max_memory_bytes: int | None = None
    max_file_size_bytes: int | None = None
    max_child_processes: int | None = None
    max_output_bytes: int = 1 << 20
    max_command_bytes: int = 64 << 10
    max_parse_depth: int = 100
    max_parse_seconds: float = 1.0
    env: Mapping[str, str] = field(default_factory=lambda: DEFAULT_ENV)
    inherit_env: tuple[str, ...] = ()
    drop_privileges: bool | None = None
    rlimits_via: str = "preexec_fn"
    no_confirmation_prefixes: tuple[str, ...] = ()
    hardening: tuple[HardeningRule, ...] = DEFAULT_HARDENING
    program_specs: Mapping[str, ProgramSpec] = field(default_factory=lambda: _NO_SPECS)
    # OS confinement (see sandbox/bash/linux/confinement.py and SECURITY.md).
    filesystem: str = "read-write"
    readable_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    network: str = "none"
    confinement: str = "best-effort"
    # network="allowlist": the names a command may reach through the egress proxy
    # (sandbox/bash/network/), and whether an unlisted one is asked for.
    allowed_domains: tuple[str, ...] = ()
    ask_for_unlisted_domains: bool = False
    # Read-only inside the writable workspace, whatever program writes (see
    # sandbox/bash/linux/protected.py): "@default" is the default list, "!name" takes one out.
    protected_paths: tuple[str, ...] = (DEFAULT_PROTECTED,)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "allowed_domains", _allowed_domains(self))
        if not isinstance(self.protected_paths, str):
            set_(self, "protected_paths", tuple(self.protected_paths))
        resolve_protected(self.protected_paths)  # raises naming a bad entry
        for name in ("readable_paths", "writable_paths"):
            set_(self, name, _tuple_of_str(name, getattr(self, name), "('/opt/tools',)",
                                           blank_ok=True))  # fmt: skip
        ConfinementRequest(
            filesystem=self.filesystem, readable_paths=self.readable_paths,
            writable_paths=self.writable_paths, network=self.network, mode=self.confinement,
        )  # fmt: skip
        allowed = _tuple_of_str(
            "allowed_command_prefixes", self.allowed_command_prefixes, "('git status', 'ls')"
        )
        set_(self, "allowed_command_prefixes", allowed)
        blocked = _tuple_of_str(
            "blocked_operators", self.blocked_operators, "(';', '|', '$(')", blank_ok=True
        )
        for op in blocked:
            if not set(op) <= _OPERATOR_CHARS:
                raise ConfigurationError(
                    f"blocked_operators entry {op!r} is invalid: it is not bash operator "
                    "syntax. List operators such as ';', '&&', '||', '|', '&', '>', '<', "
                    "'$(', '`', '<(' ; to forbid a program, leave it out of "
                    "allowed_command_prefixes."
                )
        set_(self, "blocked_operators", blocked)
        timeout = self.timeout_seconds
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ConfigurationError(
                f"timeout_seconds={timeout!r} is invalid: it must be a positive number of "
                "seconds, or None for no timeout."
            )
        for name in ("max_memory_bytes", "max_file_size_bytes", "max_output_bytes"):
            size = getattr(self, name)
            if isinstance(size, str):  # "1GiB", as a policy file may write it
                set_(self, name, _byte_size(name, size))
        for name in ("max_memory_bytes", "max_file_size_bytes", "max_child_processes"):
            _limit(name, getattr(self, name), optional=True)
        _limit("max_output_bytes", self.max_output_bytes, optional=False)
        _limit(
            "max_command_bytes", self.max_command_bytes, optional=False, maximum=_MAX_COMMAND_BYTES
        )
        _limit("max_parse_depth", self.max_parse_depth, optional=False, maximum=10000)
        seconds = self.max_parse_seconds
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise ConfigurationError(
                f"max_parse_seconds={seconds!r} is invalid: it must be a positive number of "
                "seconds (how long a command over 4 KiB may take to parse)."
            )
        if not isinstance(self.env, Mapping):
            raise ConfigurationError(
                f"env={self.env!r} is invalid: it must be a mapping of variable names to "
                "strings, e.g. {'PATH': '/usr/bin:/bin'}."
            )
        for key, val in self.env.items():
            if not isinstance(key, str) or not _NAME.match(key):
                raise ConfigurationError(
                    f"env key {key!r} is invalid: names are letters, digits and '_' and do "
                    "not start with a digit."
                )
            if not isinstance(val, str) or "\x00" in val:
                raise ConfigurationError(
                    f"env[{key!r}]={val!r} is invalid: values must be strings without NUL."
                )
        set_(self, "env", MappingProxyType(dict(self.env)))
        inherit = _tuple_of_str("inherit_env", self.inherit_env, "('TERM', 'TZ')")
        for name in inherit:
            if not _NAME.match(name):
                raise ConfigurationError(
                    f"inherit_env entry {name!r} is invalid: it must be a variable name "
                    "such as 'TERM'."
                )
        set_(self, "inherit_env", inherit)
        if self.rlimits_via not in ("preexec_fn", "prologue"):
            raise ConfigurationError(
                f"rlimits_via={self.rlimits_via!r} is invalid: use 'preexec_fn' (set in the "
                "forked child before exec, as ADK does) or 'prologue' (bash's builtin ulimit "
                "before the command; keeps CPython's vfork fast path)."
            )
        if self.drop_privileges is not None and not isinstance(self.drop_privileges, bool):
            raise ConfigurationError(
                f"drop_privileges={self.drop_privileges!r} is invalid: use True, False, or "
                "None (drop them when running as root)."
            )
        no_confirm = _tuple_of_str(
            "no_confirmation_prefixes", self.no_confirmation_prefixes, "('git status', 'ls')"
        )
        set_(self, "no_confirmation_prefixes", no_confirm)
        if isinstance(self.hardening, HardeningRule) or not isinstance(self.hardening, Iterable):
            raise ConfigurationError(
                f"hardening={self.hardening!r} is invalid: it must be a tuple of "
                "HardeningRule, e.g. DEFAULT_HARDENING + (HardeningRule(...),)."
            )
        rules = tuple(self.hardening)
        for rule in rules:
            if not isinstance(rule, HardeningRule):
                raise ConfigurationError(
                    f"hardening entry {rule!r} is invalid: entries must be HardeningRule."
                )
        set_(self, "hardening", rules)
        by_program: dict[str, list[HardeningRule]] = {}
        for rule in rules:
            if rule.program is not None:
                by_program.setdefault(rule.program, []).append(rule)
        set_(self, "_allowed", _Prefixes.build("allowed_command_prefixes", allowed))
        set_(self, "_no_confirm", _Prefixes.build("no_confirmation_prefixes", no_confirm))
        set_(
            self,
            "_by_program",
            {k: _ProgramRules.build(k, v) for k, v in by_program.items()},
        )
        set_(self, "program_specs", _specs_field(self.program_specs))
        set_(self, "_env_rules", tuple(r for r in rules if r.env is not None))
        set_(self, "_memo", OrderedDict())
        set_(self, "_memo_lock", threading.Lock())
        set_(self, "_redirect_rules", tuple(r for r in rules if r.redirect is not None))

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the fields (pickle, copy): the compiled matchers and the
        # read-only env mapping are derived, and mappingproxy does not pickle.
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["env"] = dict(self.env)
        values["program_specs"] = dict(self.program_specs)
        return (_rebuild_policy, (type(self), values))

    def __hash__(self) -> int:
        names = [f.name for f in fields(self)]
        values = [getattr(self, f.name) for f in fields(self)]
        values[names.index("env")] = tuple(sorted(self.env.items()))
        values[names.index("program_specs")] = tuple(sorted(self.program_specs))
        return hash(tuple(values))

    # -- deciding ------------------------------------------------------------------

    def check(self, command: str) -> PolicyDecision:
        """Decide whether ``command`` may run. Never raises; see the module docstring
        for the order in which rules apply."""
        try:
            return self._decide(command)[0]
        except Exception as exc:  # fail closed on a bug, never crash the agent
            return PolicyDecision(
                allowed=False,
                rule="R6",
                reason=f"blocked by R6 (cannot be parsed safely): internal error "
                f"{type(exc).__name__}: {_shown(str(exc))}",
            )

    def needs_confirmation(self, command: str) -> bool:
        """False only when ``check`` allows ``command`` and every simple command in
        it matches ``no_confirmation_prefixes`` the way ``check`` matches the
        allowlist, with no function definitions and no redirection that writes a
        file (``ls > notes`` writes; ``ls 2>/dev/null`` does not)."""
        try:
            decision, script = self._decide(command)
        except Exception:
            return True
        no_confirm: _Prefixes = self.__dict__["_no_confirm"]
        if not decision.allowed or script is None:
            return True
        if no_confirm.wildcard:
            return False
        if not no_confirm.entries or not script.commands or script.functions:
            return True
        if self.program_specs and any(
                cmd.words and runs_programs(cmd.words, self.program_specs) is not None
                for cmd in script.commands):
            return True  # the spec says this command line runs another program
        for redirect in script.redirects:
            target = redirect.target
            if redirect.operator == ">&" and target is not None and target.value is not None:
                if target.value.isdigit() or target.value == "-":
                    continue  # 2>&1: a descriptor, not a file
            elif redirect.operator in ("<", "<>"):
                # reading a file into a program that copies stdin out ('git name-rev
                # --annotate-stdin < FILE') prints it: a read no prefix names
                pass
            elif redirect.operator not in _WRITE_REDIRECTS:
                continue
            if target is None or target.value != "/dev/null":
                return True
        return any(isinstance(self._allowlist(c, no_confirm), _Blocked) for c in script.commands)

    def rule_subjects(self, command: str) -> tuple[tuple[str, ...], ...]:
        """The simple commands a remembered rule must cover for ``command`` to be
        approved by rules, or ``()`` when no rule may approve it: a blocked command, a
        function definition, a heredoc, or a redirection other than a descriptor
        duplication or ``/dev/null``. A rule covers argv words; a redirection is not a
        word, so ``echo hi > setup.py`` or ``cat < secret`` would otherwise pass as the
        ``echo hi`` or ``cat`` a human approved."""
        try:
            decision, script = self._decide(command)
        except Exception:
            return ()
        if not decision.allowed or script is None or script.functions:
            return ()
        if any(op.kind == "heredoc" for op in script.operators):
            return ()
        for redirect in script.redirects:
            target = redirect.target
            value = None if target is None else target.value
            if redirect.operator in (">&", "<&") and value is not None and (
                    value.isdigit() or value == "-"):
                continue  # 2>&1, >&2: a descriptor, not a file
            if redirect.operator in ("<&-", ">&-"):
                continue
            if value == "/dev/null" and redirect.operator != "<<<":
                continue
            return ()
        return decision.commands

    def _decide(self, command: object) -> tuple[PolicyDecision, ParsedScript | None]:
        """The decision and parse of ``command``, each command parsed once: a call
        asks for the decision (precheck), the subjects a remembered rule matches and
        whether a human must confirm, and a long command can take tens of ms to parse.
        The policy is immutable, so its decisions are kept (a small LRU, per policy)."""
        if isinstance(command, str):
            memo: OrderedDict[str, tuple[PolicyDecision, ParsedScript | None]]
            memo, lock = self.__dict__["_memo"], self.__dict__["_memo_lock"]
            with lock:
                found = memo.get(command)
                if found is not None:
                    memo.move_to_end(command)
                    return found
            result = self._decide_uncached(command)
            with lock:
                memo[command] = result
                if len(memo) > _MEMO_SIZE:
                    memo.popitem(last=False)
            return result
        return self._decide_uncached(command)

    def _decide_uncached(self, command: object) -> tuple[PolicyDecision, ParsedScript | None]:
        if not isinstance(command, str):
            return PolicyDecision(
                allowed=False,
                rule="R6",
                reason=f"blocked by R6 (cannot be parsed safely): the command must be a "
                f"string, not {type(command).__name__}",
            ), None
        script = parse(
            command,
            max_bytes=self.max_command_bytes,
            max_depth=self.max_parse_depth,
            max_seconds=self.max_parse_seconds,
        )
        commands = tuple(c.argv for c in script.commands)
        matched: list[str] = []
        blocked = self._first_violation(script, matched)
        if blocked is not None:
            reason = (
                f"blocked by {blocked.rule} ({_RULE_TITLES[blocked.rule]}): {blocked.detail}"
                if blocked.rule
                else f"blocked: {blocked.detail}"
            )
            return PolicyDecision(
                allowed=False,
                reason=reason,
                rule=blocked.rule,
                command=None if blocked.command is None else _shown(blocked.command, 400),
                token=None if blocked.token is None else _shown(blocked.token, 200),
                commands=commands,
            ), script
        allowed: _Prefixes = self.__dict__["_allowed"]
        if allowed.wildcard:
            reason = "allowed: '*' allows any command; no operator, parse, hardening or control-character rule applies"
        else:
            used = ", ".join(_q(m, 60) for m in dict.fromkeys(matched))
            reason = (
                f"allowed: every simple command matches an allowed prefix ({used})"
                if used
                else "allowed: nothing in it runs a program"
            )
        return PolicyDecision(
            allowed=True, reason=reason, rule=None, command=None, token=None, commands=commands
        ), script

    def _first_violation(self, script: ParsedScript, matched: list[str]) -> _Blocked | None:
        """The first rule ``script`` breaks; fills ``matched`` with the prefixes used."""
        allowed: _Prefixes = self.__dict__["_allowed"]
        wildcard = allowed.wildcard
        specs = self.program_specs
        for finding in script.findings:
            if finding.rule in ("R8", "R6", "R9"):
                return _Blocked(finding.rule, finding.message, None, finding.token)
        if not script.source.strip() or (
            not script.commands
            and not script.operators
            and not script.findings
            and not script.redirects
        ):
            return _Blocked(None, "the command is empty; nothing to run")
        blocked_operators = self.blocked_operators
        for op in script.operators if blocked_operators else ():
            hits = [e for e in blocked_operators if any(e in t for t in op.texts)]
            for entry in sorted(hits, key=lambda e: e != op.text):
                spelled = "a newline" if op.text == "\n" else repr(op.text)
                also = f" (blocked operator {entry!r})" if entry != op.text else ""
                return _Blocked(
                    "R1",
                    f"{spelled} is used as bash {op.kind.replace('_', ' ')}{also}; "
                    f"this policy blocks {', '.join(map(repr, self.blocked_operators))}. "
                    f"Quoted text is not affected; {_r1_advice(op.kind, op.text)}",
                    None,
                    op.text,
                )
        if not wildcard:
            for name in script.functions:
                return _Blocked(
                    "R5",
                    f"defines the function {name!r}, which would run instead of any "
                    "program of that name; function definitions are not allowed",
                    None,
                    name,
                )
        for cmd in script.commands:
            use = specs
            if not wildcard:
                result = self._allowlist(cmd, allowed)
                if isinstance(result, _Blocked):
                    return result
                if result:
                    matched.append(" ".join(result))
                    # A prefix that pins an option ("git remote -v", "git branch
                    # --list") states a mode; without specs of the policy's own,
                    # the shipped ones keep it (no further subcommand, no negation).
                    if not use and any(w.startswith("-") for w in result[1:]):
                        path = " ".join(itertools.takewhile(lambda w: not w.startswith("-"), result))
                        if path in builtin_specs():
                            use = builtin_specs()
            problem = self._hardening(cmd)
            if problem is not None:
                return problem
            if use and cmd.words:
                problem = self._spec(cmd, use)
                if problem is not None:
                    return problem
        if not wildcard:
            for finding in script.findings:
                if finding.rule == "R2":
                    return _Blocked("R2", finding.message, None, finding.token)
        return self._hardening_script(script)

    def _allowlist(self, cmd: SimpleCommand, prefixes: _Prefixes) -> tuple[str, ...] | _Blocked:
        """R4, R5, R2 and R3 for one simple command: the matching prefix, or why none does."""
        if prefixes.wildcard:
            return ("*",)
        text = cmd.text
        if cmd.kind == "loop":
            name = cmd.assignments[0].name
            if (_LOOP_NAME.match(name) and name not in self.env and name not in self.inherit_env
                    and name not in _READ_LOWERCASE):
                return ()  # a shell variable no program and no part of bash reads
            what = ("the loop variable " + repr(name) + " is assigned on every iteration"
                    if not text.startswith("${") else f"{text!r} assigns {name!r}")
            return _Blocked(
                "R5",
                f"{what}, and bash or the programs it runs read that name; use a lower-case "
                "name of your own (for f in …)",
                text,
                name,
            )
        assigned = [scan_word(a.text).value for a in cmd.assignments] if cmd.assignments else []
        if not cmd.words:
            if not assigned:
                return ()  # only redirections: nothing runs
            matched = prefixes.match(assigned)
            if matched is not None:
                return matched
            return _Blocked(
                "R5",
                f"{_q(text)} only assigns shell variables, which can change what later "
                "commands do; assignments are not allowed. Pass values as arguments.",
                text,
                cmd.assignments[0].text,
            )
        head = cmd.words[0]
        if not head.plain:
            resolves = f" (bash would run {head.value!r})" if head.value else ""
            return _Blocked(
                "R4",
                f"the command word {_q(head.text)}{resolves} is not a plain name: "
                "quotes, backslashes, expansions, globs and braces are not allowed there. "
                f"Write the program name plainly. {self._allowed_hint(prefixes)}",
                text,
                head.text,
            )
        values = [w.value for w in cmd.words]
        if assigned:
            matched = prefixes.match([*assigned, *values])
            if matched is not None:
                return matched
            if prefixes.match(values) is not None:
                plain = " ".join(w.text for w in cmd.words)
                return _Blocked(
                    "R5",
                    f"the leading assignment {_q(cmd.assignments[0].text)} changes the "
                    f"environment of {head.text!r} (as LD_PRELOAD or GIT_PAGER would); "
                    f"leading assignments are not allowed. Run {_q(plain)} without it.",
                    text,
                    cmd.assignments[0].text,
                )
        else:
            matched = prefixes.match(values)
            if matched is not None:
                return matched
        hint = self._allowed_hint(prefixes)
        name = head.value or head.text
        if "/" in name:
            return _Blocked(
                "R4",
                f"the command word {_q(name)} is a path; programs are matched by "
                f"plain name, never by path or basename. {hint}",
                text,
                name,
            )
        if name in WRAPPERS:
            if name in _RUNS_ARGUMENTS:
                what = "runs its arguments as a command"
            elif name in _CHANGES_NAMES:
                what = "changes what names or options mean to later commands"
            else:
                what = "assigns or removes shell variables"
            return _Blocked(
                "R5",
                f"{name!r} {what}, so it is allowed only when a prefix names it. {hint}",
                text,
                name,
            )
        near = prefixes.near_miss(values)
        if near is not None:
            prefix, word = near
            return _Blocked(
                "R3",
                f"{_q(text)} is not allowed: the prefix {' '.join(prefix)!r} matches "
                f"whole words only, and {_q(word)} is a different word. {hint}",
                text,
                word,
            )
        same_program = prefixes.by_first.get(name, ())
        if same_program:
            listed = ", ".join(repr(" ".join(p)) for p in same_program[:10])
            return _Blocked(
                "R2",
                f"{_q(text)} is not allowed: {name!r} is allowed only as {listed}.",
                text,
                " ".join(w.shown for w in cmd.words[:2]),
            )
        return _Blocked(
            "R2",
            f"{_q(text)} is not allowed: no allowed prefix matches {_q(name)}. {hint}",
            text,
            name,
        )

    def _allowed_hint(self, prefixes: _Prefixes) -> str:
        if not prefixes.entries:
            return "No command is allowed by this policy."
        shown = [" ".join(p) for p in prefixes.entries]
        listed = ", ".join(shown[:20]) + (", …" if len(shown) > 20 else "")
        return f"Allowed prefixes: {_shown(listed, 400)}."

    def _spec(self, cmd: SimpleCommand, specs: Mapping[str, ProgramSpec]) -> _Blocked | None:
        """R7 as an allowlist: the command line must fit its program's spec; a command
        line its spec marks as running another program (``runs_programs``, ``unlisted_options
        = "ask"``) is refused under a read-only policy (`needs_confirmation` asks otherwise)."""
        runs: list[str] = []
        violation = check_spec(cmd.words, specs, runs)
        if violation is None and runs and self.filesystem == "read-only":
            return _Blocked(
                "R7",
                f"{runs[0]}; this policy is read-only (filesystem = \"read-only\") and runs "
                "no program that another program starts from its options. Run it without that.",
                cmd.text,
                cmd.words[0].text,
            )
        if violation is None:
            return None
        return _Blocked(
            "R7",
            f"{violation.message} [spec {violation.spec!r}]. Run it without that, or extend "
            "the spec ([programs] in the policy file) if it is safe.",
            cmd.text,
            violation.token,
        )

    def _hardening(self, cmd: SimpleCommand) -> _Blocked | None:
        """R7 for one simple command: its program, and any program a wrapper runs."""
        words = cmd.words
        if not words:
            return None
        by_program: Mapping[str, _ProgramRules] = self.__dict__["_by_program"]
        first = _program_name(words[0])
        positions: Iterable[int] = (0,)
        if first in _RUNS_ARGUMENTS:
            positions = range(len(words))
        for pos in positions:
            name = _program_name(words[pos])
            rules = by_program.get(name) if name else None
            if rules is None:
                continue
            hit = rules.check(words[pos:])
            if hit is not None:
                return _Blocked(
                    "R7",
                    f"{hit.label!r} in {_q(cmd.text)}: {hit.why}. This is blocked even "
                    "when the program is allowed; an argument bash expands counts as "
                    "one that could spell it.",
                    cmd.text,
                    hit.token,
                )
        env_rules: tuple[HardeningRule, ...] = self.__dict__["_env_rules"]
        if first in ("env", "export", "declare", "typeset", "local", "readonly"):
            for w in words[1:]:
                m = _ASSIGNMENT_ARG.match(w.shown)
                if m is not None:
                    blocked = self._env_rule(m.group(1), w.text, env_rules)
                    if blocked is not None:
                        return blocked
        return None

    def _env_rule(
        self, name: str, text: str, env_rules: Sequence[HardeningRule]
    ) -> _Blocked | None:
        for rule in env_rules:
            if rule.matches_env(name):
                return _Blocked(
                    "R7",
                    f"assigning {name} ({_q(text)}): {rule.why}. Assignments of "
                    f"{rule.label} are blocked under every policy.",
                    text,
                    name,
                )
        return None

    def _hardening_script(self, script: ParsedScript) -> _Blocked | None:
        env_rules: tuple[HardeningRule, ...] = self.__dict__["_env_rules"]
        for assignment in script.assignments:
            blocked = self._env_rule(assignment.name, assignment.text, env_rules)
            if blocked is not None:
                return blocked
        redirect_rules: tuple[HardeningRule, ...] = self.__dict__["_redirect_rules"]
        if not redirect_rules:
            return None
        for redirect in script.redirects:
            target = redirect.target
            if target is None or target.text.startswith(("<(", ">(")):
                continue  # a here-string, or a process substitution: no file is named
            if (
                redirect.operator in ("<&", ">&", "<&-", ">&-")
                and target.value is not None
                and (target.value.isdigit() or target.value == "-")
            ):
                continue  # duplicating or closing a descriptor
            if redirect.operator == "<<<":
                continue  # a here-string: text, not a file
            if target.value is None:
                return _Blocked(
                    "R7",
                    f"the redirection target {_q(target.text)} is expanded by bash (a "
                    "variable, glob or substitution), so it cannot be checked against "
                    + ", ".join(r.label for r in redirect_rules)
                    + ". Write the target as a literal path.",
                    None,
                    target.text,
                )
            checked = target.value
            for rule in redirect_rules:
                if rule.search(checked):
                    return _Blocked(
                        "R7",
                        f"the redirection target {_q(target.text)} matches {rule.label}: "
                        f"{rule.why}. Write the target as a literal path (not /dev/tcp, "
                        ".git/ or a shell start-up file).",
                        None,
                        target.text,
                    )
        return None

    # -- loading -------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "<mapping>") -> BashToolPolicy:
        """Build a policy from a mapping shaped like the TOML file (see `from_toml`)."""
        from sandbox.bash.policy.files import from_mapping

        return from_mapping(cls, data, source)

    @classmethod
    def from_toml_string(cls, text: str, *, source: str = "<string>") -> BashToolPolicy:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyFileError(f"{source}: not valid TOML: {exc}") from None
        from sandbox.bash.policy.files import from_mapping

        return from_mapping(cls, data, source)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> BashToolPolicy:
        """Load a policy file. Keys are the field names; sizes may be written as
        ``"512MiB"``; ``false`` means None for an optional limit or the timeout;
        ``[[hardening]]`` tables add rules to the default table (set
        ``default_hardening = false`` to start from an empty one).

        ``path`` is a file's path; a bare name given as a string (no ``/``, not ending
        in ``.toml``) is a policy's name, as in `sandbox.policies.resolve`: a shipped policy or one of
        ``$SANDBOX_POLICY_PATH``, never a file of the current directory."""
        from sandbox import policies

        named = isinstance(path, str) and policies.is_name(path)
        file = policies.resolve(path) if named else Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise PolicyFileError(
                f"{file}: cannot read the policy file ({exc.strerror or exc})"
            ) from None
        except UnicodeDecodeError as exc:
            raise PolicyFileError(f"{file}: the policy file is not UTF-8 ({exc})") from None
        return cls.from_toml_string(text, source=str(file))


def _rebuild_policy(cls: type[BashToolPolicy], values: dict[str, Any]) -> BashToolPolicy:
    return cls(**values)


# -- helpers kept beside the decision (policy files load in policy_file.py) ---------
def _r1_advice(kind: str, text: str) -> str:
    """What to do instead of a blocked operator, in words that fit that operator."""
    if kind == "redirect" and ">" in text:
        return ("drop the redirection: the call returns stdout and stderr (separately), "
                "so nothing needs to be written to a file.")
    if kind == "redirect":
        return "name the file as an argument instead (e.g. `wc -l FILE`, not `wc -l < FILE`)."
    if kind in ("heredoc", "herestring"):
        return "pass the text as an argument instead."
    if kind == "pipe":
        return "run each command in its own call and work with its output."
    if kind == "command_substitution":
        return "run the inner command in its own call first, then use its output."
    return "run one command per call instead."


def _byte_size(name: str, value: str) -> int:
    """A size written as text ("512MiB", "1GiB", "1GB"), read by pydantic's ByteSize."""
    from pydantic import ByteSize, TypeAdapter, ValidationError

    try:
        return int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        raise ConfigurationError(
            f'{name}={value!r} is invalid: write a number of bytes or a size such as '
            f'"512MiB" or "1GiB".') from None
