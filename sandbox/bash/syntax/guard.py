"""The parse worker: long commands are parsed in a child process with a deadline (see
the comment below)."""

from __future__ import annotations

import atexit
import io
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import tree_sitter
import tree_sitter_bash

from sandbox.bash.syntax import model
from sandbox.bash.syntax.agreement import check_agreement
from sandbox.bash.syntax.grammar import _parser
from sandbox.bash.syntax.model import (
    ParsedScript,
    SimpleCommand,
    Word,
)
from sandbox.bash.syntax.script import _parse_tree

# ---------------------------------------------------------------------------
# The parse worker: long commands are parsed in a child process with a deadline.
#
# tree-sitter-bash's error recovery is quadratic or worse on some input (64 KiB of
# "a | " takes ~9 s, 16 KiB of "[`<do" ~8 s; long pipelines are quadratic even when
# valid). It holds the GIL, and tree-sitter checks its progress callback only
# between parse actions (16 KiB of "a | " once ran 0.86 s past a 50 ms budget; the
# callback above stopped it after ~25 ms, but only short commands rely on it); and on
# some large crafted input the C parser has crashed a whole process (seen once in
# a property test). A command over GUARDED_PARSE_ABOVE bytes, or with many nesting
# openers, is therefore parsed first by a long-lived worker process: started on the
# first such command, fed over a pipe, and killed (then started afresh on the next
# one) when tree-sitter has not finished after ``max_seconds``. Once it has, the
# worker walks its tree and runs R9's agreement check too, and sends back the whole
# ParsedScript (pickled; this process unpickles nothing but the model's NamedTuples).
# Such a command is never parsed in this process: a long parse here, even in a worker
# thread, holds the GIL for tens of milliseconds at a time (64 KiB of words: single
# tree-sitter operations, and the walk's regular expressions over the whole source),
# which is the agent's event loop waiting.

# Above this size a command is parsed in the worker first.
GUARDED_PARSE_ABOVE = 4096
# The worker's program. -I -S, cwd "/" and an empty environment: it must not import
# anything the agent could have written (a tree_sitter.py in the workspace would run
# outside the sandbox). Its path is where this process found tree-sitter, then the
# standard library, then the directory holding this package, last: it imports this
# module the usual way (the package's top levels import nothing themselves).
_GUARD_CODE = (
    "import sys\n"
    "root, *paths = sys.argv[1:]\n"
    "sys.path[:0] = paths\n"
    # Only the `sandbox` package from its directory (see spawner._PACKAGE_ONLY).
    "import importlib.util\n"
    "from importlib.machinery import PathFinder\n"
    "_spec = PathFinder.find_spec('sandbox', [root])\n"
    "assert _spec is not None and _spec.loader is not None, root\n"
    "sys.modules['sandbox'] = _module = importlib.util.module_from_spec(_spec)\n"
    "_spec.loader.exec_module(_module)\n"
    "from sandbox.bash.syntax.guard import _serve\n"
    "_serve(sys.stdin.buffer, sys.stdout.buffer)\n"
)
# The directory holding the `sandbox` package.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
# Where this process found tree-sitter: the child imports it from there and from
# nowhere else (no current directory, no PYTHONPATH, no site hooks).
_GUARD_PATHS = sorted(
    {
        str(Path(module.__file__).resolve().parent.parent)
        for module in (tree_sitter, tree_sitter_bash)
        if module.__file__
    }
)
_LENGTH = struct.Struct("!I")
# How long a worker may take to start, and to check a tree it has parsed (linear
# work, bounded only against a wedged worker).
_WORKER_START_SECONDS = 10.0
_WORKER_CHECK_SECONDS = 60.0
# How long the next long command waits for a verdict nobody asked for before it
# replaces the worker (starting one costs ~40 ms).
_UNASKED_VERDICT_SECONDS = 0.02


# Bytes that open a nesting level somewhere in bash's grammar. A short command with
# hundreds of them is crafted, not typed: it goes through the worker too, since
# deep nesting is where a C parser's recursion is likeliest to run out of stack.
_OPENERS = (b"(", b"{", b"`", b"<", b"[")
GUARDED_OPENERS_ABOVE = 256


def _needs_guard(data: bytes) -> bool:
    if len(data) > GUARDED_PARSE_ABOVE:
        return True
    return sum(data.count(o) for o in _OPENERS) > GUARDED_OPENERS_ABOVE


