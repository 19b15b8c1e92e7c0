"""Differential fuzzer: does bash run anything that `BashToolPolicy.check` allowed
without seeing it?

Commands are generated from a grammar of bash (every quoting form, parameter,
arithmetic, brace and tilde expansion, ``[[ ]]``, ``(( ))``, comments, here-documents,
arrays, ``case``, command and process substitution, ``coproc``, functions, line
continuations, control characters) with random "noise" bytes spliced in where token
boundaries are fragile. Each command is checked against a policy that allows only
the programs ``a`` and ``b`` (and the builtins ``true``/``false``); the hidden
programs are ``x`` and ``y``.

The oracle is bash itself: every command the policy allowed is run by bash with an
empty PATH, so every program it starts falls through to a ``command_not_found_handle``
that records the program's name and does nothing else (no program is executed at
all). A case is a divergence when bash ran a program that `check` did not report as
one of the allowed simple commands, or when bash itself read a file (``$(< f)`` prints
a file with no program: bash's own ``cat``) that `check` did not report a reader of;
reads are seen by inotify (IN_ACCESS, a read(2) that returned data) on the scratch
directory the cases run in, which holds non-empty files (``f.txt``, ``foo``) restored
before every case. Cases run there with stdin closed, one subshell each and a CPU-time
limit.

Substitutions are generated with comments, blank lines, here-documents, ``;``/``&``
and redirection-only commands inside (``$(#c<newline>< f.txt)``, ``<(< foo 2>/dev/null)``);
``--templates`` generates only those: a substitution context (``$( )``, ``"$( )"``,
backticks, ``<( )``, ``>( )``, a here-document body, nested) around such a body.

    python bench/fuzz_policy.py --cases 2000000 --seed 1 --jobs 2
    python bench/fuzz_policy.py --cases 200000 --templates

prints the counts and every divergence (the command, what check reported, what
bash ran), and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import select
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ALLOWED = ("a", "b", "true", "false")
HIDDEN = ("x", "y")

# -- the grammar ------------------------------------------------------------------------

_PLAIN = ["a", "b", "x", "y", "-n", "--opt=v", "foo", "f.txt", "1", "k=v", "%", "@", ",", "+",
          ":", "/", ".", "..", "~", "~/d", "a=b", "=", "==", "=~", "!", "{", "}", "{}", "]]",
          "[[", "[", "]", "*", "?", "[ab]", "{a,b}", "{1..3}", "{  }", "#", "-", "--"]
_NOISE = ["#", ";", "'", '"', "\\", "$", "`", "=~", "==", "{", "}", "\n", "\r", "(", ")", "|",
          "&", "<", ">", "\\\n", " ", "\t", "$'", '$"', "${", "$(", "<(", ">(", "!", "x", ";x;",
          "\\'", '\\"', "\\\\", "]]", "[[", "))", "((", "<<", "EOF", "\x0b", "\x1b", "*", "~"]


class Grammar:
    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def pick(self, *options: str) -> str:
        return self.r.choice(options)

    def prog(self) -> str:
        return self.r.choice(("a", "b")) if self.r.random() < 0.95 else self.r.choice(HIDDEN)

    def content(self, alphabet: str = "ab x;|&<>()#$`'\"\\{}=~!\n*?") -> str:
        return "".join(self.r.choice(alphabet) for _ in range(self.r.randint(0, 6)))

    def word(self, depth: int) -> str:
        r = self.r
        n = r.randint(1, 3) if r.random() < 0.3 else 1
        return "".join(self.part(depth) for _ in range(n))

    def part(self, depth: int) -> str:
        r = self.r
        k = r.randint(0, 24)
        if k <= 6 or depth > 2:
            return r.choice(_PLAIN)
        if k == 7:
            return "'" + self.content("ab x;|&#$`\"\\{}\n").replace("'", "") + "'"
        if k == 8:
            return '"' + self.dq(depth) + '"'
        if k == 9:
            return "$'" + r.choice(["\\\\", "\\'", "\\n", "\\x41", "a", "\\047", "\\c'", ";x;", "\\"]) \
                + r.choice(["", "\\'", "b", ";x"]) + "'"
        if k == 10:
            return '$"' + self.dq(depth) + '"'
        if k == 11:
            return "\\" + r.choice(list(" ;|&#'\"$`\\\n{}()<>ax"))
        if k == 12:
            return "$" + r.choice(["v", "1", "@", "#", "?", "{v}", "{#v}", "{v:-" + self.word(depth + 1) + "}",
                                   "{v//a/b}", "{a[0]}", "{v:+" + self.word(depth + 1) + "}",
                                   "{!v}", "{v#*}", "{v%%a}", "{v:-'" + self.content() + "'}"])
        if k == 13:
            return "$(" + self.sub_script(depth + 1) + ")"
        if k == 14:
            body = self.sub_script(depth + 1) if r.random() < 0.3 else self.simple(depth + 1)
            return "`" + body.replace("`", "") + "`"
        if k == 15:
            return "$((" + r.choice(["1+2", "v*2", "a[1]", "$(" + self.simple(depth + 1) + ")", "x<2?1:0",
                                     "1<<2", "(1)"]) + "))"
        if k == 16:
            return r.choice("<>") + "(" + self.sub_script(depth + 1) + ")"
        if k == 17:
            return "{" + ",".join(self.part(depth + 1) for _ in range(r.randint(1, 3))) + "}"
        if k == 18:
            return "~" + r.choice(["", "a", "+", "-"])
        if k == 19:
            return r.choice(["*", "?", "[!a]", "*.txt", "[a-c]", "@(a|b)" if r.random() < 0.2 else "a*"])
        if k == 20:
            return "$[1+2]"
        return r.choice(_PLAIN)

    def dq(self, depth: int) -> str:
        r = self.r
        out = []
        for _ in range(r.randint(0, 3)):
            k = r.randint(0, 7)
            if k == 0:
                body = self.sub_script(depth + 1) if r.random() < 0.3 else self.simple(depth + 1)
                out.append("$(" + body + ")")
            elif k == 1:
                body = self.sub_script(depth + 1) if r.random() < 0.3 else self.simple(depth + 1)
                out.append("`" + body.replace("`", "") + "`")
            elif k == 2:
                out.append("${v:-" + r.choice(["'a'", "'$(x)'", "b", '"c"', "<(x)"]) + "}")
            elif k == 3:
                out.append("\\" + r.choice(list('"$`\\ax\n')))
            elif k == 4:
                out.append("$v")
            else:
                out.append(self.content("ab x;|&<>()#'{}=~!*").replace('"', ""))
        return "".join(out)

    def redirect(self, depth: int) -> str:
        r = self.r
        k = r.randint(0, 5)
        if k == 0:
            return r.choice([">", ">>", "2>", "&>", ">|", "<>"]) + " out" + str(r.randint(0, 2))
        if k == 1:
            return "2>&1"
        if k == 2:
            return "<<< " + self.word(depth + 1)
        if k == 3:
            return "< /dev/null"
        return ""

    def simple(self, depth: int) -> str:
        r = self.r
        words = [self.prog()]
        for _ in range(r.choice((0, 1, 1, 2, 3))):
            words.append(self.word(depth))
        if r.random() < 0.15:
            words.append(self.redirect(depth))
        if r.random() < 0.05:
            words.insert(0, r.choice(["v=1", "a[0]=1", "v=(1 2)"]))
        return " ".join(w for w in words if w)

    def pipeline(self, depth: int) -> str:
        r = self.r
        parts = [self.command(depth) for _ in range(r.choice((1, 1, 1, 2, 3)))]
        sep = r.choice([" | ", " |& ", "|"])
        text = sep.join(parts)
        return ("! " if r.random() < 0.05 else "") + ("time " if r.random() < 0.03 else "") + text

    def command(self, depth: int) -> str:
        r = self.r
        if depth > 1:
            return self.simple(depth)
        k = r.randint(0, 30)
        if k <= 14:
            return self.simple(depth)
        if k == 15:
            return "( " + self.script(depth + 1) + " )"
        if k == 16:
            return "{ " + self.script(depth + 1) + "; }"
        if k == 17:
            return f"if {self.simple(depth)}; then {self.script(depth + 1)}; else {self.script(depth + 1)}; fi"
        if k == 18:
            return f"for v in {self.word(depth)} {self.word(depth)}; do {self.script(depth + 1)}; done"
        if k == 19:
            return f"while false; do {self.script(depth + 1)}; done; until true; do {self.simple(depth)}; done"
        if k == 20:
            pats = "|".join(self.part(depth + 1) for _ in range(r.randint(1, 2)))
            return (f"case {self.word(depth)} in {r.choice(['', '('])}{pats}) {self.script(depth + 1)}"
                    f"{r.choice([';;', ';&', ';;&'])} *) {self.simple(depth)};; esac")
        if k == 21:
            return f"[[ {self.word(depth)} {r.choice(['==', '=~', '!=', '<', '-eq', '&&', '||'])} " \
                   f"{self.word(depth)} ]]"
        if k == 22:
            return "(( " + r.choice(["v=1", "v<2", "a[$(" + self.simple(depth + 1) + ")]", "1 ? 2 : 3"]) + " ))"
        if k == 23:
            return f"for (( i=0; i<{r.randint(0, 2)}; i++ )); do {self.simple(depth)}; done"
        if k == 24:
            delim = r.choice(["EOF", "'EOF'", '"EOF"', "E\\OF", "-EOF"])
            body = r.choice(["hi", "$(" + self.simple(depth + 1) + ")", "`x`", "${v:-$(x)}", "a\\\nb",
                             "\\$(x)", "$'x'", "$(" + self.sub_script(depth + 1) + ")",
                             "`" + self.sub_script(depth + 1).replace("`", "") + "`"])
            plain = delim.strip("'\"").replace("\\", "").lstrip("-")
            op = "<<-" if delim.startswith("-") else "<<"
            if r.random() < 0.3:
                # two here-documents on one line: bash reads the bodies in operator order
                delim2 = r.choice(["E", "'E'", '"E"', "\\E"])
                body2 = r.choice(["$(x)", "a;x", "hi", "`x`"])
                glue = r.choice([" | ", " && ", " ", "; "])
                return (f"{self.simple(depth)} {op}{delim}{glue}{self.simple(depth)} <<{delim2}\n"
                        f"{body}\n{plain}\n{body2}\nE\n")
            return f"{self.simple(depth)} {op}{delim}\n{body}\n{plain}\n"
        if k == 25:
            return f"{{ coproc {self.simple(depth)}; }}"
        if k == 26:
            return f"f() {{ {self.script(depth + 1)}; }}"
        if k == 27:
            return "arr=(" + " ".join(self.word(depth) for _ in range(2)) + ")"
        if k == 28:
            return self.simple(depth) + " # " + self.content()
        if k == 29:
            return self.simple(depth) + " \\\n " + self.word(depth)
        return "{ " + self.simple(depth) + " & }"

    def script(self, depth: int = 0) -> str:
        r = self.r
        parts = [self.pipeline(depth) for _ in range(r.choice((1, 1, 2, 3) if depth == 0 else (1, 1, 2)))]
        out = parts[0]
        for p in parts[1:]:
            out += r.choice(["; ", " && ", " || ", "\n", " & ", ";"]) + p
        return out

    # Bodies of substitutions: bash prints a file when the last line a substitution runs
    # is only "< FILE" ($(< f) is its own cat), so comments, blank lines, here-documents,
    # ; and & and other redirections around such a command are generated.
    def bare_redirect(self) -> str:
        r = self.r
        target = r.choice(["f.txt", "foo", "'f.txt'", '"foo"', "f\\.txt", "f*", "./foo", "$v",
                           "${v:-foo}", "~/foo"])
        text = r.choice(["<", "< ", "0<", "00<", "3<", "<>", "<\\\n", "< \\\n"]) + target
        k = r.randint(0, 19)
        if k == 0:
            text += " 2>/dev/null"
        elif k == 1:
            text = "2>/dev/null " + text
        elif k == 2:
            text += " <<<x"
        elif k == 3:
            text += " < /dev/null"
        elif k == 4:
            text = "! " + text
        elif k == 5:
            text = "time " + text
        elif k == 6:
            text = "{ " + text + "; }"
        elif k == 7:
            text = "( " + text + " )"
        elif k == 8:
            text += " &"
        elif k == 9:
            text = "v=1 " + text
        return text

    def sub_script(self, depth: int) -> str:
        r = self.r
        if r.random() < 0.6:
            return self.script(depth)
        out = r.choice(["", "", "\n", " ", "#c\n", "\n#c\n", "\n\n"])
        for i in range(r.randint(1, 3)):
            k = r.randint(0, 9)
            if k <= 4:
                item = self.bare_redirect()
            elif k <= 6:
                item = self.simple(depth)
            elif k == 7:
                # a here-document whose body line ends the line: what follows starts a new one
                item = f"{self.pick(self.simple(depth), self.bare_redirect())} <<H\n" \
                       f"{self.pick('x', '$(< foo)', '`<foo`')}\nH\n"
            elif k == 8:
                item = "#c\n" + self.bare_redirect()
            else:
                item = self.pipeline(depth)
            if i:
                if not out.endswith("\n"):
                    out += r.choice(["\n", ";", "; ", ";\n", "&\n", " & ", "\n\n", " #c\n", ";#c\n",
                                     "\n#c\n", " &&\n", " |\n"])
                else:
                    out += r.choice(["", "", "#c\n", " ", ";"])
            out += item
        return out + r.choice(["", "", "", "\n", ";", " ;", " #c\n", "\n#c\n", " &", "\n ", ";\n",
                               " \\\n", "\n\n", " #c"])

    def template(self) -> str:
        """One substitution context around a generated body (``--templates``)."""
        r = self.r
        body = self.sub_script(1) if r.random() < 0.8 else self.bare_redirect()
        k = r.randint(0, 11)
        if k == 0:
            return f"a $({body})"
        if k == 1:
            return f'a "$({body})"'
        if k == 2:
            return "a `" + body.replace("`", "") + "`"
        if k == 3:
            return 'a "`' + body.replace("`", "") + '`"'
        if k == 4:
            return f"a <({body})"
        if k == 5:
            return f"a >({body})"
        if k == 6:
            return f"a <<EOF\n$({body})\nEOF\n"
        if k == 7:
            return "a <<EOF\n`" + body.replace("`", "") + "`\nEOF\n"
        if k == 8:
            return f'a "${{v:-$({body})}}"'
        if k == 9:
            return f"a $(b $({body}))"
        if k == 10:
            return f"b; a $({body}) {self.word(1)}"
        return f"a $({body})$({self.sub_script(1)})"

    def case(self, templates: bool = False) -> str:
        text = self.template() if templates else self.script()
        r = self.r
        for _ in range(r.choice((0, 0, 1, 1, 2, 3))):
            at = r.randint(0, len(text))
            text = text[:at] + r.choice(_NOISE) + text[at:]
        return text


# -- the oracle -------------------------------------------------------------------------

# Every program bash starts falls through to command_not_found_handle (PATH is empty),
# which records it; a DEBUG trap records the builtins that run code or change state,
# none of which the fuzz policy allows (set -T: the trap reaches functions and
# substitutions too).
_WATCHED_BUILTINS = (
    "eval|source|.|exec|command|builtin|alias|enable|cd|pushd|popd|export|declare|typeset|"
    "set|shopt|unset|trap|read|mapfile|readarray|kill|ulimit|umask|hash|readonly|local|let|"
    "printf|echo|test|[|exit|wait|fc|history|complete|compgen|bind|times|getopts|"
    "shift|break|continue|disown|suspend|jobs|fg|bg|caller|dirs|logout|help|type|coproc"
)
_HARNESS = r"""
command_not_found_handle() { printf '%s\t%s\n' "$CASE_N" "$1" >> "$FUZZ_LOG"; return 0; }
watch() {
    [[ $BASH_COMMAND == 'eval "$case"' || ${FUNCNAME[1]-} == command_not_found_handle ]] && return 0
    case ${BASH_COMMAND%%[[:space:]]*} in
        WATCHED) printf '%s\t%s\n' "$CASE_N" "${BASH_COMMAND%%[[:space:]]*}" >> "$FUZZ_LOG";;
    esac
    return 0
}
n=0
while IFS= read -r -d '' case; do
    CASE_N=$n
    printf 'x\n' > f.txt; printf 'x\n' > foo; : > .sep
    ( ulimit -t 2; set -T; trap watch DEBUG; eval "$case" ) </dev/null >/dev/null 2>&1
    n=$((n+1))
