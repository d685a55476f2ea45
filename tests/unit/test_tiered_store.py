"""The tiered store on real directories: memory over disk, restarts, corruption, failures."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from reservoir.common.blocks.block_file import HEADER_SIZE, checksum
from reservoir.common.config import WorkerConfig
from reservoir.worker.memory_tier import BlockId
from reservoir.worker.tiered_store import TieredStore

FILE = "0" * 30 + "ab"
KiB = 1024


class Events:
    def __init__(self) -> None:
        self.gone: list[BlockId] = []
        self.corrupt: list[BlockId] = []

    def block_gone(self, block: BlockId, size: int, tier: str) -> None:
        self.gone.append(block)

    def block_corrupt(self, block: BlockId, tier: str, error: str) -> None:
        self.corrupt.append(block)


def _config(
    disk: Path, memory: int = 4 * KiB, capacity: int = 64 * KiB, **kw: object
) -> WorkerConfig:
    return WorkerConfig(
        capacity_bytes=memory,
        disk_dirs=str(disk),
        disk_capacity_bytes=capacity,
        eviction="lru",
        **kw,  # type: ignore[arg-type]
    )


def _data(i: int) -> bytes:
    return bytes([i % 251]) * KiB


def _run(
    tmp: Path, config: WorkerConfig, scenario: Callable[[TieredStore, Events], Awaitable[None]]
) -> Events:
    events = Events()

    async def main() -> None:
        store = TieredStore.from_config(config, events)
        await store.start()
        try:
            await scenario(store, events)
        finally:
            await store.close(1.0)

    asyncio.run(main())
    return events


async def _put(store: TieredStore, n: int) -> None:
    for i in range(n):
        assert store.put((FILE, i), _data(i), checksum(_data(i)), i * KiB)
    await store.settled()


def test_blocks_beyond_memory_are_served_from_disk_verified(tmp_path: Path) -> None:
    async def scenario(store: TieredStore, events: Events) -> None:
        await _put(store, 16)  # 16 KiB: four times the memory tier
        assert len(store.memory) == 4 and len(store.disks[0]) == 16
        for i in range(16):
            held = await store.get((FILE, i))
            assert held is not None and held[0] == _data(i) and held[1] == checksum(_data(i))
        assert store.disks[0].hits >= 12 and events.gone == []

    _run(tmp_path, _config(tmp_path / "d"), scenario)


def test_a_new_store_finds_the_blocks_kept_on_disk_and_drops_a_corrupted_one(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path / "d")
    _run(tmp_path, config, lambda store, _: _put(store, 6))
    files = sorted((tmp_path / "d" / "v1" / FILE[:2]).iterdir())
    assert [f.name for f in files] == [f"{FILE}-{i}" for i in range(6)]
    raw = bytearray(files[2].read_bytes())
    raw[HEADER_SIZE + 10] ^= 0xFF
    files[2].chmod(0o644)
    files[2].write_bytes(bytes(raw))

    async def after_restart(store: TieredStore, events: Events) -> None:
        assert sorted(store.blocks()) == [(FILE, i) for i in range(6)]  # before verification
        served = [await store.get((FILE, i)) for i in range(6)]
        assert served[2] is None
        assert all(s is not None and s[0] == _data(i) for i, s in enumerate(served) if i != 2)
        assert (FILE, 2) not in store

    events = _run(tmp_path, config, after_restart)
    assert events.corrupt == [(FILE, 2)] and events.gone == [(FILE, 2)]
    assert not files[2].exists()


def test_a_failing_disk_directory_is_taken_out_of_service_and_reads_go_on(tmp_path: Path) -> None:
    async def scenario(store: TieredStore, events: Events) -> None:
        await _put(store, 8)
        shutil.rmtree(tmp_path / "d")
        (tmp_path / "d").write_text("not a directory any more")
        assert await store.get((FILE, 0)) is None  # on disk only: its file is unreadable
        assert store.put((FILE, 100), _data(1), checksum(_data(1)), 0)  # memory still takes it
        await store.settled()
        assert not store.disks[0].in_service and len(store.disks[0]) == 0
        held = await store.get((FILE, 100))
        assert held is not None and held[0] == _data(1)
        assert (FILE, 0) in events.gone

    _run(tmp_path, _config(tmp_path / "d"), scenario)


def test_disk_eviction_keeps_the_directory_within_its_capacity(tmp_path: Path) -> None:
    capacity = 10 * (KiB + HEADER_SIZE)

    async def scenario(store: TieredStore, events: Events) -> None:
        for i in range(40):
            store.put((FILE, i), _data(i), checksum(_data(i)), 0)
            await store.settled()
            assert store.disks[0].used_bytes <= capacity
        assert store.disks[0].evictions > 0
        on_disk = list((tmp_path / "d" / "v1" / FILE[:2]).iterdir())
        assert len(on_disk) == len(store.disks[0])
        # What left both tiers was reported gone, and nothing held was.
        assert not set(events.gone) & set(store.blocks())

    _run(tmp_path, _config(tmp_path / "d", capacity=capacity), scenario)


def test_drop_removes_the_block_from_every_tier_and_its_file(tmp_path: Path) -> None:
    async def scenario(store: TieredStore, events: Events) -> None:
        await _put(store, 2)
        assert store.drop((FILE, 0))
        await store.settled()
        assert await store.get((FILE, 0)) is None
        assert not (tmp_path / "d" / "v1" / FILE[:2] / f"{FILE}-0").exists()

    _run(tmp_path, _config(tmp_path / "d"), scenario)


def test_disk_capacity_is_required_with_disk_dirs(tmp_path: Path) -> None:
    from reservoir.common.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="RESERVOIR_WORKER_DISK_CAPACITY"):
        WorkerConfig(disk_dirs=str(tmp_path))


def test_leftover_temporary_files_are_removed_at_start(tmp_path: Path) -> None:
    fan = tmp_path / "d" / "v1" / FILE[:2]
    fan.mkdir(parents=True)
    (fan / f".{FILE}-0.tmp").write_bytes(b"half a block")
    _run(tmp_path, _config(tmp_path / "d"), lambda store, _: asyncio.sleep(0))
    assert os.listdir(fan) == []


class _Pinned:
    def __init__(self, *blocks: BlockId) -> None:
        self.blocks = set(blocks)

    def pinned(self, block: BlockId) -> bool:
        return block in self.blocks


def test_pinned_blocks_stay_on_disk_through_churn_and_are_reported_as_pinned(
    tmp_path: Path,
) -> None:
    pinned = _Pinned((FILE, 0), (FILE, 1))

    async def scenario(store: TieredStore, events: Events) -> None:
        store.pins = store.memory.pins = store.disks[0].pins = pinned
        await _put(store, 2)
        for i in range(2, 40):  # 40 KiB of churn through a 16 KiB disk
            store.put((FILE, i), _data(i), checksum(_data(i)), i * KiB)
            await store.settled()
        assert (FILE, 0) in store.disks[0] and (FILE, 1) in store.disks[0]
        assert store.usage()[1].pinned_bytes == 2 * (KiB + HEADER_SIZE)
        for i in range(2):
            held = await store.get((FILE, i))
            assert held is not None and held[0] == _data(i)

    _run(tmp_path, _config(tmp_path / "d", capacity=16 * KiB), scenario)


def test_a_disk_whose_room_above_the_high_watermark_is_less_than_a_block_still_evicts(
    tmp_path: Path,
) -> None:
    async def scenario(store: TieredStore, events: Events) -> None:
        for i in range(30):
            store.put((FILE, i), _data(i), checksum(_data(i)), i * KiB)
            await store.settled()
        assert (FILE, 29) in store.disks[0]  # the newest block found room

    # 10 block files (10560 bytes) stay below the high watermark (95 % of 11200 = 10640),
    # and an 11th does not fit below the capacity.
    _run(tmp_path, _config(tmp_path / "d", capacity=11200), scenario)


def test_free_drops_a_block_from_every_tier_and_tells_the_owner(tmp_path: Path) -> None:
    async def scenario(store: TieredStore, events: Events) -> None:
        await _put(store, 2)
        assert store.evict([(FILE, 0), (FILE, 9)]) == [((FILE, 0), KiB)]
        await store.settled()
        assert (FILE, 0) not in store and events.gone == [(FILE, 0)]
        assert await store.get((FILE, 0)) is None

    _run(tmp_path, _config(tmp_path / "d"), scenario)


def test_a_rekeyed_block_is_served_under_its_new_id_and_its_old_disk_copy_is_dropped(
    tmp_path: Path,
) -> None:
    staged, final = ("staged-" + "1" * 32, 3), (FILE, 3)
    data = _data(3)

    async def scenario(store: TieredStore, events: Events) -> None:
        # A view, as a staged block arrives: the disk write gets bytes of its own.
        assert store.put(staged, memoryview(b"xx" + data)[2:], checksum(data), 0)
        await store.settled()
        assert store.rekey(staged, final, 3 * KiB)
        await store.settled()
        assert await store.get(staged) is None
        held = await store.get(final)
        assert held is not None and bytes(held[0]) == data and held[1] == checksum(data)
        assert not list((tmp_path / "d").rglob(f"{staged[0]}-3"))
        assert not store.rekey(staged, final, 3 * KiB)  # nothing left to move

    _run(tmp_path, _config(tmp_path / "d"), scenario)
