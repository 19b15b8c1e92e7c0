"""Bounded capture of a child's output: the first and last bytes of a stream, counted.

A command's output is unbounded (`yes`, `cat` of a multi-gigabyte file) while the agent's
memory is not. `BoundedCapture` keeps at most `limit` bytes of one stream, the first
half and the last half, and counts what it dropped in between; `pump` reads a pipe into
it as fast as the child writes, so the child is never throttled by a slow reader, while
the memory held stays constant however much the child writes.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
from collections.abc import Iterator

import anyio
import anyio.lowlevel

__all__ = ["READ_CHUNK", "BoundedCapture", "decoded", "drain_buffered", "pump", "set_pipe_size"]

# One read is at most this large. It matches the pipe size requested by the process
# layer (`F_SETPIPE_SZ`), so a full pipe is emptied by one `readv` and one wakeup.
READ_CHUNK = 1 << 20


class BoundedCapture:
    """The head and tail of one output stream, holding at most `limit` bytes.

    The head is the first `limit // 2` bytes; the tail is a sliding window over the last
    `limit - limit // 2` bytes. Everything between them is counted in `dropped` and never
    stored.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"output limit must be >= 0 bytes, got {limit}")
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._head = bytearray()
        # CPython's bytearray deletes from the front in O(1) (it moves its start
        # offset), so trimming the window is cheap however often it happens.
        self._tail = bytearray()
        self.total = 0

    @property
    def dropped(self) -> int:
        """Bytes received but not kept (the middle of the stream)."""
        return self.total - len(self._head) - len(self._tail)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        self.total += len(view)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += view[:room]
            view = view[room:]
        if not view:
            return
        if len(view) >= self._tail_limit:
            # Replace in place: never hold the old window and a full chunk together.
            self._tail[:] = view[len(view) - self._tail_limit :]
            return
        self._tail += view
        excess = len(self._tail) - self._tail_limit
        if excess > 0:
            del self._tail[:excess]

    def text(self) -> str:
        """The kept bytes decoded as UTF-8 (invalid bytes replaced), with a marker
        saying how many bytes were omitted when the middle was dropped.

        A multi-byte character cut at either edge of the gap shows up as U+FFFD.
        """
        dropped = self.dropped
        if dropped == 0:
            return (bytes(self._head) + bytes(self._tail)).decode("utf-8", "replace")
        return (
            self._head.decode("utf-8", "replace")
            + f"\n…[{dropped} bytes omitted]…\n"
            + self._tail.decode("utf-8", "replace")
        )


# Decoding is C work that holds the GIL (a worker thread would not free the event loop):
# a megabyte of invalid UTF-8 takes ~15 ms of CPU, and max_output_bytes may be larger.
# `decoded` takes a large capture this many bytes at a time, yielding to the loop
# between slices.
_DECODE_SLICE = 128 << 10


async def decoded(capture: BoundedCapture) -> str:
    """`capture.text()` (the same string), decoded in slices with a checkpoint between
    them, so that no step of the event loop decodes more than _DECODE_SLICE bytes."""
    if len(capture._head) + len(capture._tail) <= _DECODE_SLICE:
        return capture.text()
    dropped = capture.dropped
    if dropped == 0:
        return await _decode_sliced(bytes(capture._head) + bytes(capture._tail))
    head = await _decode_sliced(capture._head)
    tail = await _decode_sliced(capture._tail)
    return head + f"\n…[{dropped} bytes omitted]…\n" + tail


async def _decode_sliced(data: bytes | bytearray) -> str:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    parts: list[str] = []
    with memoryview(data) as view:
        for start in range(0, len(view), _DECODE_SLICE):
            end = start + _DECODE_SLICE
            parts.append(decoder.decode(view[start:end], final=end >= len(view)))
            await anyio.lowlevel.checkpoint()
    if not parts:
        parts.append(decoder.decode(b"", final=True))
    return "".join(parts)


def set_pipe_size(fd: int) -> None:
    """Ask for a READ_CHUNK-sized pipe, so a fast writer (`yes`, `cat`) hands over a
    megabyte per wakeup instead of 64 KiB. Best effort: unprivileged users are capped by
    /proc/sys/fs/pipe-max-size and by their total pipe quota."""
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, READ_CHUNK)


# Read buffers, reused across runs: a fresh bytearray(READ_CHUNK) is zero-filled, which
# costs about 0.1 ms per stream per run, most of the overhead of a short command.
_spare_buffers: list[bytearray] = []
_MAX_SPARE_BUFFERS = 8


@contextlib.contextmanager
def _read_buffer() -> Iterator[bytearray]:
    try:
        buffer = _spare_buffers.pop()
    except IndexError:
        buffer = bytearray(READ_CHUNK)
    try:
        yield buffer
    finally:
        if len(_spare_buffers) < _MAX_SPARE_BUFFERS:
            _spare_buffers.append(buffer)


async def pump(fd: int, capture: BoundedCapture) -> None:
    """Read the non-blocking pipe `fd` into `capture` until end of file.

    Returns at EOF, that is once every process holding the write end has exited or
    closed it. The caller owns `fd` and must not close it while this runs (cancel first:
    closing an fd that an event loop is still watching is undefined behaviour).
    """
    # One buffer for the whole stream: reading the middle of a multi-gigabyte stream
    # allocates nothing, it only moves bytes through this buffer and counts them.
    with _read_buffer() as buffer:
        view = memoryview(buffer)
        try:
            while True:
                try:
                    n = os.readv(fd, [buffer])
                except BlockingIOError:
                    await anyio.wait_readable(fd)
                    continue
                if n == 0:
                    return
                capture.feed(view[:n])
                if n == READ_CHUNK:
                    # The child writes faster than we read (`yes`): this loop would
                    # never see EAGAIN and so never yield, starving the timeout and the
                    # other stream.
                    await anyio.lowlevel.checkpoint()
        finally:
            view.release()


def drain_buffered(fd: int, capture: BoundedCapture, max_reads: int = 4) -> None:
    """Take what is already in the pipe, without waiting for EOF: for a pipe still held
    open by a process that escaped containment. Bounded, so that a writer that keeps
    going cannot keep us here."""
    with _read_buffer() as buffer:
        view = memoryview(buffer)
        try:
            for _ in range(max_reads):
                try:
                    n = os.readv(fd, [buffer])
                except OSError:  # BlockingIOError included: nothing buffered
                    return
                if n == 0:
                    return
                capture.feed(view[:n])
        finally:
            view.release()
