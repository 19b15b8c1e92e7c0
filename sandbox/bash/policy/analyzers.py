"""R7's analyzers: checks of a sed script or an awk program that a pattern cannot
express (`ANALYZERS`, named by a `HardeningRule`'s ``analyzer``)."""


import heapq
import re
from collections.abc import Callable, Sequence

from sandbox.bash.syntax.model import Word

__all__ = ["ANALYZERS", "awk_program_danger", "sed_script_danger"]


# ---------------------------------------------------------------------------
# Analyzers: checks of script arguments that a pattern cannot express.
#
# sed: a reader of GNU sed 4.9's own script grammar (compile.c: compile_program,
# match_slash, snarf_char_class, read_text, read_label, read_filename,
# mark_subst_opts), written from that grammar. It reads every command the way sed
# does and refuses the ones that run a program (``e``, ``s///e``) or write a file
# (``w``, ``W``, ``s///w``). Where sed would stop with an error the script runs
# nothing at all (sed compiles the whole script first), so such a script may be
# refused or not; the reader refuses it, naming what it could not read.


class _SedScript:
    """A cursor over a sed script, with GNU sed's inchar/savchar/in_nonblank."""

    __slots__ = ("i", "s")

    def __init__(self, script: str) -> None:
        self.s = script
        self.i = 0

    def get(self) -> str:
        """The next character, or "" at the end (sed's EOF)."""
        if self.i < len(self.s):
            self.i += 1
            return self.s[self.i - 1]
        return ""

    def unget(self, ch: str) -> None:
        if ch:
            self.i -= 1

    def nonblank(self) -> str:
        ch = self.get()
        while ch in (" ", "\t"):
            ch = self.get()
        return ch

    def integer(self, ch: str) -> None:
        while ch.isascii() and ch.isdigit():
            ch = self.get()
        self.unget(ch)

    def char_class(self) -> str:
        """After '[' in a regex: up to its ']' (returned), or the newline or end that
        leaves it open. A backslash is literal here, and so is the delimiter."""
        state = 0  # 1 after '[', 2 inside [. [: [=, 3 after its closing . : =
        delim = ""
        ch = self.get()
        if ch == "^":
            ch = self.get()
        if ch == "]":
            ch = self.get()
        while True:
            if ch in ("", "\n"):
                return ch
            if ch in ".:=":
                if state == 1:
                    delim, state = ch, 2
                    ch = self.get()
                    continue
                if state == 2 and ch == delim:
                    state = 3
                    ch = self.get()
                    continue
            elif ch == "[":
                if state == 0:
                    state = 1
                ch = self.get()
                continue
            elif ch == "]":
                if state in (0, 1):
                    return ch
                if state == 3:
                    state = 0
            state &= ~1
            ch = self.get()

    def delimited(self, slash: str, regex: bool) -> bool:
        """Read up to the closing ``slash`` (match_slash); False if it is missing."""
        while True:
            ch = self.get()
            if ch in ("", "\n"):
                return False
            if ch == slash:
                return True
            if ch == "\\":
                if self.get() == "":
                    return False
            elif ch == "[" and regex and self.char_class() != "]":
                return False

    def end_of_command(self) -> str | None:
        ch = self.nonblank()
        if ch in ("}", "#"):
            self.unget(ch)
        elif ch not in ("", "\n", ";"):
            return f"extra characters after a sed command ({ch!r})"
        return None

    def label(self) -> None:
        ch = self.nonblank()
        while ch not in ("", "\n", " ", "\t", ";", "}", "#"):
            ch = self.get()
        self.unget(ch)

    def to_end_of_line(self) -> None:
        ch = self.get()
        while ch not in ("", "\n"):
            ch = self.get()

    def text(self) -> None:
        """The text of a, i or c: to a newline no backslash escapes (read_text)."""
        ch = self.get()
        while ch not in ("", "\n"):
            if ch == "\\" and self.get() == "":
                return
            ch = self.get()

    def address(self, ch: str) -> str | bool:
        """Read one address starting with ``ch``: True if there was one, False if
        not (nothing read), or what is wrong with it."""
        if ch in ("/", "\\"):
            if ch == "\\":
                ch = self.get()
            if not _sed_delimiter(ch) or not self.delimited(ch, True):
                return "an unterminated or unreadable sed address regex"
            ch = self.nonblank()
            while ch in ("I", "M"):
                ch = self.nonblank()
            self.unget(ch)
            return True
        if ch.isascii() and ch.isdigit():
            self.integer(ch)
            ch = self.nonblank()
            if ch == "~":
                self.integer(self.nonblank())
            else:
                self.unget(ch)
            return True
        if ch in ("+", "~"):
            self.integer(self.nonblank())
            return True
        return ch == "$"


