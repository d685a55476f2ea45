"""The bytes of parts a client's writes hold until the store has them
(`RESERVOIR_WRITE_BUFFER`).

A part is kept by the writer from the moment it is copied out of the caller's bytes until
the worker that uploaded it answers (so that it can be sent again to another worker if
that one dies). Those bytes are the writes' memory, and this is their bound: a writer
takes room for a part *before* copying it and gives it back when the part is in the
store, so a writer faster than the workers waits here (backpressure) instead of growing.

One buffer serves every write of a client, so many files written at once (a sharded
checkpoint) share the bound. Room is handed out in the order it was asked for, so a
part is never starved by smaller ones behind it. Lives on the client's event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque


class HeldBytes:
    """Room taken in a `WriteBuffer` for one part; `release` gives it back (once)."""

    def __init__(self, buffer: WriteBuffer, size: int) -> None:
        self._buffer = buffer
        self.size = size

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self._buffer._give_back(size)


class WriteBuffer:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a write buffer of {capacity} bytes")
        self.capacity = capacity
        self.held = 0
        self.peak = 0  # the most held at once, for tests and the benchmark
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def hold(self, size: int) -> HeldBytes:
        """Room for `size` bytes, waiting until the store has taken enough of what is
        held. A part larger than the whole buffer (a mount whose blocks are bigger than
        the buffer) is let in alone, when nothing else is held."""
        size = min(size, self.capacity)
        if not self._waiting and self.held + size <= self.capacity:
            self._take(size)
            return HeldBytes(self, size)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, turn))
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._give_back(size)  # granted just as the waiter was cancelled
            else:
                if (size, turn) in self._waiting:
                    self._waiting.remove((size, turn))
                self._wake()  # the next in line may fit now
            raise
        return HeldBytes(self, size)

    def _take(self, size: int) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)

    def _give_back(self, size: int) -> None:
        self.held -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiting:
            size, turn = self._waiting[0]
            if turn.done():  # cancelled, not yet seen by its waiter
                self._waiting.popleft()
                continue
            if self.held + size > self.capacity:
                return
            self._waiting.popleft()
            self._take(size)
            turn.set_result(None)
