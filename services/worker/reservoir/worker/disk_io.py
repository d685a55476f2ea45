"""The disk tiers' thread pool and the background tasks that use it.

Disk I/O never runs on the event loop: every read, write, scan and unlink of a disk tier
goes through one bounded pool (`disk_io_threads`). The tasks started on the loop to wait
for that I/O are kept here so the store can wait for them (settled) or cancel them
(close) in one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class DiskIO:
    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="disk")
        # Background work (verification, unlinks); writes keep their own set (see
        # DiskWriteDown) because close waits for writes but cancels the rest.
        self.background: set[asyncio.Task[None]] = set()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the pool."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def spawn(
        self,
        coro: Coroutine[Any, Any, None],
        into: set[asyncio.Task[None]] | None = None,
    ) -> None:
        """Runs `coro` as a task kept in `into` (the background set by default) until done."""
        tasks = self.background if into is None else into
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def cancel_background(self) -> None:
        for task in list(self.background):
            task.cancel()

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