def _sed_delimiter(ch: str) -> bool:
    # sed refuses a newline or a multibyte delimiter in a UTF-8 locale, but reads a
    # non-ASCII one byte by byte in the C locale: both are refused here.
    return ch != "" and ch != "\n" and ch.isascii()


def sed_script_danger(script: str) -> str | None:
    """Why a sed script is unsafe (the ``e`` command or ``s///e`` run commands,
    ``w``/``W`` and ``s///w`` write files), or None. The script is read as GNU sed
    4.9 reads it; what sed would refuse to compile is refused too."""
    r = _SedScript(script)
    while True:
        ch = r.get()
        while ch == ";" or (ch != "" and ch in " \t\n\v\f\r"):
            ch = r.get()
        if ch == "":
            return None
        found = r.address(ch)
        if isinstance(found, str):
            return found
        if found:
            ch = r.nonblank()
            if ch == ",":
                second = r.address(r.nonblank())
                if second is not True:
                    return second or "a sed address range without its second address"
                ch = r.nonblank()
        if ch == "!":
            ch = r.nonblank()
        problem = _sed_command(r, ch)
        if problem is not None:
            return problem


def _sed_command(r: _SedScript, ch: str) -> str | None:
    if ch == "#":
        r.to_end_of_line()
    elif ch in ("v", ":", "b", "t", "T"):
        r.label()
    elif ch == "{":
        pass
    elif ch == "}":
        return r.end_of_command()
    elif ch == "e":
        return "the sed 'e' command runs a shell command"
    elif ch in ("w", "W"):
        return f"the sed '{ch}' command writes a file"
    elif ch in ("a", "i", "c"):
        lead = r.nonblank()
        if lead == "":
            return f"a sed '{ch}' command without its text"
        if lead == "\\":
            r.get()  # 'a\' then one character taken as it is (a newline, or text)
        else:
            r.unget(lead)
        r.text()
    elif ch in ("q", "Q", "l", "L"):
        ch = r.nonblank()
        if ch.isascii() and ch.isdigit():
            r.integer(ch)
        else:
            r.unget(ch)
        return r.end_of_command()
    elif ch in "=dDFgGhHnNpPzx" and ch:
        return r.end_of_command()
    elif ch in ("r", "R"):
        r.to_end_of_line()  # the file name: read, not written
    elif ch == "s":
        slash = r.get()
        if not _sed_delimiter(slash) or not r.delimited(slash, True) \
                or not r.delimited(slash, False):
            return "an unterminated or unreadable sed s command"
        return _sed_s_flags(r)
    elif ch == "y":
        slash = r.get()
        if not _sed_delimiter(slash) or not r.delimited(slash, False) \
                or not r.delimited(slash, False):
            return "an unterminated or unreadable sed y command"
        return r.end_of_command()
    elif ch == "":
        return "a sed address without a command"
    else:
        return f"a sed command this check does not know ({ch!r})"
    return None


def _sed_s_flags(r: _SedScript) -> str | None:
    while True:
        ch = r.nonblank()
        if ch == "e":
            return "the s///e flag runs the result as a shell command"
        if ch == "w":
            return "the s///w flag writes a file"
        if ch in ("i", "I", "m", "M", "p", "g"):
            continue
        if ch.isascii() and ch.isdigit():
            r.integer(ch)
            continue
        if ch in ("}", "#"):
            r.unget(ch)
            return None
        if ch in ("", "\n", ";"):
            return None
        if ch == "\r" and r.get() == "\n":
            return None
        return f"an s command flag sed does not know ({ch!r})"


