"""The rules of docs/policy.md applied to one parsed command, in order (`_Deciding`, a base
of `BashToolPolicy`): the first rule broken, or the prefixes that allowed it."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence

from sandbox.bash.policy.decision import (
    _Blocked,
    _q,
    _shown,
)
from sandbox.bash.policy.hardening import HardeningRule
from sandbox.bash.policy.matching import (
    _Prefixes,
    _program_name,
    _ProgramRules,
)
from sandbox.bash.policy.specs import ProgramSpec, builtin_specs, check_spec
from sandbox.bash.syntax.model import ParsedScript, SimpleCommand
from sandbox.bash.syntax.words import scan_word

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
# Loop variables that only the script itself reads: lower case, and not one of the
# lower-case names that programs (proxies) or bash read.
_LOOP_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
_READ_LOWERCASE = frozenset({"http_proxy", "https_proxy", "ftp_proxy", "all_proxy",
                             "no_proxy", "auto_resume", "histchars"})  # fmt: skip
_ASSIGNMENT_ARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")


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




class _Deciding:
    """The deciding half of `BashToolPolicy` (its base): the rules applied to a parse."""

    blocked_operators: tuple[str, ...]
    program_specs: Mapping[str, ProgramSpec]
    env: Mapping[str, str]
    inherit_env: tuple[str, ...]
    filesystem: str

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
                    if not use and result in allowed.pins_option:
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
