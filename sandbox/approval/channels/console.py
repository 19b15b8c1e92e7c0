"""`ConsoleConfirmationProvider`: ask the human at the terminal.

It shows the tool, its arguments (a shell command syntax-highlighted), the hint and the
policy decision, every control character escaped and in reverse video — a carriage
return in a command cannot redraw the line into something harmless-looking. Choices:
approve once, approve for this session, always approve (for a command: the parsed
commands, shown before anything is saved, each one narrowed to a prefix of its words
only if the human types that prefix), deny with a reason, edit the arguments. An
edit approves the edited call: the runner validates it and checks the policy's hard
refusals again (a blocked command stays blocked), then runs it once without asking
again.

It talks to ``/dev/tty`` by default, so it works while stdin/stdout are pipes, and fails
closed with a clear message when there is no terminal. Reads happen in a worker thread
that stops when the wait is cancelled; typed-ahead input is discarded before each
question, so an answer typed for one prompt never answers the next.
"""

from __future__ import annotations

import errno
import getpass
import json
import os
import select
import shlex
import threading
import time
from typing import IO, Any

import anyio
import anyio.to_thread

from sandbox.approval.display import (
    BOLD,
    RESET,
    REVERSE,
    command_of,
    count_controls,
    highlight_bash,
    json_pieces,
    rule_subjects_of,
    terminal_text,
    visible_details,
)
from sandbox.approval.explain import explain
from sandbox.approval.models import ConfirmationRequest, Decision, Remember, RulePattern
from sandbox.approval.providers import OnTimeout, _check_timeout
from sandbox.approval.rules import ALWAYS_TTL
from sandbox.errors import ConfigurationError

MAX_LINE = 64 * 1024


class NoTerminalError(ConfigurationError):
    """There is no terminal to ask on: the call is refused (fail closed)."""


class _Terminal:
    """One input and one output, read line by line off the event loop.

    With a real file descriptor, reading polls it in short slices so that a cancelled
    wait ends the reading thread too (an abandoned blocking read would steal the next
    answer). Objects without a descriptor (`io.StringIO` in tests) are read directly.
    """

    def __init__(self, inp: IO[Any], out: IO[Any], *, owned_fd: int | None = None) -> None:
        self.inp = inp
        self.out = out
        self.owned_fd = owned_fd
        try:
            self.fd: int | None = inp.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None
        self._buffer = b""

    def isatty(self) -> bool:
        try:
            return bool(self.inp.isatty()) and bool(self.out.isatty())
        except (AttributeError, ValueError):
            return False

    def write(self, text: str) -> None:
        try:
            self.out.write(text)
        except TypeError:  # a binary stream
            self.out.write(text.encode("utf-8", "replace"))
        self.out.flush()

    def discard_typeahead(self) -> None:
        self._buffer = b""
        if self.fd is None:
            return
        try:
            import termios

            termios.tcflush(self.fd, termios.TCIFLUSH)
        except (ImportError, OSError):
            pass

    def readkey(self, cancelled: threading.Event) -> str | None:
        """One key press, without waiting for Enter (a whole line when this is not a
        terminal); None at end of input.

        An Enter pressed alone chooses nothing. Whatever follows the key within a
        moment, up to an Enter (the rest of "yes", or the Enter itself), is dropped, so
        "y" and "y⏎" and "yes⏎" answer the same and never spill into the next question.
        """
        if self.fd is None or not self.isatty():
            line = self.readline(cancelled)
            return None if line is None else line.strip()
        import termios
        import tty

        saved = termios.tcgetattr(self.fd)
        try:
            tty.setcbreak(self.fd, termios.TCSANOW)
            while True:
                byte = self._read_byte(cancelled, None)
                if byte is None:
                    return None
                if byte not in (b"\r", b"\n", b" "):
                    break
            raw = byte
            while True:  # the rest of a multi-byte UTF-8 character
                try:
                    key = raw.decode("utf-8")
                    break
                except UnicodeDecodeError:
                    more = self._read_byte(cancelled, 0.05)
                    if more is None or len(raw) >= 4:
                        key = raw.decode("utf-8", "replace")
                        break
                    raw += more
            deadline = time.monotonic() + 0.3
            while (left := deadline - time.monotonic()) > 0:
                follow = self._read_byte(cancelled, left)
                if follow is None or follow in (b"\r", b"\n"):
                    break
            return key
        finally:
            termios.tcsetattr(self.fd, termios.TCSANOW, saved)

    def _read_byte(self, cancelled: threading.Event, timeout: float | None) -> bytes | None:
        """One byte (buffered first); None at end of input, on cancel, or at timeout."""
        if self._buffer:
            byte, self._buffer = self._buffer[:1], self._buffer[1:]
            return byte
        assert self.fd is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while not cancelled.is_set():
            wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if wait <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 1)
            except OSError as exc:
                if exc.errno == errno.EIO:
                    return None
                raise
            return chunk or None
        return None

    def readline(self, cancelled: threading.Event) -> str | None:
        """One line without its newline, or None at end of input."""
        if self.fd is None:
            line = self.inp.readline(MAX_LINE)
            if not line:
                return None
            text = line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line)
            return text.rstrip("\r\n")
        while b"\n" not in self._buffer:
            if cancelled.is_set():
                return None
            if len(self._buffer) > MAX_LINE:
                raise ConfigurationError(f"an answer longer than {MAX_LINE} bytes was typed")
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 4096)
            except OSError as exc:
                if exc.errno == errno.EIO:  # the terminal went away
                    return None
                raise
            if not chunk:
                if self._buffer:
                    break
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode("utf-8", "replace").rstrip("\r")

    def close(self) -> None:
        if self.owned_fd is not None:
            for stream in (self.inp, self.out):
                try:
                    stream.close()
                except OSError:
                    pass


