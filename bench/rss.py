"""Peak RSS growth of this process while an awaitable runs (sampled every 10 ms)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from typing import TypeVar

import psutil  # type: ignore[import-untyped, unused-ignore]

T = TypeVar("T")


async def peak_rss_growth(work: Awaitable[T]) -> tuple[T, int]:
    """Await ``work``; return its result and the peak RSS growth in bytes meanwhile."""
    process = psutil.Process()
    before = process.memory_info().rss
    peak = before
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(0.01):
            peak = max(peak, process.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = await work
    finally:
        stop.set()
        sampler.join()
    return result, peak - before