done < "$FUZZ_CASES"
""".replace("WATCHED", _WATCHED_BUILTINS.replace(".", "\\."))

# The files bash may read in the cases' directory (restored before every case: a read(2)
# of an empty file returns nothing and raises no IN_ACCESS), and the harness's
# separator: the Nth close after a write of .sep starts case N.
READABLE = ("f.txt", "foo")
_SEPARATOR = b".sep"
_IN_ACCESS, _IN_CLOSE_WRITE, _IN_Q_OVERFLOW = 0x1, 0x8, 0x4000
_EVENT = struct.Struct("iIII")


class ReadWatch:
    """inotify on the directory the cases run in: which case read which file there.

    Events of one watch arrive in order, so a read belongs to the case whose separator
    came last. Drained by a thread while bash runs (the kernel's queue is bounded)."""

    def __init__(self, directory: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self.fd, os.fsencode(directory),
                                  _IN_ACCESS | _IN_CLOSE_WRITE) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        self.case = -1
        self.reads: dict[int, set[str]] = {}
        self.overflow = False
        self._pending = b""

    def drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            data = self._pending + chunk
            at = 0
            while at + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, at)
                if at + _EVENT.size + length > len(data):
                    break
                name = data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0")
                at += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    self.overflow = True
                elif name == _SEPARATOR:
                    if mask & _IN_CLOSE_WRITE:
                        self.case += 1
                elif mask & _IN_ACCESS and name and self.case >= 0:
                    self.reads.setdefault(self.case, set()).add(
                        f"<read {name.decode('utf-8', 'replace')}>")
            self._pending = data[at:]

    def close(self) -> None:
        os.close(self.fd)