def _serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """The worker's loop: read a command (its max_depth, then its UTF-8 bytes), reply
    "P" as soon as tree-sitter has parsed it, then "S" + the pickled ParsedScript of
    `_parse_tree` on that tree (walk and R9 included), or "E" + an error. Ends at
    EOF."""
    replies.write(b"R")
    replies.flush()
    while True:
        header = requests.read(_LENGTH.size * 2)
        if len(header) < _LENGTH.size * 2:
            return
        size, max_depth = _LENGTH.unpack_from(header), _LENGTH.unpack_from(header, 4)
        data = requests.read(size[0])
        if len(data) < size[0]:
            return
        root = _parser().parse(data).root_node
        replies.write(b"P")
        replies.flush()
        try:
            script = _parse_tree(data.decode("utf-8"), data, max_depth[0], check_agreement,
                                 root=root)  # fmt: skip
            reply = b"S" + _pickled(script)
        except Exception as exc:  # a bug: reported to the caller, which fails closed
            reply = b"E" + f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
        replies.write(_LENGTH.pack(len(reply)) + reply)
        replies.flush()


# What the worker's reply may hold: this module's model, nothing else (pickle would
# otherwise build any object a compromised worker named).
_MODEL = ("Word", "Assignment", "SimpleCommand", "Operator", "Redirect", "Finding",
          "ParsedScript")  # fmt: skip


class _ModelUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        if module == model.__name__ and name in _MODEL:
            found: type = getattr(model, name)
            return found
        raise pickle.UnpicklingError(f"the parse worker sent {module}.{name}")


# Unpickling holds the GIL for as long as one pickle takes (a script of 32,000
# commands: ~25 ms of CPU, ~180 ms of the event loop waiting on this machine), so the
# worker pickles a script in pieces of at most this many items (commands, or the
# words of one command), and the agent loads them one by one.
_ITEMS_PER_PICKLE = 256


