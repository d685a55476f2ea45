"""WorkerService.read, the one read behind every front door of the worker (gRPC ReadBlock,
ReadSmall, ReadBlocks and the data port), in this process: a file:// under-store, a
memory:// metadata store, no sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest

from reservoir.common.blocks.block_file import checksum, read_block_file
from reservoir.common.errors import Conflict, InvalidArgument, OutOfRange
from reservoir.worker.counters import UFS
from tests.unit.worker_fixture import BLOCK, request, worker

DATA = bytes(range(256)) * 40  # 10,240 bytes: blocks of 4096, 4096, 2048


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "under").mkdir()
    (tmp_path / "under" / "f").write_bytes(DATA)
    return tmp_path / "under"


def test_a_range_comes_with_its_own_crc_and_the_second_read_is_a_hit(root: Path) -> None:
    service = worker(root)

    async def reads() -> None:
        first = await service.read(request(root, "f", len(DATA), index=1, offset=10, length=100))
        assert bytes(first.view()) == DATA[BLOCK + 10 : BLOCK + 110]
        assert first.crc == checksum(DATA[BLOCK + 10 : BLOCK + 110])
        assert first.source == UFS
        whole = await service.read(request(root, "f", len(DATA), index=2))
        assert whole.whole and whole.payload() == DATA[2 * BLOCK :]
        assert whole.crc == checksum(DATA[2 * BLOCK :])
        again = await service.read(request(root, "f", len(DATA), index=1, offset=10, length=100))
        assert again.source == service.store.memory.name
        assert bytes(again.view()) == bytes(first.view())

    asyncio.run(reads())
    assert (service.counters.misses, service.counters.hits) == (2, 1)
    assert service.counters.bytes_served == {UFS: 100 + 2048, service.store.memory.name: 100}


def test_many_readers_of_a_missing_block_cause_one_fetch(root: Path) -> None:
    service = worker(root)

    async def reads() -> list[bytes]:
        got = await asyncio.gather(
            *(service.read(request(root, "f", len(DATA), offset=i, length=8)) for i in range(20))
        )
        return [bytes(r.view()) for r in got]

    assert asyncio.run(reads()) == [DATA[i : i + 8] for i in range(20)]
    assert service.counters.ufs_gets == 1
    assert service.counters.misses == 1


@pytest.mark.parametrize(
    "escape",
    ["{root}/../../etc/passwd", "{root}/./f", "{root}//f", "{root}/f\x00"],
)
def test_a_ufs_uri_that_leaves_its_mount_is_invalid_argument_before_any_fetch(
    root: Path, escape: str
) -> None:
    service = worker(root)
    uri = "file://" + escape.format(root=root)
    with pytest.raises(InvalidArgument):
        asyncio.run(service.read(request(root, "f", len(DATA), ufs_uri=uri)))
    assert service.counters.ufs_gets == 0


def test_a_request_whose_file_id_does_not_match_is_refused(root: Path) -> None:
    service = worker(root)
    lying = dataclasses.replace(request(root, "f", len(DATA)), file_size=5)
    with pytest.raises(InvalidArgument, match="file_id"):
        asyncio.run(service.read(lying))
    with pytest.raises(OutOfRange):
        asyncio.run(service.read(request(root, "f", len(DATA), index=3)))
    assert service.counters.ufs_gets == 0


def test_a_range_over_the_callers_limit_is_refused_before_any_fetch(root: Path) -> None:
    service = worker(root)
    with pytest.raises(InvalidArgument, match="ReadBlock"):
        asyncio.run(service.read(request(root, "f", len(DATA)), limit=1000))
    small = asyncio.run(service.read(request(root, "f", len(DATA), length=1000), limit=1000))
    assert small.payload() == DATA[:1000]
    assert service.counters.ufs_gets == 1


def test_a_whole_block_in_shared_memory_is_handed_out_as_its_file(
    root: Path, tmp_path: Path
) -> None:
    service = worker(root, shm_dir=tmp_path / "shm")
    assert service.read_file(request(root, "f", len(DATA))) is None  # not held yet
    asyncio.run(service.read(request(root, "f", len(DATA))))
    assert service.read_file(request(root, "f", len(DATA), offset=1)) is None  # a range
    held = service.read_file(request(root, "f", len(DATA)))
    assert held is not None
    fd = held.open()
    assert fd is not None
    try:
        service.store.evict([request(root, "f", len(DATA)).block])
        # Evicted after it was opened: the name is gone, the bytes are not.
        body = os.pread(fd, held.ref.length, held.ref.offset)
    finally:
        os.close(fd)
    assert body == DATA[:BLOCK] and held.ref.crc == checksum(body)
    assert held.open() is None  # and a sender that comes later reads it the usual way


def test_a_fetched_block_is_kept_as_the_bytes_it_was_received_into(root: Path) -> None:
    service = worker(root)
    block = request(root, "f", len(DATA), index=1)

    async def reads() -> tuple[object, object]:
        first = await service.read(block)
        return first.block, (await service.read(block)).block

    fetched, held = asyncio.run(reads())
    assert isinstance(fetched, bytes) and fetched == DATA[BLOCK : 2 * BLOCK]
    assert held is fetched  # the memory tier kept the very object, not a copy


def test_a_block_fetched_into_shared_memory_is_its_published_block_file(
    root: Path, tmp_path: Path
) -> None:
    shm = tmp_path / "shm"
    service = worker(root, shm_dir=shm)
    read = asyncio.run(service.read(request(root, "f", len(DATA), index=2)))
    assert bytes(read.view()) == DATA[2 * BLOCK :] and read.crc == checksum(DATA[2 * BLOCK :])
    held = service.read_file(request(root, "f", len(DATA), index=2))
    assert held is not None
    data, crc = read_block_file(held.ref.path, held.ref.length, 2 * BLOCK)
    assert (data, crc) == (DATA[2 * BLOCK :], read.crc)
    assert not list(shm.rglob("*.landing"))  # no landing file left behind


def test_a_fetch_that_fails_leaves_no_landing_file(root: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    service = worker(root, shm_dir=shm)
    block = request(root, "f", len(DATA), index=1)
    (root / "f").write_bytes(DATA[:BLOCK])  # changed since the request's ETag
    with pytest.raises(Conflict):
        asyncio.run(service.read(block))
    # Its file is a spare for the next landing, not a block anyone may open.
    assert not [p for p in shm.rglob("*") if p.is_file() and p.parent.name != ".spare"]
