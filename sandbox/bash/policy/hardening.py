"""R7: options and arguments that make an otherwise allowed program run commands.

The table is data. Each `HardeningRule` names a program (matched on the command
word, or on any later word when the command word is a wrapper such as ``xargs``),
an environment variable pattern or a redirection-target pattern, and what makes
it dangerous:

- ``option``: an option, matched the way the program's parser would accept it:
  ``--upload-pack`` also as ``--upload-pack=x`` and abbreviated (``--upl=x``,
  git, argparse and GNU getopt accept unique prefixes); a short ``-O`` also
  glued (``-Ocmd``) and inside bundles (``-nO``); a single-dash long option
  (find's ``-exec``) as the exact word;
- ``pattern``: a regular expression searched in every argument (``ext::``);
- ``subcommands``: the rule applies only to these subcommands (``grep``,
  ``bisect run``); with no option or pattern the subcommand alone is blocked;
  ``unless_any`` exempts commands holding one of these words (``--get``);
  ``before_subcommand`` limits an option to the program's global options
  (``git -c``, not ``git log -c``);
- ``analyzer``: a built-in check of a script argument (``sed-script``,
  ``awk-program``);
- ``env``: an ``fnmatch`` pattern of variable names whose assignment is blocked;
- ``redirect``: a regular expression searched in redirection targets
  (``/dev/tcp/``, ``.git/``).

A word bash will expand (``"$x"``, ``$(cmd)``, ``*``) cannot be checked, so it
counts as a match wherever its literal start leaves room for one.

Extend the table, don't edit it::

    BashToolPolicy(..., hardening=DEFAULT_HARDENING + (HardeningRule(...),))
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from sandbox.bash.policy.analyzers import ANALYZERS
from sandbox.errors import ConfigurationError

__all__ = [
    "ANALYZERS",
    "DEFAULT_HARDENING",
    "PROGRAM_SYNTAX",
    "HardeningRule",
    "ProgramSyntax",
]


@dataclass(frozen=True)
class HardeningRule:
    """One row of the R7 table. Exactly one of ``program`` and ``env`` is set."""

    why: str
    program: str | None = None
    option: str | None = None
    pattern: str | None = None
    subcommands: tuple[str, ...] = ()
    before_subcommand: bool = False
    unless_any: tuple[str, ...] = ()
    analyzer: str | None = None
    env: str | None = None
    redirect: str | None = None
    _regex: re.Pattern[str] | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        def bad(name: str, value: object, must: str) -> ConfigurationError:
            return ConfigurationError(f"HardeningRule {name}={value!r} is invalid: {must}")

        if not isinstance(self.why, str) or not self.why.strip():
            raise bad("why", self.why, "say why the option is dangerous; it is shown to the model")
        if sum(x is not None for x in (self.program, self.env, self.redirect)) != 1:
            raise bad(
                "program",
                self.program,
                "set exactly one of program='git' (an argv rule), env='GIT_*' (an "
                "assignment rule) or redirect='^/dev/tcp/' (a redirection-target rule)",
            )
        for name in ("program", "option", "pattern", "analyzer", "env", "redirect"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise bad(name, value, "must be a non-empty string or None")
        for name in ("subcommands", "unless_any"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            if isinstance(value, list):
                value = tuple(value)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise bad(name, value, "must be a tuple of non-empty strings")
            object.__setattr__(self, name, value)
        if self.option is not None and not self.option.startswith("-"):
            raise bad("option", self.option, "an option starts with '-' (e.g. '--exec' or '-c')")
        if self.analyzer is not None and self.analyzer not in ANALYZERS:
            raise bad("analyzer", self.analyzer, f"must be one of {sorted(ANALYZERS)}")
        if self.pattern is not None:
            try:
                object.__setattr__(self, "_regex", re.compile(self.pattern, re.IGNORECASE))
            except re.error as exc:
                raise bad("pattern", self.pattern, f"not a regular expression ({exc})") from exc
        if self.env is not None and (self.option or self.pattern or self.subcommands):
            raise bad("env", self.env, "an env rule takes no option, pattern or subcommands")
        if self.redirect is not None:
            if self.option or self.pattern or self.subcommands:
                raise bad(
                    "redirect",
                    self.redirect,
                    "a redirect rule takes no option, pattern or subcommands",
                )
            try:
                object.__setattr__(self, "_regex", re.compile(self.redirect))
            except re.error as exc:
                raise bad("redirect", self.redirect, f"not a regular expression ({exc})") from exc

    def search(self, text: str) -> bool:
        """Whether ``pattern`` occurs in ``text`` (case-insensitively)."""
        return self._regex is not None and self._regex.search(text) is not None

    def matches_env(self, name: str) -> bool:
        return self.env is not None and fnmatch.fnmatchcase(name, self.env)

    @property
    def label(self) -> str:
        """Short human name: ``git -c``, ``git grep -O``, ``GIT_*=``."""
        if self.env is not None:
            return f"{self.env}="
        if self.redirect is not None:
            return f"> /{self.redirect}/"
        parts = [self.program or "", *self.subcommands[:1]]
        parts.append(self.option or (f"/{self.pattern}/" if self.pattern else ""))
        if self.analyzer:
            parts.append(f"<{self.analyzer}>")
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class ProgramSyntax:
    """What a rule needs to know of a program's command line to find its subcommand.

    ``value_options`` take the next word as their value (``git -C dir``).
    ``complete`` says the list is complete; when it is not, any option may take
    the next word, so both that word and the one after count as possible
    subcommands. ``value_short`` are short options whose value may be glued
    (``-Cdir``), which ends a bundle. ``bundle_first_arg`` is tar's old style
    (``tar xzf``: the first word is a bundle without a dash).
    """

    value_options: frozenset[str] = frozenset()
    complete: bool = False
    value_short: str = ""
    bundle_first_arg: bool = False


PROGRAM_SYNTAX: dict[str, ProgramSyntax] = {
    "git": ProgramSyntax(
        value_options=frozenset(
            {
                "-C",
                "-c",
                "--git-dir",
                "--work-tree",
                "--namespace",
                "--config-env",
                "--super-prefix",
                "--list-cmds",
                "--attr-source",
            }
        ),
        complete=True,
        value_short="Cc",
    ),
    "tar": ProgramSyntax(bundle_first_arg=True, value_short="fCbHIKLNTVgX"),
}



# ---------------------------------------------------------------------------
# The default table


def _rows(
    program: str,
    options: Sequence[str],
    why: str,
    *,
    subcommands: Sequence[str] = (),
    before_subcommand: bool = False,
) -> tuple[HardeningRule, ...]:
    return tuple(
        HardeningRule(
            why=why,
            program=program,
            option=option,
            subcommands=tuple(subcommands),
            before_subcommand=before_subcommand,
        )
        for option in options
    )


def _env(patterns: Sequence[str], why: str) -> tuple[HardeningRule, ...]:
    return tuple(HardeningRule(why=why, env=p) for p in patterns)


_GIT_CONFIG = (
    "sets git configuration for this command; core.pager, core.fsmonitor, "
    "core.sshCommand, core.hooksPath and alias.x='!cmd' run arbitrary commands"
)
_GIT_TRANSPORT = ("clone", "fetch", "pull", "push", "ls-remote", "remote", "submodule",
                  "archive", "fetch-pack", "send-pack")  # fmt: skip

DEFAULT_HARDENING: tuple[HardeningRule, ...] = (
    # git: global options (before the subcommand; `git log -c` is a diff format)
    *_rows("git", ("-c", "--config-env"), _GIT_CONFIG, before_subcommand=True),
    *_rows(
        "git",
        ("--output",),
        "writes the output to the given file: git log --format=... --output=.git/config "
        "writes a configuration that runs commands",
    ),
    *_rows(
        "git",
        ("--exec-path",),
        "runs git's subcommands from the given directory",
        before_subcommand=True,
    ),
    *_rows(
        "git",
        ("--upload-pack",),
        "runs the given command as the remote's upload-pack, through the shell, even "
        "for a local path",
        subcommands=("clone", "fetch", "pull", "ls-remote", "fetch-pack", "archive"),
    ),
    *_rows(
        "git",
        ("-u",),
        "runs the given command as the remote's upload-pack, through the shell, even "
        "for a local path",
        subcommands=("clone", "ls-remote"),
    ),
    *_rows(
        "git",
        ("--receive-pack", "--exec"),
        "runs the given command on the 'remote' side, through the shell",
        subcommands=("push", "send-pack", "fetch-pack", "archive"),
    ),
    *_rows(
        "git",
        ("--exec", "-x"),
        "runs the given shell command after each commit",
        subcommands=("rebase",),
    ),
    *_rows(
        "git",
        ("-O", "--open-files-in-pager"),
        "runs the given command (as the pager) on the matching files",
        subcommands=("grep",),
    ),
    *_rows(
        "git",
        ("-x", "--extcmd"),
        "runs the given command on each changed file",
        subcommands=("difftool", "mergetool"),
    ),
    *_rows(
        "git",
        ("-c", "--config", "--template"),
        "configures the new repository (core.hooksPath, core.fsmonitor) or copies hooks "
        "that run during checkout",
        subcommands=("clone", "init"),
    ),
    *_rows(
        "git",
        ("--sendmail-cmd", "--smtp-server", "--to-cmd", "--cc-cmd", "--header-cmd"),
        "runs the given command to send or address mail",
        subcommands=("send-email",),
    ),
    HardeningRule(
        program="git",
        pattern=r"(^|=)ext::",
        subcommands=_GIT_TRANSPORT,
        why="the ext:: transport runs an arbitrary command as the remote",
    ),
    HardeningRule(
        program="git",
        subcommands=("bisect run",),
        why="runs the given command on each bisection step",
    ),
    HardeningRule(
        program="git",
        subcommands=("submodule foreach",),
        why="runs the given shell command in each submodule",
    ),
    HardeningRule(
        program="git", subcommands=("filter-branch",), why="its filters are shell commands"
    ),
    HardeningRule(program="git", subcommands=("instaweb",), why="starts a web server command"),
    HardeningRule(
        program="git",
        subcommands=("config",),
        unless_any=(
            "--get",
            "--get-all",
            "--get-regexp",
            "--get-urlmatch",
            "--list",
            "-l",
        ),
        why="writes configuration (core.pager, core.fsmonitor, alias.x='!cmd') that later "
        "git commands run; read values with 'git config --get NAME' or 'git config --list'",
    ),
    # npm / npx
    *_rows("npm", ("--script-shell",), "runs package scripts with the given program"),
    *_rows("npm", ("--node-options",), "passes options such as --require to node for every script"),
    HardeningRule(
        program="npm",
        subcommands=("exec", "x", "explore", "create"),
        why="runs an arbitrary command or package binary",
    ),
    HardeningRule(program="npx", why="downloads and runs an arbitrary package binary"),
    # pytest
    *_rows("pytest", ("--basetemp",), "pytest deletes the given directory before the run"),
    *_rows(
        "pytest",
        ("-o", "--override-ini", "-c", "--config-file", "--junitxml", "--junit-xml",
         "--log-file", "--result-log", "--debug"),
        "writes a file the command names (-o log_file=conftest.py with log_file_format "
        "writes code the next pytest runs); set these in the project's own config",
    ),
    *_rows(
        "pytest",
        ("--benchmark-json", "--benchmark-save", "--benchmark-autosave", "--cov-report",
         "--html", "--report-log", "--json-report-file", "--alluredir"),
        "a plugin option that writes a file the command names",
    ),
    HardeningRule(
        program="pytest",
        pattern=r"^@",
        why="'@FILE' reads more arguments from FILE (pytest 8.2+), which the policy cannot "
        "see: '@/dev/stdin <<< -olog_file=…' passed options it refuses",
    ),
    # find and fd
    *_rows(
        "find",
        ("-exec", "-execdir", "-ok", "-okdir"),
        "runs the given command on each file",
    ),
    *_rows("find", ("-delete",), "deletes every matching file"),
    *_rows("find", ("-fprint", "-fprint0", "-fprintf", "-fls"), "writes to the given file"),
    *_rows("fd", ("-x", "--exec", "-X", "--exec-batch"), "runs the given command on the results"),
    *_rows(
        "fdfind", ("-x", "--exec", "-X", "--exec-batch"), "runs the given command on the results"
    ),
    # ripgrep
    *_rows("rg", ("--pre",), "runs the given preprocessor command on every file searched"),
    *_rows("rg", ("--hostname-bin",), "runs the given program to find the host name"),
    # tar, sort, split, zip: options that name a program
    *_rows(
        "tar",
        (
            "--to-command",
            "--checkpoint-action",
            "--use-compress-program",
            "-I",
            "--rsh-command",
            "--info-script",
            "--new-volume-script",
            "-F",
            "--rmt-command",
        ),
        "runs the given command",
    ),
    *_rows("sort", ("--compress-program",), "runs the given program to compress temporary files"),
    *_rows("split", ("--filter",), "runs the given shell command on each piece"),
    *_rows("zip", ("-TT", "--unzip-command"), "runs the given command to test the archive"),
    # sed and awk: script languages with exec and file-writing commands
    HardeningRule(
        program="sed", analyzer="sed-script", why="the sed script runs commands or writes files"
    ),
    *_rows("sed", ("-f", "--file"), "reads a sed script this check cannot see"),
    *(
        HardeningRule(
            program=awk, analyzer="awk-program", why="the awk program runs commands or writes files"
        )
        for awk in ("awk", "gawk", "mawk", "nawk")
    ),
    *(
        rule
        for awk in ("awk", "gawk", "mawk", "nawk")
        for rule in _rows(
            awk,
            ("-f", "--file", "-E", "--exec", "-i", "--include", "-l", "--load", "-W"),
            "loads awk source or an extension this check cannot see (mawk's -W exec "
            "runs a program file)",
        )
    ),
    *(
        rule
        for awk in ("awk", "gawk")
        for rule in _rows(
            awk,
            ("-o", "--pretty-print", "-p", "--profile", "-d", "--dump-variables", "-D",
             "--debug"),
            "writes a file (gawk's pretty-print, profile or variable dump) or starts "
            "gawk's debugger",
        )
    ),
    # remote shells and pagers
    *_rows("ssh", ("-o", "-F"), "ssh options such as ProxyCommand and LocalCommand run commands"),
    *_rows("scp", ("-o", "-F", "-S"), "ssh options such as ProxyCommand run commands"),
    *_rows("rsync", ("-e", "--rsh", "--rsync-path"), "runs the given remote-shell command"),
    *_rows("man", ("-P", "--pager", "-H", "--html"), "runs the given pager or browser command"),
    *(
        HardeningRule(
            program=pager,
            pattern=r"^\+",
            why="an initial less command ('+!cmd') runs a shell command",
        )
        for pager in ("less", "more")
    ),
    # bash builtins that evaluate array subscripts (a[$(cmd)]) or assign variables
    *_rows(
        "printf",
        ("-v",),
        "assigns a shell variable (PATH, HOME, or an array subscript bash evaluates)",
    ),
    *_rows(
        "test", ("-v",), "bash evaluates an array subscript in the name, which can run a command"
    ),
    *_rows("[", ("-v",), "bash evaluates an array subscript in the name, which can run a command"),
    HardeningRule(
        program="let",
        why="evaluates arithmetic; a variable in it can run a command through an array subscript",
    ),
    *(
        HardeningRule(
            program=builtin,
            pattern=r"^[A-Za-z_][A-Za-z0-9_]*\[[^\]]*[^0-9@*\]][^\]]*\]",
            why="bash evaluates this array subscript as arithmetic, which can run a command",
        )
        for builtin in (
            "unset",
            "declare",
            "typeset",
            "local",
            "export",
            "readonly",
            "read",
            "mapfile",
            "readarray",
        )
    ),
    # redirection targets (an expansion at the start of a target counts as a match)
    HardeningRule(
        redirect=r"^/dev/(tcp|udp)/",
        why="bash opens /dev/tcp/HOST/PORT and /dev/udp/HOST/PORT as network sockets",
    ),
    HardeningRule(
        redirect=r"(^|/)\.git(/|$)",
        why="files in .git (config, hooks) run commands at the next git command",
    ),
    HardeningRule(
        redirect=r"(^|/)(\.gitconfig|\.config/git/)",
        why="git configuration can name commands that git runs",
    ),
    HardeningRule(
        redirect=r"(^|/)\.(bashrc|bash_profile|bash_login|profile|zshrc|zshenv|zprofile)$",
        why="shell start-up files run at the next shell",
    ),
    # environment assignments (leading VAR=value, VAR=value, export VAR=value)
    *_env(
        ("GIT_*",),
        "git reads GIT_* variables as configuration: GIT_PAGER, GIT_SSH_COMMAND, "
        "GIT_CONFIG_* and GIT_EXTERNAL_DIFF run commands",
    ),
    *_env(
        ("LD_*", "DYLD_*"),
        "the dynamic loader runs code from LD_PRELOAD/LD_LIBRARY_PATH libraries",
    ),
    *_env(
        (
            "BASH_ENV",
            "ENV",
            "BASH_FUNC_*",
            "SHELLOPTS",
            "BASHOPTS",
            "PROMPT_COMMAND",
            "PS4",
            "IFS",
            "PATH",
            "CDPATH",
            "GLOBIGNORE",
        ),
        "changes which program a name runs or makes bash run code",
    ),
    *_env(
        (
            "PAGER",
            "MANPAGER",
            "EDITOR",
            "VISUAL",
            "LESSOPEN",
            "LESSCLOSE",
            "BROWSER",
            "SSH_ASKPASS",
            "SUDO_ASKPASS",
        ),
        "names a command that programs run",
    ),
    *_env(
        (
            "NODE_OPTIONS",
            "npm_config_*",
            "NPM_CONFIG_*",
            "PYTHONSTARTUP",
            "PYTHONPATH",
            "PERL5OPT",
            "PERL5LIB",
            "RUBYOPT",
            "RUBYLIB",
            "JAVA_TOOL_OPTIONS",
        ),
        "makes the interpreter load code from elsewhere",
    ),
)