def _dumps(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _pickled(script: ParsedScript) -> bytes:
    """``script`` as pieces: per field, ("v", a pickle) or ("t", runs of its items),
    a run being ("i", a pickled tuple of items) or, for a command of many words,
    ("w", the command without its words, [pickled tuples of its words])."""
    fields: list[tuple[str, object]] = []
    for value in script:
        if type(value) is not tuple:
            fields.append(("v", _dumps(value)))
            continue
        runs: list[tuple[object, ...]] = []
        pending: list[object] = []
        for item in value:
            if type(item) is SimpleCommand and len(item.words) > _ITEMS_PER_PICKLE:
                if pending:
                    runs.append(("i", _dumps(tuple(pending))))
                    pending = []
                words = item.words
                runs.append(("w", _dumps(item._replace(words=())), [
                    _dumps(words[i : i + _ITEMS_PER_PICKLE])
                    for i in range(0, len(words), _ITEMS_PER_PICKLE)]))  # fmt: skip
                continue
            pending.append(item)
            if len(pending) == _ITEMS_PER_PICKLE:
                runs.append(("i", _dumps(tuple(pending))))
                pending = []
        if pending:
            runs.append(("i", _dumps(tuple(pending))))
        fields.append(("t", runs))
    return _dumps(fields)


def _unpickled(data: bytes) -> ParsedScript:
    """The script `_pickled` made, loaded a piece at a time (the interpreter can hand
    the GIL to another thread between pieces). Raises on anything else."""

    def load(piece: Any) -> Any:
        if type(piece) is not bytes:
            raise pickle.UnpicklingError("the parse worker sent a malformed reply")
        return _ModelUnpickler(io.BytesIO(piece)).load()

    fields: list[Any] = []
    for kind, payload in load(data):
        if kind == "v":
            fields.append(load(payload))
            continue
        items: list[object] = []
        for run in payload:
            if run[0] == "i":
                items.extend(load(run[1]))
                continue
            command = load(run[1])
            words: list[Word] = []
            for piece in run[2]:
                words.extend(load(piece))
            if type(command) is not SimpleCommand:
                raise pickle.UnpicklingError("the parse worker sent a malformed reply")
            items.append(command._replace(words=tuple(words)))
        fields.append(tuple(items))
    return ParsedScript(*fields)


def _read(fd: int, size: int, deadline: float) -> bytes | None:
    """``size`` bytes from ``fd`` (fewer at EOF), or None when ``deadline`` passes first."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    wanted = size
    while wanted:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return None
        chunk = os.read(fd, wanted)
        if not chunk:
            break
        chunks.append(chunk)
        wanted -= len(chunk)
    return b"".join(chunks)


class _ParseWorker:
    """One worker process, its pipes, and what it was started from."""

    def __init__(self) -> None:
        self.code = _GUARD_CODE
        self.owner = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", self.code, _PACKAGE_ROOT, *_GUARD_PATHS],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd="/", env={}, bufsize=0,
        )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin
        self.replies = self.process.stdout.fileno()
        self.reply_due = False  # a parsed command's script is still to be read

    def ended(self) -> str:
        """Reap the worker after EOF: "crashed" when a signal ended it."""
        self.stop()
        code = self.process.returncode
        return "crashed" if code is not None and code < 0 else "unavailable"

    def overran(self) -> str:
        self.stop()
        return "slow"

    def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def started(self) -> str:
        ready = _read(self.replies, 1, time.monotonic() + _WORKER_START_SECONDS)
        if ready == b"R":
            return "ok"
        if ready is None:
            return self.overran()
        return self.ended()

    def parse(self, data: bytes, max_depth: int, seconds: float) -> str:
        """Send ``data``: "parsed" once tree-sitter is done with it there, or "slow",
        "crashed", "unavailable" (the worker is stopped)."""
        try:
            self.requests.write(_LENGTH.pack(len(data)) + _LENGTH.pack(max_depth) + data)
        except OSError:  # it died since the last command
            return self.ended()
        first = _read(self.replies, 1, time.monotonic() + seconds)
        if first is None:
            return self.overran()
        if first != b"P":
            return self.ended()
        self.reply_due = True
        return "parsed"

    def script(self) -> ParsedScript:
        """The ParsedScript of the command last parsed (walked, R9 checked there)."""
        self.reply_due = False
        deadline = time.monotonic() + _WORKER_CHECK_SECONDS
        header = _read(self.replies, _LENGTH.size, deadline)
        reply = None
        if header is not None and len(header) == _LENGTH.size:
            (size,) = _LENGTH.unpack(header)
            reply = _read(self.replies, size, deadline)
            if reply is not None and len(reply) < size:
                reply = None
        if not reply:
            self.stop()
            raise RuntimeError("the parse worker ended or stalled while walking the command")
        if reply[:1] == b"S":
            try:
                return _unpickled(reply[1:])
            except Exception as exc:  # not what _pickled makes: fail closed
                self.stop()
                raise RuntimeError(f"the parse worker sent a malformed parse: {exc}") from None
        raise RuntimeError(f"the parse worker failed: {reply[1:].decode('utf-8', 'replace')}")

    def settled(self) -> bool:
        """Whether the worker can take a command: no reply is left unread (one is only
        when the caller failed between the parse and its script), or the one left
        arrives within _UNASKED_VERDICT_SECONDS and is read now; otherwise the caller
        replaces the worker (~40 ms)."""
        if not self.reply_due:
            return True
        poller = select.poll()
        poller.register(self.replies, select.POLLIN)
        if not poller.poll(_UNASKED_VERDICT_SECONDS * 1000):
            return False
        try:
            self.script()
        except (RuntimeError, pickle.UnpicklingError):
            return False
        return True


_worker: _ParseWorker | None = None
_worker_lock = threading.Lock()


def _forget_worker_after_fork() -> None:
    """A forked child neither shares nor stops its parent's worker: it closes its
    copies of the pipes and starts its own when it needs one."""
    global _worker, _worker_lock
    if _worker is not None:
        for pipe in (_worker.process.stdin, _worker.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
    _worker = None
    _worker_lock = threading.Lock()


def _stop_worker() -> None:
    global _worker
    worker, _worker = _worker, None
    if worker is not None and worker.owner == os.getpid():
        try:
            worker.requests.close()  # EOF: it exits
            worker.process.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        worker.stop()


if hasattr(os, "register_at_fork"):  # not on Windows, where nothing forks
    os.register_at_fork(after_in_child=_forget_worker_after_fork)
atexit.register(_stop_worker)


def _ready_worker() -> _ParseWorker | str:
    """The worker, started if need be (call with _worker_lock held): or "slow",
    "crashed" or "unavailable" (no worker could be run, e.g. an embedded
    interpreter) when none could be started."""
    global _worker
    worker = _worker
    if worker is not None and (
        worker.code != _GUARD_CODE
        or worker.owner != os.getpid()
        or worker.process.poll() is not None  # ended since the last command
        or not worker.settled()
    ):
        if worker.owner == os.getpid():
            worker.stop()
        worker = _worker = None
    if worker is None:
        try:
            worker = _ParseWorker()
        except (OSError, ValueError, TypeError):  # no usable interpreter
            return "unavailable"
        state = worker.started()
        if state != "ok":
            return state
        _worker = worker
    return worker


# A one-line command of plain words: printable ASCII other than bash's quoting,
# expansion, glob, brace, operator and comment characters, separated by blanks.


def parse_in_worker(data: bytes, max_depth: int, seconds: float) -> ParsedScript | str:
    """``data`` parsed (walked, R9 checked) in the worker: its ParsedScript, or "slow",
    "crashed" or "unavailable" (the worker is stopped, or none could be started; the
    next long command starts one)."""
    global _worker
    with _worker_lock:
        worker = _ready_worker()
        state = worker if isinstance(worker, str) else worker.parse(data, max_depth, seconds)
        if state == "parsed":
            assert isinstance(worker, _ParseWorker)
            return worker.script()
        _worker = None  # stopped, or never started: the next long command starts one
    return state
