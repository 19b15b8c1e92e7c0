"""Where a store step runs: inline for a store that never waits, else off the event loop.

A store kept in this process's memory answers in microseconds and never waits on
anything: its steps run inline, with no thread. A store that may wait (a SQLite file
whose lock another process holds, a database server) runs each step on its own worker
thread, so a wait never stalls the event loop. Under asyncio that thread takes steps
from a queue and hands each result back with ``call_soon_threadsafe`` (about a third of
the cost of a general ``anyio.to_thread`` hop; the store's connection stays on one
thread); under any other anyio backend, ``anyio.to_thread``.

A SQLite file's step may still run inline (`Transitions` asks the store's ``run_now``
first): when no other thread uses the connection and the write lock is free, it is taken
with a busy timeout of 0, nothing in the step can wait after that, and the commit leaves
the log's checkpoint to the worker thread. With an audit sink configured (which may wait
on a file lock) every step goes to the worker.

The step runs in a copy of the caller's context variables. Either way a step that has
started is waited for: a cancellation is delivered after it,
never in the middle (a claimed grant whose claim the caller never saw would leave the
call ``started`` with nobody running it).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

_Step = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class _Worker:
    """One thread running one store's steps, in the order they were asked for."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.steps: SimpleQueue[_Step | None] = SimpleQueue()
        # A daemon: a process that exits while a step runs is a crash the store's
        # journal already handles (the step's transaction is rolled back).
        threading.Thread(target=self._run, name="sandbox-store", daemon=True).start()

    def _run(self) -> None:
        while (step := self.steps.get()) is not None:
            loop, future, fn = step
            try:
                outcome: tuple[Any, BaseException | None] = (fn(), None)
            except BaseException as exc:  # handed to the caller, whatever it is
                outcome = (None, exc)
            try:
                loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop was closed: nobody is waiting any more
                pass
            del step, loop, future, fn, outcome

    def stop(self) -> None:
        self.steps.put(None)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


_WORKERS: weakref.WeakKeyDictionary[object, _Worker] = weakref.WeakKeyDictionary()
_WORKERS_LOCK = threading.Lock()


class StoreSteps:
    """Runs the steps of one store where they belong (see the module's docstring)."""

    __slots__ = ("blocking", "store")

    def __init__(self, store: Any) -> None:
        self.store = store
        self.blocking: bool = bool(store.blocking)

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if not self.blocking:
            return fn(*args, **kwargs)
        step = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend (trio)
            return await anyio.to_thread.run_sync(step)
        future: asyncio.Future[T] = loop.create_future()
        # The caller's context variables go with the step (an application's structlog
        # context reaches the audit events the step writes).
        context = contextvars.copy_context()
        self._worker().steps.put((loop, future, functools.partial(context.run, step)))
        with anyio.CancelScope(shield=True):
            result = await future
        return result

    def _worker(self) -> _Worker:
        worker = _WORKERS.get(self.store)
        if worker is None or worker.pid != os.getpid():  # a forked child has no thread
            with _WORKERS_LOCK:
                worker = _WORKERS.get(self.store)
                if worker is None or worker.pid != os.getpid():
                    worker = _Worker()
                    _WORKERS[self.store] = worker
                    weakref.finalize(self.store, worker.stop)
        return worker