class _Back(Exception):
    """The human stepped back to the main menu."""


class ConsoleConfirmationProvider:
    """Asks at the terminal. ``input``/``output`` default to ``/dev/tty``.

    ``require_tty`` (default True) refuses streams that are not a terminal, so piping
    ``yes`` into a program cannot approve its calls. ``identity`` is recorded as who
    decided (default: the login name).
    """

    def __init__(
        self,
        *,
        input: IO[Any] | None = None,
        output: IO[Any] | None = None,
        timeout: float | None = 600.0,
        on_timeout: OnTimeout = "deny",
        colour: bool | None = None,
        require_tty: bool = True,
        identity: str | None = None,
        name: str = "console",
        max_attempts: int = 5,
        rule_ttl: float = ALWAYS_TTL,
    ) -> None:
        _check_timeout(timeout, on_timeout)
        if (input is None) != (output is None):
            raise ConfigurationError(
                "pass both input and output streams, or neither (then /dev/tty is used)"
            )
        self._input = input
        self._output = output
        self.timeout = timeout
        self.on_timeout: OnTimeout = on_timeout
        self.colour = colour
        self.require_tty = require_tty
        self.identity = identity
        self.name = name
        self.max_attempts = max_attempts
        self.rule_ttl = rule_ttl
        self._lock = anyio.Lock()  # one question at a time on one terminal

    # -- the conversation ------------------------------------------------------------

    async def confirm(self, request: ConfirmationRequest) -> Decision:
        async with self._lock:
            term = self._open()
            cancelled = threading.Event()
            try:
                return await self._converse(term, request, cancelled)
            finally:
                cancelled.set()
                term.close()

    async def _converse(self, term: _Terminal, request: ConfirmationRequest,
                        cancelled: threading.Event) -> Decision:
        colour = self.colour if self.colour is not None else (
            term.isatty() and "NO_COLOR" not in os.environ)
        term.discard_typeahead()
        term.write(self._render(request, colour))

        async def ask(prompt: str) -> str:
            term.write(prompt)
            line = await anyio.to_thread.run_sync(term.readline, cancelled,
                                                  abandon_on_cancel=True)
            if line is None:
                raise ConfigurationError(
                    "the terminal closed before an answer; the call was not approved"
                )
            return line

        async def choose() -> str:
            left = ""
            if self.timeout:
                left = f", {max(0, int(deadline - time.monotonic()))} s left"
            term.write(_menu(colour, left))
            key = await anyio.to_thread.run_sync(term.readkey, cancelled,
                                                 abandon_on_cancel=True)
            if key is None:
                raise ConfigurationError(
                    "the terminal closed before an answer; the call was not approved"
                )
            term.write(terminal_text(key, colour=colour) + "\n")
            return key

        deadline = time.monotonic() + (self.timeout or 0)
        who = self.identity or _login_name()
        command = command_of(request.args)
        subjects = rule_subjects_of(request)
        for _ in range(self.max_attempts):
            choice = (await choose()).strip().lower()
            try:
                if choice in ("y", "yes", "1"):
                    return Decision.approve(decided_by=who, channel=self.name)
                if choice in ("s", "2"):
                    return Decision.approve(scope="session", decided_by=who, channel=self.name)
                if choice in ("a", "3"):
                    remember = await self._always(ask, term, request, subjects, colour)
                    return Decision.approve(scope="always", remember=remember, decided_by=who,
                                            channel=self.name)
                if choice in ("n", "no", "d", "4"):
                    reason = (await ask("reason (the model sees it) > ")).strip()
                    return Decision.deny(reason or "denied at the terminal", decided_by=who,
                                         channel=self.name)
                if choice in ("e", "5"):
                    args = await self._edit(ask, term, request, command, colour)
                    return Decision.edit(args, decided_by=who, channel=self.name)
            except _Back:
                term.write(self._render(request, colour))
                continue
            term.write(f"  not a choice: {terminal_text(choice, colour=colour)!s}\n")
        raise ConfigurationError(
            f"no valid choice after {self.max_attempts} tries; the call was not approved"
        )

    async def _always(self, ask: Any, term: _Terminal, request: ConfirmationRequest,
                      subjects: list[list[str]] | None, colour: bool) -> Remember:
        if subjects is None:
            term.write(f"  1) these exact arguments of {terminal_text(request.tool)}\n"
                       f"  2) every call of {terminal_text(request.tool)}\n")
            pick = (await ask("rule [1/2, Enter = back] > ")).strip()
            if pick not in ("1", "2"):
                raise _Back
            remember = Remember(tool_wide=pick == "2", ttl=self.rule_ttl)
            summary = ["every call of " + terminal_text(request.tool)] if pick == "2" else [
                "exactly: " + terminal_text(json.dumps(request.args, sort_keys=True,
                                                       ensure_ascii=False))]
        else:
            if not subjects or not all(subjects):
                term.write("  this command could not be parsed into simple commands; "
                           "it can only be approved once\n")
                raise _Back
            patterns: list[RulePattern] = []
            term.write("  a rule covers each simple command of this call; Enter keeps a "
                       "command exactly,\n  or type its first words to cover every command "
                       "starting with them\n")
            for argv in subjects:
                patterns.append(await self._pattern(ask, term, argv, colour))
            remember = Remember(patterns=tuple(patterns), ttl=self.rule_ttl)
            summary = [_pattern_text(p, colour) for p in patterns]
        term.write(f"{BOLD if colour else ''}will save, scope always, expires in "
                   f"{_duration(self.rule_ttl)}:{RESET if colour else ''}\n")
        for line in summary:
            term.write(f"    {line}\n")
        if (await ask("save this rule and approve? [y/N] > ")).strip().lower() not in ("y", "yes"):
            raise _Back
        return remember

    async def _pattern(self, ask: Any, term: _Terminal, argv: list[str],
                       colour: bool) -> RulePattern:
        exact = RulePattern(words=tuple(argv))
        term.write(f"  command: {_words_text(argv, colour)}\n")
        for _ in range(self.max_attempts):
            typed = (await ask("  keep [Enter = exactly this] > ")).strip()
            if not typed:
                return exact
            try:
                words = tuple(shlex.split(typed))
            except ValueError as exc:
                term.write(f"  cannot read that ({exc}); quote as in the shell\n")
                continue
            prefix_words = words[:-1] if words and words[-1] == "*" else words
            if prefix_words and tuple(argv[: len(prefix_words)]) == prefix_words:
                open_ended = len(prefix_words) < len(argv) or words[-1:] == ("*",)
                return RulePattern(words=prefix_words, prefix=open_ended)
            term.write("  a rule keeps the first words of the command, nothing else; "
                       "try again\n")
        raise _Back

    async def _edit(self, ask: Any, term: _Terminal, request: ConfirmationRequest,
                    command: str | None, colour: bool) -> dict[str, Any]:
        if command is not None:
            term.write(f"  current: {highlight_bash(command, colour=colour)}\n")
            new = await ask("new command (Enter = back) > ")
            if not new.strip():
                raise _Back
            return {**request.args, "command": new}
        for _ in range(self.max_attempts):
            text = await ask("new arguments as a JSON object (Enter = back) > ")
            if not text.strip():
                raise _Back
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                term.write(f"  not JSON: {exc.msg} at position {exc.pos}\n")
                continue
            if isinstance(value, dict):
                return value
            term.write("  the arguments must be a JSON object {...}\n")
        raise _Back

    # -- output ------------------------------------------------------------------------

    def _render(self, request: ConfirmationRequest, colour: bool) -> str:
        b, r = (BOLD, RESET) if colour else ("", "")
        rows: list[tuple[str, str]] = [("tool", terminal_text(request.tool, colour=colour))]
        command = command_of(request.args)
        if command is not None:
            rows.append(("command", highlight_bash(command, colour=colour)))
            rest = {k: v for k, v in request.args.items() if k != "command"}
            if rest:
                rows.append(("args", terminal_text(
                    json.dumps(rest, sort_keys=True, ensure_ascii=False), colour=colour)))
        else:
            rows.append(("args", "".join(
                f"{REVERSE}{p.text}{RESET}" if p.escaped and colour else p.text
                for p in json_pieces(request.args))))
        subjects = rule_subjects_of(request)
        if subjects and (len(subjects) > 1 or command is None):
            rows.append(("parsed", " ; ".join(_words_text(a, colour) for a in subjects)))
        said = explain(request)
        rows.append(("what", terminal_text(said.what, colour=colour)))
        rows.append(("why", terminal_text(said.why, colour=colour)))
        rows.append(("who", terminal_text(said.who, colour=colour)))
        for key, value in visible_details(request).items():
            if key in ("commands", "workspace", "policy") and command is not None:
                continue  # said in "what" and "why", or the command itself
            if isinstance(value, dict) and isinstance(value.get("reason"), str):
                value = value["reason"]  # a policy decision: its sentence says it all
            shown = value if isinstance(value, str) else json.dumps(
                value, sort_keys=True, ensure_ascii=False, default=str)
            rows.append((terminal_text(str(key), colour=colour),
                         terminal_text(shown, colour=colour)))
        width = max(len(label) for label, _ in rows) + 2
        lines = [f"\n{b}── approval needed ──{r} {request.id}"]
        for label, text in rows:
            pad = " " * (width - len(label))
            lines.append(f"  {b}{label}{r}{pad}" + text.replace("\n", "\n  " + " " * width))
        controls = sum(count_controls(v) for v in _strings(request.args))
        if controls:
            lines.append(f"  ⚠ contains control characters, shown escaped"
                         f"{' in reverse video' if colour else ''} (e.g. \\r, \\x1b)")
        if request.expires_at is not None:
            left = request.expires_at.timestamp() - time.time()
            lines.append(f"  expires in {max(0, int(left))} s")
        return "\n".join(lines) + "\n"

    def _open(self) -> _Terminal:
        if self._input is not None and self._output is not None:
            term = _Terminal(self._input, self._output)
            if self.require_tty and not term.isatty():
                raise NoTerminalError(
                    "ConsoleConfirmationProvider was given streams that are not a terminal; "
                    "the call was not approved. Give it a TTY, or pass require_tty=False "
                    "if an automated answer is really meant"
                )
            return term
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        except OSError as exc:
            raise NoTerminalError(
                f"no terminal to ask on (/dev/tty: {exc.strerror}); the call was not "
                "approved. Run it in a terminal, or have someone answer elsewhere: on the "
                "approvals web page or with `sandbox approvals` (from the command line: "
                "`sandbox run --approve auto|deny`)"
            ) from None
        inp = os.fdopen(fd, "rb", buffering=0)
        out = os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="replace")
        return _Terminal(inp, out, owned_fd=fd)


#: The end of the question line: what a human types at (and tests wait for).
PROMPT = "press y, s, a, n or e > "


def _menu(colour: bool, left: str = "") -> str:
    b, r = (BOLD, RESET) if colour else ("", "")
    return (f"  {b}[y]{r} approve once    {b}[s]{r} approve for this session    "
            f"{b}[a]{r} always approve…\n"
            f"  {b}[n]{r} deny with a reason    {b}[e]{r} edit the arguments\n"
            f"{b}waiting for your answer{r}{left} · {PROMPT}")


def _words_text(words: list[str] | tuple[str, ...], colour: bool) -> str:
    return " ".join(terminal_text(shlex.quote(w), colour=colour) for w in words)


def _pattern_text(pattern: RulePattern, colour: bool) -> str:
    words = _words_text(pattern.words, colour)
    return f"{words} …(and any further words)" if pattern.prefix else f"{words} (exactly)"


def _strings(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} seconds"


def _login_name() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
