"""Read-ahead of the FUSE mount over an in-memory file: which reads reach Reservoir."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from reservoir.common.errors import Unavailable
from reservoir.fuse.read_ahead import ReadAhead, ReadAheadBudget

CHUNK = 1000


class MemoryFile:
    """A file's bytes, counting the reads asked of it; can fail the next reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []
        self.failures = 0
        self._lock = threading.Lock()

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        with self._lock:
            self.calls.append((offset, length))
            if self.failures:
                self.failures -= 1
                raise Unavailable("worker away")
        return self.data[offset : offset + length]


@pytest.fixture
def pool() -> Any:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def _reader(
    file: MemoryFile, pool: ThreadPoolExecutor, depth: int = 2, budget: int = 1 << 30
) -> tuple[ReadAhead, ReadAheadBudget]:
    limit = ReadAheadBudget(budget)
    reader = ReadAhead(
        file, "/f", len(file.data), chunk_bytes=CHUNK, depth=depth, pool=pool, budget=limit
    )
    return reader, limit


def test_a_sequential_reader_gets_every_byte_with_one_fetch_per_chunk(
    pool: ThreadPoolExecutor,
) -> None:
    file = MemoryFile(os.urandom(10 * CHUNK + 17))
    reader, _ = _reader(file, pool)
    got = b"".join(reader.read(offset, 128) for offset in range(0, len(file.data) + 128, 128))
    assert got == file.data
    assert sorted(file.calls) == [(i * CHUNK, CHUNK) for i in range(10)] + [(10 * CHUNK, 17)]


def test_reads_out_of_order_within_a_chunk_still_count_as_sequential(
    pool: ThreadPoolExecutor,
) -> None:
    file = MemoryFile(os.urandom(4 * CHUNK))
    reader, _ = _reader(file, pool)
    # What the kernel sends when several of a reader's requests are in flight at once.
    for offset in (0, 256, 768, 512, 1024, 1536, 1280, 1792):
        assert reader.read(offset, 256) == file.data[offset : offset + 256]
    assert all(length == CHUNK for _, length in file.calls)


def test_random_reads_ask_for_just_their_bytes(pool: ThreadPoolExecutor) -> None:
    file = MemoryFile(os.urandom(50 * CHUNK))
    reader, budget = _reader(file, pool)
    for offset in (30_123, 7_000, 44_444, 12):
        assert reader.read(offset, 100) == file.data[offset : offset + 100]
    assert file.calls == [(30_123, 100), (7_000, 100), (44_444, 100), (12, 100)]
    assert budget.used == 0


def test_a_read_spanning_chunks_joins_them(pool: ThreadPoolExecutor) -> None:
    file = MemoryFile(os.urandom(5 * CHUNK))
    reader, _ = _reader(file, pool, depth=0)
    assert reader.read(0, 10) == file.data[:10]
    assert reader.read(10, 2500) == file.data[10:2510]


def test_reads_past_the_end_return_nothing_or_the_tail(pool: ThreadPoolExecutor) -> None:
    file = MemoryFile(os.urandom(1500))
    reader, _ = _reader(file, pool)
    assert reader.read(0, 4096) == file.data
    assert reader.read(1500, 4096) == b""
    assert reader.read(99_999, 10) == b""


def test_fetching_ahead_stops_at_the_budget_and_close_gives_it_back(
    pool: ThreadPoolExecutor,
) -> None:
    file = MemoryFile(os.urandom(20 * CHUNK))
    reader, budget = _reader(file, pool, depth=8, budget=3 * CHUNK)
    assert reader.read(0, 100) == file.data[:100]
    # The chunk read now (always) and as many ahead as the budget leaves: two.
    assert budget.used == 3 * CHUNK
    reader.close()
    pool.shutdown(wait=True)
    assert budget.used == 0


def test_chunks_behind_the_reader_are_let_go(pool: ThreadPoolExecutor) -> None:
    file = MemoryFile(os.urandom(30 * CHUNK))
    reader, budget = _reader(file, pool, depth=1)
    for offset in range(0, 30 * CHUNK, 500):
        reader.read(offset, 500)
    pool.shutdown(wait=True)
    # The last chunk and the one behind it; never the whole file.
    assert budget.used <= 2 * CHUNK


def test_a_failed_fetch_fails_that_read_and_the_next_read_fetches_again(
    pool: ThreadPoolExecutor,
) -> None:
    file = MemoryFile(os.urandom(3 * CHUNK))
    reader, _ = _reader(file, pool, depth=0)
    file.failures = 1
    with pytest.raises(Unavailable):
        reader.read(0, 100)
    assert reader.read(0, 100) == file.data[:100]


def test_many_threads_reading_one_file_in_order_get_the_right_bytes(
    pool: ThreadPoolExecutor,
) -> None:
    file = MemoryFile(os.urandom(40 * CHUNK + 3))
    reader, _ = _reader(file, pool)
    offsets = list(range(0, len(file.data), 300))
    with ThreadPoolExecutor(8) as readers:
        pieces = list(readers.map(lambda o: reader.read(o, 300), offsets))
    assert b"".join(pieces) == file.data
