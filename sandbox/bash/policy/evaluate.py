"""`BashToolPolicy`: what an agent may run, decided on the bash parse tree.

``policy.evaluate(command)`` parses the command with tree-sitter-bash
(`sandbox.bash.syntax.parse`), applies the rules of docs/policy.md (`sandbox.bash.policy.rules`)
and returns one `Evaluation` (allow / confirm / block, the rule, the matched prefixes, the
rule subjects, the reason), kept in the policy's LRU; ``check``, ``needs_confirmation`` and
``rule_subjects`` are views of it. The rules apply in this order, so the first reason
given is the most useful one:

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

import math
import os
import threading
import tomllib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sandbox.bash.config import DEFAULTS as DEFAULT_PROTECTED
from sandbox.bash.config import ConfinementRequest
from sandbox.bash.config import resolve_patterns as resolve_protected
from sandbox.bash.policy.decision import (
    _RULE_TITLES,
    Decision,
    Evaluation,
    PolicyDecision,
    Rule,
    _Blocked,
    _evaluation,
    _q,
    _shown,
)
from sandbox.bash.policy.hardening import (
    DEFAULT_HARDENING,
    HardeningRule,
)
from sandbox.bash.policy.matching import (
    _Prefixes,
    _ProgramRules,
)
from sandbox.bash.policy.rules import (
    WRAPPERS,
    _Deciding,
)
from sandbox.bash.policy.specs import ProgramSpec, runs_programs
from sandbox.bash.policy.values import (
    _MAX_COMMAND_BYTES,
    _NAME,
    _NO_SPECS,
    _OPERATOR_CHARS,
    _byte_size,
    _limit,
    _specs_field,
    _tuple_of_str,
)
from sandbox.bash.syntax.model import ParsedScript
from sandbox.bash.syntax.parse import parse
from sandbox.errors import ConfigurationError, PolicyFileError

__all__ = ["DEFAULT_ENV", "WRAPPERS", "BashToolPolicy", "Decision", "Evaluation", "PolicyDecision",
           "Rule"]

DEFAULT_ENV: Mapping[str, str] = MappingProxyType(
    {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
)

_WRITE_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|"})

# Decisions a policy keeps (commands are at most max_command_bytes long).
_MEMO_SIZE = 64


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
class BashToolPolicy(_Deciding):
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

    def evaluate(self, command: str) -> Evaluation:
        """Decide ``command`` once: allow, confirm or block, the rule, the matched
        prefixes, the rule subjects and the reason (`Evaluation`). Never raises (an
        internal error blocks, R6); see the module docstring for the order in which
        rules apply. The policy is immutable, so its evaluations are kept (a small LRU,
        per policy): a call asks for the decision (precheck), whether a human must
        confirm, what the human sees and the subjects a remembered rule matches, and a
        long command can take tens of ms to parse."""
        try:
            return self._evaluate(command)
        except Exception as exc:  # fail closed on a bug, never crash the agent
            reason = (f"blocked by R6 (cannot be parsed safely): internal error "
                      f"{type(exc).__name__}: {_shown(str(exc))}")
            return _evaluation(
                Decision.BLOCK, Rule.R6, reason, (), (), (), None, None,
                PolicyDecision(allowed=False, rule="R6", reason=reason),
            )

    def check(self, command: str) -> PolicyDecision:
        """Decide whether ``command`` may run: `evaluate`'s decision in the shape
        `PolicyDecision` has always had. Never raises."""
        return self.evaluate(command).policy_decision

    def needs_confirmation(self, command: str) -> bool:
        """False only when ``check`` allows ``command`` and every simple command in
        it matches ``no_confirmation_prefixes`` the way ``check`` matches the
        allowlist, with no function definitions and no redirection that writes a
        file (``ls > notes`` writes; ``ls 2>/dev/null`` does not). A view of
        `evaluate`."""
        return self.evaluate(command).needs_confirmation

    def rule_subjects(self, command: str) -> tuple[tuple[str, ...], ...]:
        """The simple commands a remembered rule must cover for ``command`` to be
        approved by rules, or ``()`` when no rule may approve it: a blocked command, a
        function definition, a heredoc, or a redirection other than a descriptor
        duplication or ``/dev/null``. A rule covers argv words; a redirection is not a
        word, so ``echo hi > setup.py`` or ``cat < secret`` would otherwise pass as the
        ``echo hi`` or ``cat`` a human approved. A view of `evaluate`."""
        return self.evaluate(command).subjects

    def _evaluate(self, command: object) -> Evaluation:
        """`evaluate` through the policy's LRU (string commands only); may raise."""
        if isinstance(command, str):
            memo: OrderedDict[str, Evaluation]
            memo, lock = self.__dict__["_memo"], self.__dict__["_memo_lock"]
            with lock:
                found = memo.get(command)
                if found is not None:
                    memo.move_to_end(command)
                    return found
            result = self._evaluate_uncached(command)
            with lock:
                memo[command] = result
                if len(memo) > _MEMO_SIZE:
                    memo.popitem(last=False)
            return result
        return self._evaluate_uncached(command)

    def _decide(self, command: object) -> tuple[PolicyDecision, ParsedScript | None]:
        """`check`'s decision and the parse it was made on (for bench/ and tests)."""
        evaluation = self._evaluate(command)
        return evaluation.policy_decision, evaluation.script

    def _decide_uncached(self, command: object) -> tuple[PolicyDecision, ParsedScript | None]:
        """`_decide` past the LRU (bench/bash.py times this)."""
        evaluation = self._evaluate_uncached(command)
        return evaluation.policy_decision, evaluation.script

    def _evaluate_uncached(self, command: object) -> Evaluation:
        if not isinstance(command, str):
            reason = (f"blocked by R6 (cannot be parsed safely): the command must be a "
                      f"string, not {type(command).__name__}")
            return _evaluation(
                Decision.BLOCK, Rule.R6, reason, (), (), (), None, None,
                PolicyDecision(allowed=False, rule="R6", reason=reason),
            )
        script = parse(
            command,
            max_bytes=self.max_command_bytes,
            max_depth=self.max_parse_depth,
            max_seconds=self.max_parse_seconds,
        )
        commands = tuple([c.argv for c in script.commands])
        matched: list[str] = []
        blocked = self._first_violation(script, matched)
        if blocked is not None:
            reason = (
                f"blocked by {blocked.rule} ({_RULE_TITLES[blocked.rule]}): {blocked.detail}"
                if blocked.rule
                else f"blocked: {blocked.detail}"
            )
            shown_command = None if blocked.command is None else _shown(blocked.command, 400)
            shown_token = None if blocked.token is None else _shown(blocked.token, 200)
            return _evaluation(
                Decision.BLOCK, Rule(blocked.rule) if blocked.rule else Rule.EMPTY, reason,
                (), (), commands, shown_command, shown_token,
                PolicyDecision(allowed=False, reason=reason, rule=blocked.rule,
                               command=shown_command, token=shown_token, commands=commands),
                script,
            )  # fmt: skip
        allowed: _Prefixes = self.__dict__["_allowed"]
        if allowed.wildcard:
            prefixes: tuple[str, ...] = ("*",)
            reason = "allowed: '*' allows any command; no operator, parse, hardening or control-character rule applies"
        else:
            prefixes = tuple(matched) if len(matched) < 2 else tuple(dict.fromkeys(matched))
            used = ", ".join(_q(m, 60) for m in prefixes)
            reason = (
                f"allowed: every simple command matches an allowed prefix ({used})"
                if used
                else "allowed: nothing in it runs a program"
            )
        return _evaluation(
            Decision.CONFIRM if self._confirmation_needed(script) else Decision.ALLOW,
            None, reason, prefixes, _rule_subjects(script, commands), commands, None, None,
            PolicyDecision(allowed=True, reason=reason, rule=None, command=None, token=None,
                           commands=commands),
            script,
        )  # fmt: skip

    def _confirmation_needed(self, script: ParsedScript) -> bool:
        """Whether a human must confirm an allowed ``script`` (see `needs_confirmation`)."""
        no_confirm: _Prefixes = self.__dict__["_no_confirm"]
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
        from sandbox.policies import is_name, resolve

        named = isinstance(path, str) and is_name(path)
        file = resolve(path) if named else Path(path)
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




def _rule_subjects(
    script: ParsedScript, commands: tuple[tuple[str, ...], ...]
) -> tuple[tuple[str, ...], ...]:
    """The subjects of an allowed ``script`` (see `BashToolPolicy.rule_subjects`)."""
    if not (script.functions or script.operators or script.redirects):
        return commands
    if script.functions:
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
    return commands