# awk: the danger is in the program's code, not in its strings, regular expressions
# and comments; but where a regular expression starts depends on the grammar ('/' is
# also division) and where it ends differs between awks. So the reader does not
# guess: at every '/' it follows every reading (a regex to each '/' that may close
# it, and a division unless no operand ends before the '/' on its line), and refuses
# a program when any reading reaches code that can run a program or write a file, in
# mawk (Debian's awk) and gawk alike:
#
# - ``system`` and ``getline`` anywhere in code (also inside a longer name);
# - a pipe ``|`` (``print | "cmd"``, ``"cmd" | getline``, gawk's ``|&``); ``||`` is
#   the logical or;
# - ``>`` inside an action's braces and outside parentheses, where ``print > "file"``
#   and ``>>`` redirect (both awks redirect only at parenthesis depth 0 of a print);
#   the message says to parenthesize the comparison or turn it round (``b < a``);
# - ``@`` (gawk's ``@load``, ``@include``, indirect calls ``@f()``);
# - a backslash before a newline, anywhere (a continued line or string).
#
# A string is a '"' to the next '"' no backslash escapes; a newline ends every
# string and regex with an error, and so does the end of the program: such a
# reading is dropped (awk would not run it). A program no reading lexes is refused.

_AWK_WORDS = ("system", "getline")
_AWK_SPECIAL = re.compile(r'["/#|>@{}()]|system|getline')
_AWK_IN_STRING = re.compile(r'[\\"\n]')
_AWK_IN_REGEX = re.compile(r"[\\/\[\n]")
_AWK_MAX_ENDS = 32  # '/' that may close one regex (after a '['), before giving up
_AWK_BUDGET = 100_000  # positions and characters looked at over all readings
_AWK_MAX_PROGRAM = 16_384  # characters: an inline program longer than this is refused


def _awk_string_end(p: str, i: int) -> int:
    """Index after the string that starts at ``p[i] == '"'``; -1 if it never ends."""
    while True:
        m = _AWK_IN_STRING.search(p, i + 1)
        if m is None or m.group() == "\n":
            return -1
        if m.group() == '"':
            return m.end()
        i = m.start() + 1  # a backslash: skip the character it escapes


def _awk_regex_ends(p: str, i: int) -> list[int] | None:
    """Indexes after the regex that may start at ``p[i] == '/'``. Before any '[' every
    awk ends it at the first '/' no backslash escapes. After a '[' awks differ (gawk
    counts '[:' inside brackets, mawk has rules of its own, escapes inside brackets
    vary), so every later '/' on the line may end it. A newline ends none. None: more
    possible ends than this check follows."""
    j = i + 1
    while True:
        m = _AWK_IN_REGEX.search(p, j)
        if m is None or m.group() == "\n":
            return []
        if m.group() == "\\":
            j = m.start() + 2
            continue
        if m.group() == "/":
            return [m.end()]
        break  # a '['
    line_end = p.find("\n", m.start())
    tail = p[m.start():len(p) if line_end < 0 else line_end]
    if tail.count("/") > _AWK_MAX_ENDS:
        return None
    return [m.start() + k + 1 for k, ch in enumerate(tail) if ch == "/"]


def _awk_operand_before(p: str, i: int) -> bool:
    """Could the '/' at ``p[i]`` be a division: does an operand (a name, a number, a
    string, a regex, ')', ']', or 'x++') end before it on the same line? A newline
    ends a statement, so a '/' after one starts a regex."""
    j = i - 1
    while j >= 0 and p[j] in " \t\r\f\v":
        j -= 1
    return j >= 0 and (p[j].isalnum() or p[j] in "_)]\"/.+-" or not p[j].isascii())