def run_bash(cases: list[str], workdir: Path) -> dict[int, set[str]]:
    """Run each case in its own subshell; what programs each one started, and
    ``<read NAME>`` for each file of its directory bash read."""
    cases_file = workdir / "cases"
    log = workdir / "log"
    here = workdir / "cwd"
    here.mkdir(exist_ok=True)
    cases_file.write_bytes(b"".join(c.encode() + b"\0" for c in cases))
    log.write_bytes(b"")
    env = {"PATH": "/nonexistent", "FUZZ_LOG": str(log), "FUZZ_CASES": str(cases_file),
           "LANG": "C.UTF-8", "HOME": str(here)}
    watch = ReadWatch(here)
    try:
        proc = subprocess.Popen(["/bin/bash", "--norc", "--noprofile", "-c", _HARNESS],
                                cwd=here, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60 + 3 * len(cases)
        while proc.poll() is None:
            select.select([watch.fd], [], [], 0.05)
            watch.drain()
            if time.monotonic() > deadline:
                proc.kill()
        proc.wait()
        watch.drain()
    finally:
        watch.close()
    if watch.overflow:
        raise RuntimeError("the inotify queue overflowed: run smaller batches (--batch)")
    ran: dict[int, set[str]] = {}
    for line in log.read_bytes().decode("utf-8", "replace").splitlines():
        idx, _, name = line.partition("\t")
        if idx.isdigit():
            ran.setdefault(int(idx), set()).add(name)
    for idx, reads in watch.reads.items():
        ran.setdefault(idx, set()).update(reads)
    return ran


def fuzz_chunk(args: tuple[int, int, int, bool]
               ) -> tuple[int, int, int, list[tuple[str, str, str]]]:
    """Generate and check ``count`` cases from ``seed``; run the allowed ones."""
    seed, count, batch, templates = args
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from sandbox import BashToolPolicy

    policy = BashToolPolicy(allowed_command_prefixes=ALLOWED)
    rng = random.Random(seed)
    grammar = Grammar(rng)
    allowed_total = 0
    divergences: list[tuple[str, str, str]] = []
    # A case may leave a background job writing there: cleanup is best effort.
    with tempfile.TemporaryDirectory(prefix="fuzz-policy-", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp)
        (workdir / "cwd").mkdir()
        done = 0
        while done < count:
            n = min(batch, count - done)
            pending: list[tuple[str, set[str]]] = []
            for _ in range(n):
                text = grammar.case(templates)
                decision = policy.check(text)
                if decision.allowed:
                    reported = {argv[0] for argv in decision.commands if argv}
                    if "cat" in reported:  # bash's $(< f) is reported as cat f
                        reported |= {f"<read {name}>" for name in READABLE}
                    pending.append((text, reported))
            done += n
            allowed_total += len(pending)
            if pending:
                ran = run_bash([t for t, _ in pending], workdir)
                for i, (text, reported) in enumerate(pending):
                    hidden = ran.get(i, set()) - reported
                    if hidden:
                        divergences.append((text, ", ".join(sorted(reported)),
                                            ", ".join(sorted(hidden))))
            for stray in [*workdir.iterdir(), *(workdir / "cwd").iterdir()]:
                if stray.name not in ("cases", "log", "cwd"):
                    subprocess.run(["rm", "-rf", "--", str(stray)], check=False)
    return seed, count, allowed_total, divergences


def chunks(total: int, seed: int, size: int) -> Iterator[tuple[int, int]]:
    i = 0
    while total > 0:
        n = min(size, total)
        yield seed * 1_000_003 + i, n
        total -= n
        i += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=5000, help="cases per worker task")
    parser.add_argument("--batch", type=int, default=500, help="allowed cases per bash run")
    parser.add_argument("--templates", action="store_true",
                        help="generate only substitution bodies in substitution contexts")
    args = parser.parse_args(argv)
    start = time.monotonic()
    total = allowed = 0
    divergences: list[tuple[str, str, str]] = []
    tasks = [(s, n, args.batch, args.templates)
             for s, n in chunks(args.cases, args.seed, args.chunk)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for _, count, ok, found in pool.map(fuzz_chunk, tasks):
            total += count
            allowed += ok
            divergences.extend(found)
            if len(tasks) > 20 and total % (args.chunk * 20) == 0:
                print(f"  {total} cases, {allowed} allowed and run, {len(divergences)} divergences, "
                      f"{time.monotonic() - start:.0f} s", flush=True)
    elapsed = time.monotonic() - start
    print(f"cases: {total}  allowed and run by bash: {allowed}  divergences: {len(divergences)}  "
          f"seed: {args.seed}{'  (templates)' if args.templates else ''}  time: {elapsed:.1f} s  ({total / elapsed:.0f} cases/s)")
    for text, reported, hidden in divergences[:50]:
        print(f"DIVERGENCE {text!r}\n   check reported: {reported or '-'}\n   bash also ran: {hidden}")
    return 1 if divergences else 0


if __name__ == "__main__":
    sys.exit(main())
