"""Differential fuzzer: what bash really runs versus what ``BashToolPolicy.check`` allowed.

Commands are generated from a grammar covering every quoting form ('...', "...",
$'...', $"...", backslashes), parameter, arithmetic, brace and tilde expansion,
[[ ]], (( )), comments, here-documents, arrays, case, command and process
substitution, coproc, functions, line continuations and control characters; then
mutated by inserting bytes that move token boundaries (quotes, ``#``, ``;``,
backslashes, ``$``, parentheses).

The oracle is bash itself, run harmlessly: PATH holds only recorder stubs (every
program name the grammar can produce is a ``/bin/sh`` script that appends its argv
to a log), in a scratch directory, with no startup files and stdin closed. The
policy allows the stubs ``a`` and ``b`` and the builtins ``echo``, ``true``,
``[``; everything else (the stubs ``x``, ``y``, ``touch``, ``id``) must never run.

A case is a **divergence** when ``check`` allowed it and bash ran a program that
``check`` did not report as an allowed simple command (same name, and the same
argv when every word of the reported command was a literal).

Only allowed cases reach bash. They run in batches: one ``bash`` per batch that
runs each case as ``( source FILE )``. ``source`` reads the file into a string and
hands it to ``parse_and_execute``, the same routine ``bash -c STRING`` uses, in a
forked subshell of a non-interactive bash with the same default options, so the
parse is the one ``bash -c`` would make; each case's stubs log under its own
``FZ_CASE`` number. A batch that hangs is re-run case by case with a deadline.

    python bench/fuzz_argv.py --cases 400000 --seed 21 --jobs 2

**Programs that run programs** (the runner family, about one case in 40): commands
of real programs under the shipped policies (readonly, git-readonly, python-dev) with
the options that make them start another program (pytest ``-p``, ``--tx``, ``-d``,
``-c``, ``--pdbcls``, ``-W``; git ``--ext-diff``, ``--textconv``, ``--show-signature``,
``-c``, ``-O``, ``--help``; file ``-z``; sort ``--compress-program``, rg ``--pre``,
find ``-exec``, awk ``system()``, sed ``e``) beside their ordinary ones, run in a
repository whose configuration points every route at a recorder stub (textconv,
external diff, clean/smudge/process filters, merge drivers, fsmonitor, hooks, pager,
editor, credential helper, ssh and askpass commands, signing programs, ``!``
aliases, include.path), with a bare repository committed inside it and reached by
``cd``, ``-C``, ``--git-dir``, ``GIT_DIR``. A case `check` allows without a
confirmation runs with the policy's environment and the git guard
(sandbox/bash/run/gitguard.py), as the tool runs it: any stub program that starts is a
divergence, since `check` reported none.

A second oracle beside bench/fuzz_policy.py (which compares the programs bash ran, and
the builtins, with empty PATH and nothing executed): this one runs stub programs and
compares their argv too, so it finds arguments `check` never saw.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.bash.policy.evaluate import BashToolPolicy
from sandbox.bash.run.gitguard import guarded_env
from sandbox.policies import resolve

ALLOWED = ("a", "b", "echo", "true", "[")
STUBS = ("a", "b", "x", "y", "touch", "id", "cat", "ls")
POLICY = BashToolPolicy(allowed_command_prefixes=ALLOWED, blocked_operators=())

# ---------------------------------------------------------------------------
# The grammar

_JUNK = [*list(";|&#'\"\\$`(){}[]<>=~!*? \t\n"), "\\\n", "$'", '$"', "$(", "${", "<(", "=~", "]]", "[[", "\r", "\x0b", "#", "'\\''"]
_SQ_POOL = [*list('ab;|&#"\\$`(){} x\n'), "\\'", "'\\''"]
_ANSI_POOL = ["a", ";", "\\\\", "\\'", "\\x27", "\\n", "\\047", "\\c'", "\\u0027", " x", "#", "\\", "\"",
              "\\x{2d}", "\\x2d", "\\c?", "\\c@", "\\U0000002d", "\\E", "\\0"]
_DQ_POOL = ["a", ";", "'", "\\\"", "\\\\", "\\$", "$x", "${x}", "#", " x", "\\`", "|"]


@dataclass
class _Gen:
    rng: random.Random
    depth: int = 0
    heredocs: list[str] = field(default_factory=list)

    def pick(self, items: list[str] | tuple[str, ...]) -> str:
        return items[self.rng.randrange(len(items))]

    def name(self) -> str:
        r = self.rng.random()
        if r < 0.8:
            return self.pick(("a", "b", "echo", "true"))
        return self.pick(("x", "y", "touch", "id", "cat", "ls"))

    def word(self) -> str:
        parts = [self.word_part() for _ in range(1 + int(self.rng.random() < 0.3))]
        return "".join(parts)

    def word_part(self) -> str:
        rng = self.rng
        r = rng.randrange(30)
        deep = self.depth < 3
        if r < 5:
            return self.pick(("p", "x", "-n", "--k=v", "f.txt", "1", "y"))
        if r == 5:
            return "'" + "".join(self.pick(_SQ_POOL) for _ in range(rng.randrange(4))).replace("'", "") + "'"
        if r == 6:
            return "$'" + "".join(self.pick(_ANSI_POOL) for _ in range(rng.randrange(4))) + "'"
        if r == 7:
            return '"' + "".join(self.dq_part() for _ in range(rng.randrange(4))) + '"'
        if r == 8:
            return '$"' + "".join(self.pick(_DQ_POOL) for _ in range(rng.randrange(3))) + '"'
        if r == 9:
            return "\\" + self.pick([*list(";|&#'\"$ a\\(){}<>"), "\"'\\\"", "`"])
        if r == 10:
            return self.pick(("$x", "${x}", "${#x}", "${x:-w}", "${x#a}", "${x/a/b}", "$1", "$@", "${x:-$(", "${arr[1]}"))
        if r == 11 and deep:
            self.depth += 1
            inner = self.word()
            self.depth -= 1
            return self.pick(("${x:-", "${x:+", "${x#", "${x%")) + inner + "}"
        if r == 12:
            return self.pick(("$((1+2))", "$[1]", "$(( 3 ))", "$((1<2))"))
        if r == 13:
            return self.pick(("{a,b}", "{1..2}", "~", "~/p", "x{,y}", "{ }", "{  }"))
        if r in (14, 15) and deep:
            return "$(" + self.list_() + ")"
        if r == 16 and deep:
            return "`" + self.simple() + "`"
        if r == 17 and deep:
            return self.pick(("<(", ">(")) + self.simple() + ")"
        if r == 18:
            return self.pick(("#", "#c", "=~", "==", "]]", "[[", "!", "{", "}", "in", "do", "esac", "fi"))
        if r == 19:
            return self.pick(("*", "?", "[ab]", "@(a|b)", "+(x)"))
        if r == 20:
            return self.pick(("x=1", "a[1]=2", "PATH=.", "k+=v"))
        return self.pick(("p", "q", "-l", "z"))

    def dq_part(self) -> str:
        r = self.rng.randrange(8)
        if r == 0 and self.depth < 3:
            self.depth += 1
            s = "$(" + self.simple() + ")"
            self.depth -= 1
            return s
        if r == 1 and self.depth < 3:
            return "`" + self.simple() + "`"
        if r == 2:
            return "${x:-'" + self.pick(_DQ_POOL) + "'}"
        return self.pick(_DQ_POOL)

    def redirect(self) -> str:
        r = self.rng.randrange(7)
        if r == 0:
            return ">o.txt"
        if r == 1:
            return "2>&1"
        if r == 2:
            return "<<<" + self.word()
        if r == 3:
            delim = self.pick(("EOF", "'EOF'", '"E"', "\\E", "E", "E'x'", "'E x'", "'EOF\n'", "E\\'"))
            plain = delim.replace("\\", "").replace("'", "").replace('"', "")
            body = self.pick(("hi", "$(x)", "`x`", "${x}", "a;x", "$(a)", "\\$(x)", "E\\\nOF", "\tE"))
            end = self.pick((plain, plain, plain, "\t" + plain, plain + " ", "E"))
            self.heredocs.append(body + "\n" + end)
            return self.pick(("<<", "<<-", "<< ")) + delim
        if r == 4:
            return self.pick(("<f.txt", "<&-", ">&-", "3>&-", "{fd}>o.txt", "2<&0", "0<f.txt", ">&2", "<&- -l", "1>| o.txt"))
        if r == 5:
            return ">>o.txt"
        return "&>/dev/null"

    def simple(self) -> str:
        words = [self.name()]
        for _ in range(self.rng.randrange(4)):
            words.append(self.redirect() if self.rng.random() < 0.12 else self.word())
        if self.rng.random() < 0.08:
            words.insert(0, self.pick(("v=1", "PATH=.", "LC_ALL=C")))
        return " ".join(words)

    def command(self) -> str:
        rng = self.rng
        if self.depth >= 3:
            return self.simple()
        self.depth += 1
        try:
            r = rng.randrange(24)
            if r == 0:
                return f"if {self.simple()}; then {self.list_()}; fi"
            if r == 1:
                return f"for v in {self.word()} {self.word()}; do {self.list_()}; done"
            if r == 2:
                return f"case {self.word()} in {self.word()}|p) {self.list_()};; *) {self.simple()};; esac"
            if r == 3:
                return f"[[ {self.word()} {self.pick(('=~', '==', '!=', '<', '-eq'))} {self.word()} ]]"
            if r == 4:
                return f"(( {self.pick(('1+2', 'x<3', 'a[1]', '1 ? 2 : 3'))} ))"
            if r == 5:
                return "{ " + self.list_() + "; }"
            if r == 6:
                return "( " + self.list_() + " )"
            if r == 7:
                return "f() { " + self.list_() + "; }"
            if r == 8:
                return "coproc " + self.simple()
            if r == 9:
                return self.pick(("time ", "! ", "function g { ", "arr=(")) + self.simple() + self.pick(("", "", "; }", ")"))
            if r == 10:
                return "arr=(" + self.word() + " " + self.word() + ")"
            if r == 11:
                return f"for (( i=0; i<1; i++ )); do {self.simple()}; done"
            if r == 12:
                return f"until true; do {self.simple()}; done"
            return self.simple()
        finally:
            self.depth -= 1

    def list_(self) -> str:
        out = [self.command()]
        for _ in range(self.rng.randrange(3)):
            out.append(self.pick((";", " ; ", " && ", " || ", " | ", "\n", " & ", " |& ", " \\\n", ";;")))
            out.append(self.command())
        return "".join(out)

    def script(self) -> str:
        self.heredocs = []
        text = self.list_()
        if self.heredocs:
            text += "\n" + "\n".join(self.heredocs)
        rng = self.rng
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            pos = rng.randrange(len(text) + 1)
            text = text[:pos] + self.pick(_JUNK) + text[pos:]
        if rng.random() < 0.3:
            text += self.pick((";x", "\nx", " #;x", ";\\\nx", " x"))
        return text


def cases(seed: int, count: int) -> Iterator[str]:
    gen = _Gen(random.Random(seed))
    for _ in range(count):
        yield gen.script()


# ---------------------------------------------------------------------------
# Expected: what check reported and allowed


def reported(command: str) -> list[tuple[str, tuple[str | None, ...]]] | None:
    """The simple commands ``check`` allowed, as (name, argv values), or None when it
    blocked ``command``."""
    decision, script = POLICY._decide(command)
    if not decision.allowed or script is None:
        return None
    out = []
    for cmd in script.commands:
        if cmd.words:
            out.append((cmd.words[0].value or "", tuple(w.value for w in cmd.words)))
    return out


def explained(argv: list[str], allowed: list[tuple[str, tuple[str | None, ...]]]) -> bool:
    for name, values in allowed:
        if name != argv[0]:
            continue
        if any(v is None for v in values):
            return True
        if list(values) == argv:
            return True
    return False


# ---------------------------------------------------------------------------
# The runner family: real programs, options and repository content that start programs

RUNNER_POLICIES = ("readonly", "git-readonly", "python-dev")
# what a planted route or a program-running option names: recorder stubs on PATH
RUNNER_STUBS = ("x", "y", "id", "touch", "gpg", "gpgsm", "ssh-keygen", "ssh", "man", "less",
                "more", "gzip", "bzip2", "xz", "zstd", "lzip", "lz4", "lrzip", "uncompress",
                "brotli", "compress", "git-remote-x", "pr")
_GIT_SUBS = ("status", "log", "diff", "show", "blame f.txt", "grep -n a", "stash list",
             "ls-files", "cat-file -p HEAD:f.txt", "log -p", "diff HEAD", "show HEAD",
             "status -v", "diff --cached", "log -p -1 --stat")
_GIT_OPTS = ("-p", "--stat", "-1", "--oneline", "--no-ext-diff", "--no-textconv", "-w", "f.txt",
             "--", "HEAD", "-U1", "--color=never", "--name-only", "-z")
_GIT_RUNNERS = ("--ext-diff", "--textconv", "--show-signature", "-c core.pager=x",
                "-c diff.external=x", "--exec-path=.", "-O x", "--open-files-in-pager=x",
                "--help", "--paginate", "--output=o.txt", "--ext-diff --no-ext-diff",
                "--no-ext-diff --ext-diff", "--textconv=x", "-Ox", "--config-env=core.pager=X")
_GIT_GLOBALS = ("", "", "", "--no-pager ", "-P ", "-p ", "-C . ", "-C vendor/lib.git ",
                "--git-dir=vendor/lib.git ", "-C sub ", "--bare ", "-c core.fsmonitor=x ")
_GIT_LEADS = ("", "", "", "", "cd vendor/lib.git && ", "cd sub && ", "GIT_DIR=vendor/lib.git ",
              "GIT_EXTERNAL_DIFF=x ", "GIT_PAGER=x ", "cd vendor/lib.git; ", "cd vendor && ")
_PYTEST_OPTS = ("-q", "-x", "-v", "-k a", "-m slow", "--tb=short", "-rA", "--lf", "-s",
                "--collect-only", "test_a.py", "test_a.py::test_a", "--maxfail=1", "-vx")
_PYTEST_RUNNERS = ("-p plug", "-pplug", "-vpplug", "--tx popen//python=x",
                   "-d --tx popen//python=x", "--pdbcls=plug:P --pdb", "-W error::plug.W",
                   "-c evil.ini", "--config-file=evil.ini", "--rootdir=sub", "--confcutdir=.",
                   "-o addopts=-pplug", "--override-ini=addopts=-pplug", "--pyargs plug",
                   "plug.py", "../plugins/plug.py", "PLUGINS/plug.py", "--import-mode=importlib",
                   "-p", "plug", "--dist=load --tx popen//python=x", "-n 1", "--maxf=1",
                   "--trace", "--debug=x.log", "--junit-xml=x.xml")
_FILE_OPTS = ("-z", "-Z", "--uncompress", "--uncompress-noreport", "-bz", "-zb", "-k", "-b",
              "--mime-type", "-i", "-L", "-s", "--mime", "-S", "--no-sandbox", "-P bytes=9")
# other programs of the shipped policies with an option that starts a program
_MISC = ("sort --compress-program=x f.txt", "sort -S 1 --compress-program x f.txt",
         "sort --compress-prog=x f.txt", "rg --pre x a", "rg --pre=x a", "rg -z a", "rg --pre-glob '*' --pre x a",
         "find . -exec x ';'", "find . -execdir x {} +", "find . -ok x ';'", "diff --paginate f.txt g.txt",
         "diff -l f.txt g.txt", "awk 'BEGIN{system(\"x\")}'", "awk 'BEGIN{print | \"x\"}'",
         "sed -n '1e x' f.txt", "sed 's/a/x/e' f.txt", "tree --fromfile x", "grep -r a .",
         "python3 -c 'import os; os.system(\"x\")'", "tail -n 1 f.txt", "ls -l", "cat f.txt")
_FILE_OPERANDS = ("s.sh", "x.gz", "x.Z", "x.bz2", "x.xz", "x.zst", "x.lz", "f.txt")


def runner_case(rng: random.Random) -> tuple[str, str]:
    """(policy name, command): a program that can start others, and its options."""
    policy = RUNNER_POLICIES[rng.randrange(len(RUNNER_POLICIES))]
    r = rng.random()

    def some(pool: tuple[str, ...], runners: tuple[str, ...], n: int) -> list[str]:
        out = []
        for _ in range(n):
            src = runners if rng.random() < 0.35 else pool
            out.append(src[rng.randrange(len(src))])
        return out

    if r < 0.55:
        sub = _GIT_SUBS[rng.randrange(len(_GIT_SUBS))]
        lead = _GIT_LEADS[rng.randrange(len(_GIT_LEADS))]
        glob = _GIT_GLOBALS[rng.randrange(len(_GIT_GLOBALS))]
        words = some(_GIT_OPTS, _GIT_RUNNERS, rng.randrange(3))
        return policy, f"{lead}git {glob}{sub} {' '.join(words)}".rstrip()
    if r < 0.80:
        words = some(_PYTEST_OPTS, _PYTEST_RUNNERS, rng.randrange(1, 4))
        return policy, "pytest " + " ".join(words)
    if r < 0.90:
        return policy, _MISC[rng.randrange(len(_MISC))]
    words = some(_FILE_OPERANDS, _FILE_OPTS, rng.randrange(1, 3))
    return policy, "file " + " ".join(words) + " " + _FILE_OPERANDS[rng.randrange(len(_FILE_OPERANDS))]


class RunnerOracle:
    """A workspace whose repository points every configuration route at a stub."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="fuzz-runners-"))
        self.bin = self.root / "bin"
        self.bin.mkdir()
        for name in RUNNER_STUBS:
            stub = self.bin / name
            stub.write_text(_STUB + "cat >/dev/null 2>&1 </dev/null\nexit 0\n")
            stub.chmod(0o755)
        pytest_ = self.bin / "pytest"
        pytest_.write_text(f"#!/bin/sh\nexec {sys.executable} -m pytest \"$@\"\n")
        pytest_.chmod(0o755)
        self.log = self.root / "log"
        self.log.write_bytes(b"")
        self.plugins = self.root / "plugins"
        self.plugins.mkdir()
        (self.plugins / "plug.py").write_text(
            "import subprocess\nsubprocess.run(['x', 'plug'])\n"
            "class P:\n    pass\nclass W(Warning):\n    pass\n")
        self.home = self.root / "home"
        self.home.mkdir()
        self.ws = self.root / "ws"
        self._workspace()
        self.policies = {n: BashToolPolicy.from_toml(resolve(n)) for n in RUNNER_POLICIES}

    def _git(self, cwd: Path, *args: str) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(self.home),
                            "GIT_CONFIG_NOSYSTEM": "1"})

    def _routes(self, repo: Path) -> None:
        x = str(self.bin / "x")
        for key in ("core.fsmonitor", "core.pager", "pager.log", "pager.diff", "diff.external",
                    "core.editor", "sequence.editor", "core.sshCommand", "core.askPass",
                    "credential.helper", "gpg.program", "gpg.ssh.program", "diff.evil.textconv",
                    "diff.evil.command", "filter.evil.clean", "filter.evil.smudge",
                    "filter.evil.process", "merge.evil.driver", "core.hooksPath"):
            self._git(repo, "config", key, self.root.as_posix() + "/hooks" if key ==
                      "core.hooksPath" else x)
        self._git(repo, "config", "alias.st", "!x")
        self._git(repo, "config", "log.showSignature", "true")
        self._git(repo, "config", "include.path", str(self.root / "included.cfg"))
        self._git(repo, "config", "remote.origin.vcs", "x")

    def _workspace(self) -> None:
        ws = self.ws
        ws.mkdir()
        (ws / "sub").mkdir()
        (ws / "f.txt").write_text("a\n")
        (ws / "g.txt").write_text("a\n")
        (ws / ".gitattributes").write_text("* diff=evil filter=evil merge=evil\ng.txt diff=inc\n")
        (ws / "test_a.py").write_text("def test_a():\n    pass\n")
        (ws / "sub" / "test_b.py").write_text("def test_b():\n    pass\n")
        (ws / "evil.ini").write_text("[pytest]\naddopts = -p plug\n")
        (ws / "s.sh").write_text("#!/usr/bin/env secret --x\n")
        for name, head in (("x.gz", b"\x1f\x8b\x08\x00"), ("x.Z", b"\x1f\x9d\x90"),
                           ("x.bz2", b"BZh91AY&SY"), ("x.xz", b"\xfd7zXZ\x00"),
                           ("x.zst", b"\x28\xb5\x2f\xfd"), ("x.lz", b"LZIP\x01")):
            (ws / name).write_bytes(head + bytes(64))
        (self.root / "included.cfg").write_text(
            f"[diff \"inc\"]\n\ttextconv = {self.bin / 'x'}\n[core]\n\tfsmonitor = {self.bin / 'x'}\n")
        hooks = self.root / "hooks"
        hooks.mkdir()
        for hook in ("pre-commit", "post-checkout", "post-index-change", "reference-transaction"):
            (hooks / hook).symlink_to(self.bin / "x")
        self._git(ws, "init", "-q", "-b", "main")
        self._git(ws, "add", "-A")
        self._git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
        self._git(ws, "config", "user.name", "t")
        self._git(ws, "config", "user.email", "t@t")
        (ws / "f.txt").write_text("a\nb\n")
        (ws / "g.txt").write_text("a\nb\n")
        src = self.root / "libsrc"
        src.mkdir()
        (src / "l.txt").write_text("l\n")
        (src / ".gitattributes").write_text("* diff=evil\n")
        self._git(src, "init", "-q", "-b", "main")
        self._git(src, "add", "-A")
        self._git(src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "l")
        (ws / "vendor").mkdir()
        subprocess.run(["git", "clone", "-q", "--bare", str(src), str(ws / "vendor" / "lib.git")],
                       check=True, env={"PATH": "/usr/bin:/bin", "HOME": str(self.home)})
        self._routes(ws)
        self._routes(ws / "vendor" / "lib.git")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def run(self, policy: str, command: str, timeout: float = 20.0) -> list[list[str]]:
        """Run one case as the tool would (the policy's environment, the git guard;
        no OS confinement here) and return the stub argvs it started."""
        env = dict(self.policies[policy].env)
        env.update({
            "PATH": f"{self.bin}:{env.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.home), "PYTHONPATH": str(self.plugins),
            "FZ_LOG": str(self.log), "FZ_CASE": "0", "PYTHONDONTWRITEBYTECODE": "1",
            # the plugins installed here (anyio, hypothesis ...) only slow each run down;
            # -p still loads a plugin by name
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        })
        env = guarded_env(env)
        self.log.write_bytes(b"")
        proc = subprocess.Popen(
            [shutil.which("bash") or "/bin/bash", "--norc", "--noprofile", "-c", command],
            cwd=self.ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(proc)
        fields = self.log.read_bytes().decode("utf-8", "surrogateescape").split("\0")
        runs, i = [], 0
        while i + 2 < len(fields):
            if not fields[i].isdigit() or not fields[i + 1].isdigit():
                i += 1
                continue
            n = int(fields[i + 1])
            runs.append(fields[i + 2 : i + 3 + n])
            i += 3 + n
        return runs


def runner_reported(policy: BashToolPolicy, command: str
                    ) -> list[tuple[str, tuple[str | None, ...]]] | None:
    """What check reported, or None when it refuses ``command`` or a human must
    confirm it first (a confirmed command is the human's to judge)."""
    decision, script = policy._decide(command)
    if not decision.allowed or script is None or policy.needs_confirmation(command):
        return None
    return [(c.words[0].value or "", tuple(w.value for w in c.words))
            for c in script.commands if c.words]


# ---------------------------------------------------------------------------
# The oracle

# One record per run, NUL-separated (an argument can hold any byte but NUL): the case
# number, the argument count, the program name, the arguments; one printf, one write.
_STUB = '#!/bin/sh\nprintf \'%s\\000\' "$FZ_CASE" "$#" "${0##*/}" "$@" >> "$FZ_LOG"\n'


class Oracle:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="fuzz-policy-"))
        self.bin = self.root / "bin"
        self.bin.mkdir()
        for name in STUBS:
            stub = self.bin / name
            stub.write_text(_STUB)
            stub.chmod(0o755)
        self.cases_dir = self.root / "cases"
        self.cases_dir.mkdir()
        self.work = self.root / "work"
        self.work.mkdir()
        (self.work / "f.txt").write_text("f\n")
        self.log = self.root / "log"
        self.bash = shutil.which("bash") or "/bin/bash"

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _env(self, case: str) -> dict[str, str]:
        return {
            "PATH": str(self.bin),
            "FZ_LOG": str(self.log),
            "FZ_CASE": case,
            "HOME": str(self.work),
            "LC_ALL": "C.UTF-8",
        }

    def run(self, commands: list[str], timeout: float = 10.0) -> dict[int, list[list[str]]]:
        """Run every command; return the stub argvs each one executed."""
        self.log.write_bytes(b"")
        lines = []
        for i, command in enumerate(commands):
            path = self.cases_dir / str(i)
            path.write_bytes(command.encode("utf-8", "surrogateescape"))
            lines.append(
                f"export FZ_CASE={i}; ( ulimit -t 1; builtin source {path} ) </dev/null >/dev/null 2>&1"
            )
        driver = "\n".join(lines) + "\n"
        proc = subprocess.Popen(
            [self.bash, "--norc", "--noprofile", "-c", driver, "fuzz"],
            cwd=self.work, env=self._env(""), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return self._one_by_one(commands)
        _kill_group(proc)  # anything a case left running in the background
        time.sleep(0.02)  # process substitutions may still be logging
        return self._read()

    def _one_by_one(self, commands: list[str]) -> dict[int, list[list[str]]]:
        self.log.write_bytes(b"")
        for i, command in enumerate(commands):
            proc = subprocess.Popen(
                [self.bash, "--norc", "--noprofile", "-c", command],
                cwd=self.work, env=self._env(str(i)), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc)
        time.sleep(0.02)
        return self._read()

    def _read(self) -> dict[int, list[list[str]]]:
        runs: dict[int, list[list[str]]] = {}
        fields = self.log.read_bytes().decode("utf-8", "surrogateescape").split("\0")
        i = 0
        while i + 2 < len(fields):
            case, count = fields[i], fields[i + 1]
            if not case.isdigit() or not count.isdigit():
                i += 1  # a torn record: resynchronise on the next one
                continue
            n = int(count)
            runs.setdefault(int(case), []).append(fields[i + 2 : i + 3 + n])
            i += 3 + n
        return runs


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group this oracle started (its own session) and reap it."""
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


@dataclass
class Result:
    cases: int = 0
    allowed: int = 0
    executed: int = 0
    divergences: list[tuple[str, list[str]]] = field(default_factory=list)
    seconds: float = 0.0
    runner_cases: int = 0
    runner_unasked: int = 0
    runner_asked_or_refused: int = 0


RUNNER_SHARE = 40  # one case in 40 is of the runner family


def fuzz(seed: int, count: int, batch: int = 400) -> Result:
    result = Result()
    oracle = Oracle()
    runners = RunnerOracle()
    pick = random.Random(seed ^ 0x5EED)
    start = time.perf_counter()
    try:
        pending: list[tuple[str, list[tuple[str, tuple[str | None, ...]]]]] = []

        def flush() -> None:
            runs = oracle.run([c for c, _ in pending])
            for i, (command, allowed) in enumerate(pending):
                for argv in runs.get(i, []):
                    result.executed += 1
                    if not explained(argv, allowed):
                        result.divergences.append((command, argv))
            pending.clear()

        for command in cases(seed, count):
            result.cases += 1
            if pick.randrange(RUNNER_SHARE) == 0:
                _runner(runners, pick, result)
                continue
            allowed = reported(command)
            if allowed is None:
                continue
            result.allowed += 1
            pending.append((command, allowed))
            if len(pending) >= batch:
                flush()
        if pending:
            flush()
    finally:
        oracle.close()
        runners.close()
    result.seconds = time.perf_counter() - start
    return result


def _runner(runners: RunnerOracle, rng: random.Random, result: Result) -> None:
    policy, command = runner_case(rng)
    command = command.replace("PLUGINS", str(runners.plugins))  # before check sees it
    result.runner_cases += 1
    allowed = runner_reported(runners.policies[policy], command)
    if allowed is None:
        result.runner_asked_or_refused += 1
        return
    result.allowed += 1
    result.runner_unasked += 1
    for argv in runners.run(policy, command):
        result.executed += 1
        if not explained(argv, allowed):
            result.divergences.append((f"[{policy}] {command}", argv))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (seeds seed..seed+jobs-1)")
    parser.add_argument("--chunk", type=int, default=20000, help="cases per work unit")
    args = parser.parse_args(argv)
    units = [(args.seed * 1_000_003 + k, min(args.chunk, args.cases - k * args.chunk))
             for k in range((args.cases + args.chunk - 1) // args.chunk)]
    total = Result()
    start = time.perf_counter()
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs) as pool:
            results = pool.map(_unit, units)
            for done, r in enumerate(results, 1):
                _add(total, r)
                _progress(total, done, len(units), start)
    else:
        for done, unit in enumerate(units, 1):
            _add(total, _unit(unit))
            _progress(total, done, len(units), start)
    print(f"cases={total.cases} allowed={total.allowed} executed_programs={total.executed} "
          f"divergences={len(total.divergences)} seconds={time.perf_counter() - start:.0f}")
    print(f"runner family: cases={total.runner_cases} run_unasked={total.runner_unasked} "
          f"asked_or_refused={total.runner_asked_or_refused}")
    for command, argv_ in total.divergences[:50]:
        print(f"DIVERGENCE {command!r} ran {argv_!r}")
    return 1 if total.divergences else 0


def _unit(unit: tuple[int, int]) -> Result:
    return fuzz(unit[0], unit[1])


def _add(total: Result, r: Result) -> None:
    total.cases += r.cases
    total.allowed += r.allowed
    total.executed += r.executed
    total.divergences += r.divergences
    total.runner_cases += r.runner_cases
    total.runner_unasked += r.runner_unasked
    total.runner_asked_or_refused += r.runner_asked_or_refused


def _progress(total: Result, done: int, units: int, start: float) -> None:
    print(f"[{done}/{units}] cases={total.cases} allowed={total.allowed} "
          f"executed={total.executed} divergences={len(total.divergences)} "
          f"{time.perf_counter() - start:.0f}s", flush=True)
    for command, argv_ in total.divergences[-3:]:
        print(f"  DIVERGENCE {command!r} ran {argv_!r}", flush=True)


if __name__ == "__main__":
    os.nice(0)
    sys.exit(main())
