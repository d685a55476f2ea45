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

from reservoir.common.block_file import checksum
from reservoir.common.metadata_store import MemoryMetadataStore
from reservoir.common.write_records import WriteRecord, write_key
from reservoir.worker.written_blocks import WrittenBlocks

from .worker_fixture import BLOCK, MOUNT, request, worker


class _Reports:
    def __init__(self) -> None:
        self.sent: list[list[tuple[str, int]]] = []

    def watch(self, pending: set[tuple[str, int]]) -> None:
        self._pending = pending

    async def report(self) -> None:
        self.sent.append(sorted(self._pending))


def test_staged_blocks_are_kept_here_under_the_published_id_and_reported_before_the_answer(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        data = os.urandom(3 * BLOCK - 5)
        (tmp_path / "ckpt.pt").write_bytes(data)
        file = request(tmp_path, "ckpt.pt", len(data))
        service = worker(tmp_path)
        store = MemoryMetadataStore()
        write_id = uuid.uuid4().hex
        published = WriteRecord(
            write_id, "/d/ckpt.pt", MOUNT, "ckpt.pt", "u", 0, 2**62, file.file_id
        )
        await store.put(write_key(write_id), published.to_json())

        reports = _Reports()
        written = WrittenBlocks(service, store, reports)
        for index in range(3):
            piece = data[index * BLOCK : (index + 1) * BLOCK]
            assert written.stage(write_id, index, piece, checksum(piece))
        reports.watch(service.added)
        committed, missing = await written.commit(write_id, file, [0, 1, 2])
        assert (committed, missing) == (3, 0)
        assert reports.sent == [[(file.file_id, 0), (file.file_id, 1), (file.file_id, 2)]]
        for index in range(3):
            held = await service.store.get((file.file_id, index))
            assert held is not None
            assert bytes(held[0]) == data[index * BLOCK : (index + 1) * BLOCK]

    asyncio.run(scenario())


def test_a_commit_for_a_file_the_write_did_not_publish_keeps_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        data = os.urandom(BLOCK)
        (tmp_path / "ckpt.pt").write_bytes(data)
        file = request(tmp_path, "ckpt.pt", len(data))
        service = worker(tmp_path)
        store = MemoryMetadataStore()
        write_id = uuid.uuid4().hex
        other = WriteRecord(write_id, "/d/ckpt.pt", MOUNT, "ckpt.pt", "u", 0, 2**62, "f" * 64)
        await store.put(write_key(write_id), other.to_json())
        reports = _Reports()
        reports.watch(service.added)
        written = WrittenBlocks(service, store, reports)
        assert written.stage(write_id, 0, data, checksum(data))
        with pytest.raises(PermissionError):
            await written.commit(write_id, file, [0])
        assert await service.store.get((file.file_id, 0)) is None
        assert reports.sent == []

    asyncio.run(scenario())


def test_a_staged_block_gone_by_commit_time_is_counted_missing(tmp_path: Path) -> None:
    async def scenario() -> None:
        data = os.urandom(2 * BLOCK)
        (tmp_path / "ckpt.pt").write_bytes(data)
        file = request(tmp_path, "ckpt.pt", len(data))
        service = worker(tmp_path)
        store = MemoryMetadataStore()
        write_id = uuid.uuid4().hex
        published = WriteRecord(
            write_id, "/d/ckpt.pt", MOUNT, "ckpt.pt", "u", 0, 2**62, file.file_id
        )
        await store.put(write_key(write_id), published.to_json())
        reports = _Reports()
        reports.watch(service.added)
        written = WrittenBlocks(service, store, reports)
        assert written.stage(write_id, 0, data[:BLOCK], checksum(data[:BLOCK]))
        assert await written.commit(write_id, file, [0, 1]) == (1, 1)
        assert await service.store.get((file.file_id, 1)) is None

    asyncio.run(scenario())
