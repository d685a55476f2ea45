"""A written file's staged blocks committed on one worker (worker/written_blocks.py), in
process: a home that is not registered at commit time (its lease lapsed under load) does
not lose the block — it is kept here — and the master hears where every committed block
is before the commit answers, so a reader right after the writer's close finds them."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from reservoir.common.block_file import checksum
from reservoir.common.metadata_store import MemoryMetadataStore
from reservoir.common.models import WorkerRecord
from reservoir.common.rpc import ChannelPool
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


def test_blocks_whose_home_is_not_registered_are_kept_here_and_reported_before_the_answer(
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

        async def live() -> list[WorkerRecord]:
            return [WorkerRecord("w1", "127.0.0.1:1")]  # w9, a home, is not registered

        reports = _Reports()
        written = WrittenBlocks(service, ChannelPool(), 5.0, live, store, reports)
        for index in range(3):
            piece = data[index * BLOCK : (index + 1) * BLOCK]
            assert written.stage(write_id, index, piece, checksum(piece))
        reports.watch(service.added)
        committed, missing = await written.commit(write_id, file, {0: "", 1: "w9", 2: "w1"})
        assert (committed, missing) == (3, 0)
        assert reports.sent == [[(file.file_id, 0), (file.file_id, 1), (file.file_id, 2)]]
        for index in range(3):
            held = await service.store.get((file.file_id, index))
            assert held is not None
            assert bytes(held[0]) == data[index * BLOCK : (index + 1) * BLOCK]

    asyncio.run(scenario())