def awk_program_danger(program: str) -> str | None:
    """Why an awk program is unsafe: ``system()``, ``getline``, pipes to or from
    commands, output redirection (``>``, ``>>``), ``@`` (loading extensions or
    source, indirect calls), or a backslash-newline; or None."""
    p = program
    n = len(p)
    if n > _AWK_MAX_PROGRAM:
        return (f"the awk program is {n} characters long; this check reads programs up to "
                f"{_AWK_MAX_PROGRAM}")
    if "\\\n" in p or "\\\r" in p:
        return ("the awk program continues a line with a backslash; join the lines "
                "(this check reads awk code line by line)")
    # Each reading is at a position with its depth of braces and parentheses: '>' is
    # a comparison, never a redirection, outside every action's braces (a pattern)
    # and inside parentheses (mawk and gawk redirect only at depth 0 of a print).
    # Positions are visited in order; a stretch of ordinary code is jumped over.
    states: dict[int, set[tuple[int, int]]] = {0: {(0, 0)}}
    pending = [0]
    work = 0

    def reach(pos: int, new: set[tuple[int, int]]) -> None:
        at = states.get(pos)
        if at is None:
            states[pos] = set(new)
            heapq.heappush(pending, pos)
        else:
            at |= new

    while pending:
        i = heapq.heappop(pending)
        if i == n:
            break
        here = states.pop(i)
        work += len(here)
        if work > _AWK_BUDGET:
            return "the awk program is too complex for this check; simplify it"
        m = _AWK_SPECIAL.search(p, i)
        if m is None:
            reach(n, here)
            continue
        if m.start() > i:
            reach(m.start(), here)
            continue
        token = m.group()
        if token in _AWK_WORDS:
            return (f"the awk program uses {token!r}, which can run commands or read "
                    "from them")
        if token == '"':
            end = _awk_string_end(p, i)
            if end > 0:
                work += end - i
                reach(end, here)
            continue
        if token == "#":
            end = p.find("\n", i)
            reach(n if end < 0 else end, here)
            continue
        nxt = i + 1
        if token == "/":
            ends = _awk_regex_ends(p, i)
            if ends is None:
                return ("the awk program has a regular expression with a '[' and many '/' "
                        "after it on its line; this check cannot tell where it ends")
            work += (ends[-1] if ends else i) - i
            for end in ends:
                reach(end, here)
            if not _awk_operand_before(p, i):
                continue  # no division here: only the regex reading
        elif token == "|":
            if not p.startswith("||", i):
                return ("the awk program uses '|', a pipe to or from a command "
                        "(write 'a || b' for the logical or)")
            nxt = i + 2
        elif token == ">":
            if any(braces and not parens for braces, parens in here):
                return ("the awk program uses '>' in an action, where it may redirect "
                        "output to a file; for a comparison write it in parentheses "
                        "('($1 > 2)') or the other way round ('b < a' for 'a > b')")
        elif token == "@":
            return ("the awk program uses '@' (gawk's @load, @include or an indirect "
                    "call), which can load code or call system")
        else:  # braces and parentheses
            moved = set()
            for braces, parens in here:
                braces += (token == "{") - (token == "}")
                parens += (token == "(") - (token == ")")
                if braces < 0 or parens < 0:
                    continue  # awk would not run it: this reading is dropped
                if braces > 64 or parens > 64:
                    return "the awk program nests too deeply for this check"
                moved.add((braces, parens))
            if moved:
                reach(nxt, moved)
            continue
        reach(nxt, here)
    if n not in states:
        return ("the awk program has a string or regular expression that does not end, "
                "or unbalanced braces or parentheses; this check cannot read it")
    return None


