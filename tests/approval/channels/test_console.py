"""The terminal channel, driven through a real pseudo-terminal: a runner in a child process
asks on its /dev/tty, the test reads the screen and types the answers."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import ApprovalStore
from sandbox.approval.channels.console import PROMPT
from sandbox.approval.rules import RuleBook
from tests.paths import TESTS

pytestmark = pytest.mark.timeout(60)

PROGRAM = TESTS / "programs" / "console_approval.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Terminal:
    """A child process on a pseudo-terminal that is its controlling terminal."""

    def __init__(self, argv: list[str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes a session leader with the pty as its /dev/tty
            try:
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.screen = ""  # everything shown so far, colours stripped
        self._seen = 0
        self.raw = b""

    def expect(self, text: str, timeout: float = 15) -> str:
        """Wait until `text` appears after what was already consumed; return the new output."""
        deadline = time.monotonic() + timeout
        while text not in self.screen[self._seen:]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} did not appear; the screen shows:\n"
                                     f"{self.screen[-2000:]}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the program ended before {text!r}:\n"
                                         f"{self.screen[-2000:]}")
                self.raw += chunk
                self.screen += ANSI.sub("", chunk.decode("utf-8", "replace"))
        end = self.screen.index(text, self._seen) + len(text)
        new, self._seen = self.screen[self._seen:end], end
        return new

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {"store": tmp_path / "approvals.db", "effect": tmp_path / "effect.txt",
            "results": tmp_path / "results.jsonl"}


@pytest.fixture
def console(files: dict[str, Path]) -> Iterator[Any]:
    started: list[Terminal] = []

    def start(*commands: str, timeout: float | None = None) -> Terminal:
        extra = ["--timeout", str(timeout)] if timeout else []
        term = Terminal([sys.executable, str(PROGRAM), str(files["store"]),
                         str(files["effect"]), str(files["results"]), *extra, *commands])
        started.append(term)
        return term

    try:
        yield start
    finally:
        for term in started:
            term.close()


def results(files: dict[str, Path]) -> list[dict[str, Any]]:
    path = files["results"]
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ran(files: dict[str, Path]) -> list[str]:
    path = files["effect"]
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_approve_once_shows_the_call_and_runs_it(console: Any, files: dict[str, Path]) -> None:
    term = console("ls -la /tmp")
    shown = term.expect(PROMPT)
    assert "tool     shell" in shown
    assert "command  ls -la /tmp" in shown
    assert "Please approve or reject" not in shown  # ADK's hint is for the model
    assert "why      shell always asks a human before it runs" in shown
    assert re.search(r"who      (an agent|the agent of session)", shown)
    term.type("y")
    term.expect("all calls done")
    assert results(files)[0] == {"ran": "ls -la /tmp"}
    assert ran(files) == ["ls -la /tmp"]


def test_command_is_syntax_highlighted(console: Any, files: dict[str, Path]) -> None:
    term = console("git log | head -n 3")
    term.expect(PROMPT)
    raw = term.raw.decode()
    assert "\x1b[1;32mgit\x1b[0m" in raw  # the program, bold green
    assert "\x1b[1;33m|\x1b[0m" in raw  # the pipe, bold yellow
    assert "\x1b[1;32mhead\x1b[0m" in raw


def test_carriage_return_in_a_command_is_shown_escaped(console: Any,
                                                        files: dict[str, Path]) -> None:
    term = console("echo harmless\rrm -rf ~/important \x1b[8m")
    shown = term.expect(PROMPT)
    line = next(x for x in shown.splitlines() if "harmless" in x)
    assert "echo harmless\\rrm -rf ~/important \\x1b[8m" in line
    # On the wire: no raw CR between the two halves, and the ESC is not sent as ESC.
    raw = term.raw.decode()
    start = raw.index("harmless")
    segment = raw[start:raw.index("important", start)]
    assert "\r" not in segment
    assert "\x1b[8m" not in raw
    assert "control characters, shown escaped" in shown
    term.type("n")
    term.expect("reason")
    term.type("hidden second command")
    term.expect("all calls done")
    assert results(files)[0]["status"] == "denied"
    assert results(files)[0]["reason"] == "hidden second command"
    assert ran(files) == []


def test_deny_with_a_reason_reaches_the_model(console: Any, files: dict[str, Path]) -> None:
    term = console("rm -rf build")
    term.expect(PROMPT)
    term.type("n")
    term.expect("reason (the model sees it) > ")
    term.type("use make clean instead")
    term.expect("all calls done")
    result = results(files)[0]
    assert result["status"] == "denied"
    assert "use make clean instead" in result["error"]
    assert ran(files) == []


def test_an_edited_command_runs_once_without_a_second_question(console: Any,
                                                                files: dict[str, Path]) -> None:
    term = console("rm -rf /tmp/data")
    term.expect(PROMPT)
    term.type("e")
    term.expect("new command (Enter = back) > ")
    term.type("ls /tmp/data")
    # The human who edited approved the edited command: it runs, nobody is asked again.
    shown = term.expect("all calls done")
    assert PROMPT not in shown
    assert ran(files) == ["ls /tmp/data"]
    assert results(files)[0] == {"ran": "ls /tmp/data"}


def test_an_edit_to_a_blocked_command_stays_blocked(console: Any,
                                                    files: dict[str, Path]) -> None:
    term = console("rm -rf /tmp/data")
    term.expect(PROMPT)
    term.type("e")
    term.expect("new command (Enter = back) > ")
    term.type("wget -qO- http://127.0.0.1:9/x")
    term.expect("all calls done")
    assert ran(files) == []
    assert results(files)[0]["status"] == "blocked"


def test_always_shows_the_rule_before_saving_and_keeps_only_typed_prefixes(
        console: Any, files: dict[str, Path]) -> None:
    term = console("git log --oneline && ls", "git log -p && ls", "git log -p; rm -rf ~")
    term.expect(PROMPT)
    term.type("a")
    shown = term.expect("keep [Enter = exactly this] > ")
    assert "command: git log --oneline" in shown
    term.type("git log")
    shown = term.expect("keep [Enter = exactly this] > ")
    assert "command: ls" in shown
    term.type("")
    shown = term.expect("save this rule and approve? [y/N] > ")
    assert "git log …(and any further words)" in shown
    assert "ls (exactly)" in shown
    term.type("y")
    # Second call: every simple command is covered, nobody is asked.
    # Third call: `rm -rf ~` is not covered, so the human is asked again.
    shown = term.expect(PROMPT)
    assert "git log -p; rm -rf ~" in shown
    term.type("n")
    term.expect("reason")
    term.type("no")
    term.expect("all calls done")
    assert ran(files) == ["git log --oneline && ls", "git log -p && ls"]
    assert [r.get("status") for r in results(files)] == [None, None, "denied"]
    with ApprovalStore(files["store"]) as store:
        rules = RuleBook(store).rules()
    assert sorted((r.words, r.prefix, r.scope) for r in rules) == [
        (("git", "log"), True, "always"), (("ls",), False, "always")]


def test_always_refuses_words_that_are_not_a_prefix(console: Any,
                                                    files: dict[str, Path]) -> None:
    term = console("curl https://example.org/a")
    term.expect(PROMPT)
    term.type("a")
    term.expect("keep [Enter = exactly this] > ")
    term.type("curl https://evil.example")
    term.expect("a rule keeps the first words of the command")
    term.type("")  # keep it exactly
    shown = term.expect("save this rule and approve? [y/N] > ")
    assert "curl https://example.org/a (exactly)" in shown
    term.type("y")
    term.expect("all calls done")
    with ApprovalStore(files["store"]) as store:
        (rule,) = RuleBook(store).rules()
    assert rule.words == ("curl", "https://example.org/a") and not rule.prefix


def test_session_approval_covers_the_same_command_again(console: Any,
                                                        files: dict[str, Path]) -> None:
    term = console("make test", "make test", "make install")
    term.expect(PROMPT)
    term.type("s")
    shown = term.expect(PROMPT)  # only for `make install`
    assert "make install" in shown
    term.type("y")
    term.expect("all calls done")
    assert ran(files) == ["make test", "make test", "make install"]
    with ApprovalStore(files["store"]) as store:
        (rule,) = RuleBook(store).rules()
    assert rule.scope == "session" and rule.words == ("make", "test")


def test_unanswered_prompt_times_out_and_is_recorded_as_timed_out(
        console: Any, files: dict[str, Path]) -> None:
    term = console("shutdown now", timeout=1)
    term.expect(PROMPT)
    term.expect("all calls done", timeout=10)
    result = results(files)[0]
    assert result["status"] == "timed_out"
    assert "denied" not in result["error"] and "approved" not in result["error"]
    assert ran(files) == []


def test_without_a_terminal_the_call_fails_closed(files: dict[str, Path]) -> None:
    proc = subprocess.run(
        [sys.executable, str(PROGRAM), str(files["store"]), str(files["effect"]),
         str(files["results"]), "ls"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
        start_new_session=True,  # no controlling terminal: /dev/tty cannot be opened
    )
    assert proc.returncode == 0, proc.stderr
    result = results(files)[0]
    assert result["status"] == "error"
    assert "no terminal to ask on" in result["error"]
    assert "not approved" in result["error"]
    assert ran(files) == []


# -- `sandbox run` at a real terminal (tmux renders the screen a human sees) --------------

TMUX = shutil.which("tmux")


class Tmux:
    def __init__(self, command: str, cwd: Path) -> None:
        self.name = f"sandbox-test-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.name, "-x", "140", "-y", "40",
                        "-c", str(cwd), command], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def wait_for(self, text: str, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while text not in (screen := self.screen()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not on the screen:\n{screen}")
            time.sleep(0.1)
        return screen

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.fixture
def tmux() -> Iterator[Any]:
    assert TMUX is not None  # the test is marked needs_program("tmux")
    sessions: list[Tmux] = []

    def start(command: str, cwd: Path) -> Tmux:
        sessions.append(Tmux(command, cwd))
        return sessions[-1]

    yield start
    for session in sessions:
        session.close()


@pytest.mark.needs_program("tmux")
def test_sandbox_run_prompt_stays_visible_waits_and_takes_one_key(
        tmux: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the notes\n")
    sandbox = Path(sys.executable).parent / "sandbox"
    term = tmux(f"{sandbox} run --policy readonly -- cat notes.txt; echo EXIT=$?; sleep 60",
                tmp_path)
    term.wait_for(PROMPT.strip())
    time.sleep(2.5)  # a status line ticking every second must not overwrite the question
    screen = term.screen()
    assert "running" not in screen
    [prompt] = [line for line in screen.splitlines() if PROMPT.strip() in line]
    assert prompt.startswith("waiting for your answer")
    # The fields line up: every value starts in the same column.
    rows = [line for line in screen.splitlines()
            if re.match(r"  (tool|command|what|why|who) ", line)]
    assert len(rows) == 5
    starts = {len(row) - len(row[2:].split(" ", 1)[1].lstrip()) for row in rows}
    assert len(starts) == 1, rows
    term.keys("y")  # one key, no Enter
    screen = term.wait_for("EXIT=0")
    assert "the notes" in screen


def test_one_key_answers_and_a_following_enter_is_not_the_next_answer(
        console: Any, files: dict[str, Path]) -> None:
    term = console("rm -rf build", "rm -rf dist")
    term.expect(PROMPT)
    os.write(term.fd, b"n")  # a single key, no Enter
    term.expect("reason (the model sees it) > ")
    term.type("use make clean")
    term.expect(PROMPT)
    term.type("no")  # "no" and Enter: the n chooses; "o" and Enter are not the reason
    term.expect("reason (the model sees it) > ")
    term.type("not today")
    term.expect("all calls done")
    assert [r["reason"] for r in results(files)] == ["use make clean", "not today"]
