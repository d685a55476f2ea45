"""Read-ahead for one open file: a reader going through it in order gets whole chunks,
the next ones fetched while it reads the current one.

The kernel sends a sequential reader's `read(2)`s as requests of at most `max_read`
bytes (often 128 KiB), several at once and not always in order. Each would otherwise be
one Reservoir read; here they are served from chunks (`FuseConfig.readahead_chunk_bytes`,
block-sized by default), so a worker is asked once per chunk and the next
`readahead_chunks` are on their way before the reader needs them. Reads that jump about
(a random-access reader) go straight to Reservoir for just the bytes asked.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, Future
from typing import Protocol


class RangeReader(Protocol):
    """What read-ahead reads from: `reservoir.client.Client` is one."""

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes: ...


class ReadAheadBudget:
    """The bytes all open files together hold in chunks: fetching ahead stops at `limit`
    (a chunk a reader needs now is always fetched)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def take(self, n: int, *, needed: bool) -> bool:
        with self._lock:
            if not needed and self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used -= n


class ReadAhead:
    """The reads of one open file, through chunks kept while the reader is near them."""

    def __init__(
        self,
        reader: RangeReader,
        path: str,
        size: int,
        *,
        chunk_bytes: int,
        depth: int,
        pool: Executor,
        budget: ReadAheadBudget,
    ) -> None:
        self._reader = reader
        self._path = path
        self._size = size
        self._chunk = chunk_bytes
        self._depth = depth
        self._pool = pool
        self._budget = budget
        self._chunks: dict[int, Future[bytes]] = {}
        self._next = 0  # where the reader's last read ended
        self._reads = 0
        self._closed = False
        self._lock = threading.Lock()

    def read(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self._size)
        if offset >= end:
            return b""
        first, last = offset // self._chunk, (end - 1) // self._chunk
        mine: list[tuple[int, Future[bytes]]] = []  # chunks this call fetches itself
        with self._lock:
            in_order = self._in_order(offset)
            self._reads += 1
            self._next = end
            if not in_order and any(i not in self._chunks for i in range(first, last + 1)):
                wanted = None
            else:
                wanted = []
                for index in range(first, last + 1):
                    future = self._chunks.get(index)
                    if future is None:
                        future = self._hold(index, needed=True)
                        mine.append((index, future))
                    wanted.append((index, future))
                if in_order:
                    self._fetch_ahead(last)
                self._drop_before(first - 1)
        if wanted is None:
            return self._reader.read(self._path, offset, end - offset)
        for index, future in mine:
            self._fill(index, future)
        pieces = [future.result() for _, future in wanted]
        start = offset - first * self._chunk
        if len(pieces) == 1:
            return pieces[0][start : start + end - offset]
        return b"".join(pieces)[start : start + end - offset]

    def close(self) -> None:
        """Drops the chunks (a fetch under way finishes and is dropped then)."""
        with self._lock:
            self._closed = True
            for index in list(self._chunks):
                self._release(index)

    # ---- under the lock ----------------------------------------------------------------

    def _in_order(self, offset: int) -> bool:
        if self._reads == 0:
            return offset == 0
        # The kernel sends a sequential reader's requests a few at a time, not always in
        # order: within a chunk of where the last one ended still counts as in order.
        return abs(offset - self._next) <= self._chunk

    def _chunk_length(self, index: int) -> int:
        return min(self._chunk, self._size - index * self._chunk)

    def _hold(self, index: int, *, needed: bool) -> Future[bytes]:
        future: Future[bytes] = Future()
        self._budget.take(self._chunk_length(index), needed=needed)
        self._chunks[index] = future
        return future

    def _fetch_ahead(self, last: int) -> None:
        chunks = (self._size + self._chunk - 1) // self._chunk
        for index in range(last + 1, min(last + 1 + self._depth, chunks)):
            if index in self._chunks:
                continue
            if not self._budget.take(self._chunk_length(index), needed=False):
                return  # memory is spoken for: this reader reads without fetching ahead
            future: Future[bytes] = Future()
            self._chunks[index] = future
            self._pool.submit(self._fill, index, future)

    def _drop_before(self, index: int) -> None:
        for old in [i for i in self._chunks if i < index]:
            self._release(old)

    def _release(self, index: int) -> None:
        self._chunks.pop(index)
        self._budget.give(self._chunk_length(index))

    # ---- outside the lock --------------------------------------------------------------

    def _fill(self, index: int, future: Future[bytes]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            data = self._reader.read(self._path, index * self._chunk, self._chunk_length(index))
        except BaseException as exc:
            future.set_exception(exc)
            with self._lock:
                # A failed chunk is fetched again by the next read that needs it.
                if self._chunks.get(index) is future:
                    self._release(index)
        else:
            future.set_result(data)