def _sed_scripts(words: Sequence[Word]) -> list[Word]:
    scripts: list[Word] = []
    positional: Word | None = None
    i = 0
    while i < len(words):
        w = words[i]
        v = w.value
        if v in ("-e", "--expression") and i + 1 < len(words):
            scripts.append(words[i + 1])
            i += 2
            continue
        if v is not None and v.startswith("--") and len(v) > 2:
            # getopt_long accepts any unique prefix: --e, --ex=... are --expression.
            name, eq, attached = v.partition("=")
            if len(name) >= 3 and "--expression".startswith(name):
                if eq:
                    scripts.append(Word(w.text, attached, "", False))
                elif i + 1 < len(words):
                    scripts.append(words[i + 1])
                    i += 1
            elif len(name) >= 4 and "--line-length".startswith(name) and not eq:
                i += 1
        elif v is not None and v.startswith("-") and not v.startswith("--") and len(v) > 1:
            # A getopt bundle: -nes,^,x,e is -n then -e with the value 's,^,x,e'.
            for j in range(1, len(v)):
                if v[j] == "e":
                    if j + 1 < len(v):
                        scripts.append(Word(w.text, v[j + 1 :], "", False))
                    elif i + 1 < len(words):
                        scripts.append(words[i + 1])
                        i += 1
                    break
                if v[j] in "fl":
                    if j + 1 == len(v):
                        i += 1
                    break
        elif v is None and w.prefix.startswith("-"):
            scripts.append(w)  # an option we cannot read may be -e with a script
        elif positional is None and (v is None or not v.startswith("-") or v == "-"):
            positional = w
        i += 1
    if not scripts and positional is not None:
        scripts.append(positional)
    return scripts


def _analyze_sed(words: Sequence[Word]) -> str | None:
    for script in _sed_scripts(words):
        if script.value is None:
            return f"cannot check the sed script {script.text!r}: it holds an expansion"
        danger = sed_script_danger(script.value)
        if danger:
            return danger
    return None


# gawk's getopt table (a superset of mawk's -F, -f, -v, -W): options with a value, and
# those whose value is optional (glued only); the rest are flags.
_AWK_VALUE_SHORT = "eEfFilvW"
_AWK_OPTIONAL_SHORT = "dDLop"
_AWK_SOURCE_LONG = "--source"
_AWK_VALUE_LONG = ("--source", "--file", "--exec", "--field-separator", "--assign",
                   "--include", "--load")


def _analyze_awk(words: Sequence[Word]) -> str | None:
    """The awk programs of a command line (``-e``/``--source`` values in any getopt
    form: glued, in a bundle, ``--sou=…``; else the first operand), each checked."""
    programs: list[Word] = []
    i = 0
    while i < len(words):
        w = words[i]
        v = w.value
        nxt = words[i + 1] if i + 1 < len(words) else None
        if v is None:
            if w.prefix.startswith("-") or w.prefix == "":
                if not programs:
                    return f"cannot check the awk argument {w.text!r}: it holds an expansion"
            if not programs:
                programs.append(w)
            break
        if v == "--":
            if not programs and nxt is not None:
                programs.append(nxt)
            break
        if v.startswith("--"):
            name, eq, attached = v.partition("=")
            longs = [o for o in _AWK_VALUE_LONG if o.startswith(name)] if len(name) > 2 else []
            if _AWK_SOURCE_LONG in longs:  # --source and what abbreviates it
                if eq:
                    programs.append(Word(w.text, attached, "", False))
                elif nxt is not None:
                    programs.append(nxt)
                    i += 1
            elif longs and not eq:
                i += 1  # the value in the next word
            i += 1
            continue
        if v.startswith("-") and v != "-":
            j = 1
            while j < len(v):
                letter = v[j]
                if letter in _AWK_OPTIONAL_SHORT:
                    break  # the rest of the word is its value
                if letter in _AWK_VALUE_SHORT:
                    rest = v[j + 1:]
                    value = Word(w.text, rest, "", False) if rest else nxt
                    if not rest:
                        i += 1
                    if letter == "e" and value is not None:
                        programs.append(value)
                    break
                j += 1
            i += 1
            continue
        if not programs:
            programs.append(w)
        break
    for program in programs:
        if program.value is None:
            return f"cannot check the awk program {program.text!r}: it holds an expansion"
        danger = awk_program_danger(program.value)
        if danger:
            return danger
    return None


ANALYZERS: dict[str, Callable[[Sequence[Word]], str | None]] = {
    "sed-script": _analyze_sed,
    "awk-program": _analyze_awk,
}

