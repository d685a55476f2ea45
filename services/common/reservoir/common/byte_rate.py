"""A byte rate: callers take bytes before they move them, and wait while the rate is spent.

One per limit, shared by everything the limit covers (every copy a drain makes, across
workers), so the limit is the cluster's, not N callers' each. A caller may take more than
a second's worth at once: it waits that much longer, so the average holds."""

from __future__ import annotations

import asyncio
import time


class ByteRate:
    def __init__(self, bytes_per_s: int) -> None:
        """`bytes_per_s` <= 0: no limit."""
        self._rate = float(bytes_per_s)
        self._next = time.monotonic()  # when the bytes taken so far have been paid for
        self._lock = asyncio.Lock()

    @property
    def limited(self) -> bool:
        return self._rate > 0

    async def take(self, nbytes: int) -> None:
        if self._rate <= 0 or nbytes <= 0:
            return
        async with self._lock:
            now = time.monotonic()
            # Unused time is not saved up past a moment: a burst after a pause is bounded.
            start = max(self._next, now - 0.1)
            self._next = start + nbytes / self._rate
            wait = start - now
        if wait > 0:
            await asyncio.sleep(wait)
