"""A written file's staged blocks committed on one worker (worker/written_blocks.py), in
process: every block is kept where it was staged, under the published file's id (whatever
its home), and the master hears where every committed block is before the commit answers,
so a reader right after the writer's close finds them; a write that did not publish the
file commits nothing."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from reservoir.common.blocks.block_file import checksum
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.metadata.write_records import WriteRecord, write_key
from reservoir.worker.block_changes import BlockChanges
from reservoir.worker.written_blocks import WrittenBlocks

from .worker_fixture import BLOCK, MOUNT, request, worker


class _Reports:
    def __init__(self) -> None:
        self.sent: list[list[tuple[str, int]]] = []

    def watch(self, changes: BlockChanges) -> None:
        self._changes = changes

    async def report(self) -> None:
        added, _ = self._changes.take()
        self.sent.append(added)


class _Write:
    """A worker, its WrittenBlocks, and one write of `size` random bytes (`record` says
    what it published: by default the file's own id)."""

    def __init__(self, tmp_path: Path, size: int) -> None:
        self.data = os.urandom(size)
        (tmp_path / "ckpt.pt").write_bytes(self.data)
        self.file = request(tmp_path, "ckpt.pt", size)
        self.service = worker(tmp_path)
        self.store = MemoryMetadataStore()
        self.write_id = uuid.uuid4().hex
        self.reports = _Reports()
        self.reports.watch(self.service.changes)
        self.written = WrittenBlocks(self.service, self.store, self.reports)

    async def record(self, published_id: str | None = None) -> None:
        record = WriteRecord(
            self.write_id,
            "/d/ckpt.pt",
            MOUNT,
            "ckpt.pt",
            "u",
            0,
            2**62,
            published_id or self.file.file_id,
        )
        await self.store.put(write_key(self.write_id), record.to_json())

    def stage(self, index: int) -> bool:
        piece = self.data[index * BLOCK : (index + 1) * BLOCK]
        return self.written.stage(self.write_id, index, piece, checksum(piece))


def test_staged_blocks_are_kept_here_under_the_published_id_and_reported_before_the_answer(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        w = _Write(tmp_path, 3 * BLOCK - 5)
        await w.record()
        assert all(w.stage(index) for index in range(3))
        assert await w.written.commit(w.write_id, w.file, [0, 1, 2]) == (3, 0)
        blocks = [(w.file.file_id, index) for index in range(3)]
        assert w.reports.sent == [blocks]
        for index in range(3):
            held = await w.service.store.get((w.file.file_id, index))
            assert held is not None
            assert bytes(held[0]) == w.data[index * BLOCK : (index + 1) * BLOCK]

    asyncio.run(scenario())


def test_a_commit_for_a_file_the_write_did_not_publish_keeps_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        w = _Write(tmp_path, BLOCK)
        await w.record(published_id="f" * 64)
        assert w.stage(0)
        with pytest.raises(PermissionError):
            await w.written.commit(w.write_id, w.file, [0])
        assert await w.service.store.get((w.file.file_id, 0)) is None
        assert w.reports.sent == []

    asyncio.run(scenario())


def test_a_staged_block_gone_by_commit_time_is_counted_missing(tmp_path: Path) -> None:
    async def scenario() -> None:
        w = _Write(tmp_path, 2 * BLOCK)
        await w.record()
        assert w.stage(0)
        assert await w.written.commit(w.write_id, w.file, [0, 1]) == (1, 1)
        assert await w.service.store.get((w.file.file_id, 1)) is None

    asyncio.run(scenario())
