"""Where a store step runs: inline for a store that never waits, else off the event loop.

A store kept in this process's memory answers in microseconds and never waits on
anything: its steps run inline, with no thread. A store that may wait (a SQLite file
whose lock another process holds, a database server) runs each step on a worker
thread, so a wait never stalls the event loop. Under asyncio that is one thread per
store, used through ``loop.run_in_executor`` (about half the cost of a general
``anyio.to_thread`` hop, and the store's connection stays on one thread); under any
other anyio backend, ``anyio.to_thread``.

Either way a step that has started is waited for: a cancellation is delivered after it,
never in the middle (a claimed grant whose claim the caller never saw would leave the
call ``started`` with nobody running it).
"""

from __future__ import annotations

import asyncio
import functools
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

#: Each blocking store's worker thread, with the pid of the process that started it.
_EXECUTORS: weakref.WeakKeyDictionary[object, tuple[int, ThreadPoolExecutor]] = (
    weakref.WeakKeyDictionary())


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
        future = loop.run_in_executor(self._executor(), step)
        with anyio.CancelScope(shield=True):
            result = await future
        return result

    def _executor(self) -> ThreadPoolExecutor:
        pid = os.getpid()
        found = _EXECUTORS.get(self.store)
        if found is None or found[0] != pid:  # a forked child has no worker thread
            found = (pid, ThreadPoolExecutor(1, thread_name_prefix="sandbox-store"))
            _EXECUTORS[self.store] = found
        return found[1]
