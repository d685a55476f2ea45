"""The shm tier's spare block files: landings the tier did not keep are reused for the
next blocks once nothing reads them, published block files never are, and the spares stay
within their limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reservoir.common.blocks.block_file import HEADER_SIZE, checksum
from reservoir.worker.memory_tier import BlockId
from reservoir.worker.shm_tier import ShmTier

BLOCK = 64 * 1024
FILE = HEADER_SIZE + BLOCK


def _land(tier: ShmTier, block: BlockId, data: bytes) -> tuple[memoryview, int, bool]:
    """A fetch's landing: the bytes received in place, offered to the tier; the landing
    file's inode, and whether the tier kept the block."""
    retiring = set(tier.directory.glob("*.landing"))  # not kept, still being read
    with tier.landing(block, len(data)) as landing:
        (landing_file,) = set(tier.directory.glob("*.landing")) - retiring
        inode = landing_file.stat().st_ino
        landing.buffer[:] = data
        got = landing.data()
        kept = tier.put(block, got, checksum(data), 0)
    assert isinstance(got, memoryview)
    return got, inode, kept


def _spares(tier: ShmTier) -> list[Path]:
    return sorted((tier.directory / ".spare").iterdir())


def test_a_landing_not_kept_lends_its_pages_to_the_next_block(tmp_path: Path) -> None:
    tier = ShmTier(str(tmp_path / "shm"), BLOCK // 2, None, spare_bytes=4 * FILE)
    first = os.urandom(BLOCK)  # larger than the tier: never kept
    got, inode, kept = _land(tier, ("f", 0), first)
    assert not kept and bytes(got) == first
    del got  # the last reader is done with it
    second = os.urandom(BLOCK - 100)  # a little shorter: the file is cut to its size
    got, reused, kept = _land(tier, ("f", 1), second)
    assert not kept and reused == inode and bytes(got) == second
    del got
    assert tier.spares is not None
    tier.spares.take(1 << 40)  # nothing that large; collects the landings done with
    assert not list(tier.directory.rglob("*.landing"))
    assert [p.stat().st_ino for p in _spares(tier)] == [inode]  # a spare again


def test_a_landing_still_being_read_is_not_reused_until_its_reader_is_done(
    tmp_path: Path,
) -> None:
    tier = ShmTier(str(tmp_path / "shm"), 2 * BLOCK, None, spare_bytes=4 * FILE)
    first = os.urandom(3 * BLOCK)
    waiter, inode, _ = _land(tier, ("big", 0), first)  # a waiter still sends these bytes
    second = os.urandom(3 * BLOCK)
    other, busy, _ = _land(tier, ("big", 1), second)
    assert busy != inode
    assert bytes(waiter) == first and bytes(other) == second  # neither written over
    del waiter
    _, reused, _ = _land(tier, ("big", 2), os.urandom(3 * BLOCK))
    assert reused == inode


def test_published_block_files_are_unlinked_when_evicted_never_reused(tmp_path: Path) -> None:
    tier = ShmTier(str(tmp_path / "shm"), BLOCK, None, spare_bytes=4 * FILE)
    _, first, kept = _land(tier, ("a", 0), os.urandom(BLOCK))
    assert kept
    _, second, kept = _land(tier, ("b", 0), os.urandom(BLOCK))  # evicts a
    assert kept and ("a", 0) not in tier
    assert second != first  # a same-host reader may still hold a's file open
    assert _spares(tier) == []
    assert tier.spares is not None and tier.spares.spare_bytes == 0


def test_spares_beyond_the_limit_are_removed(tmp_path: Path) -> None:
    tier = ShmTier(str(tmp_path / "shm"), BLOCK, None, spare_bytes=HEADER_SIZE + 2 * BLOCK)
    for i in range(3):
        got, _, kept = _land(tier, ("big", i), os.urandom(2 * BLOCK))
        assert not kept
        del got
    assert tier.spares is not None
    tier.spares.take(1 << 40)  # nothing that large; collects the landings done with
    assert len(_spares(tier)) == 1 and tier.spares.spare_bytes == HEADER_SIZE + 2 * BLOCK
    assert [p for p in tier.directory.iterdir() if p.is_file()] == []


def test_preallocated_spares_take_the_first_blocks_and_no_more_than_the_limit(
    tmp_path: Path,
) -> None:
    tier = ShmTier(str(tmp_path / "shm"), 4 * BLOCK, None, spare_bytes=3 * FILE + 1)
    assert tier.preallocate(BLOCK) == 3
    made = {p.stat().st_ino for p in _spares(tier)}
    assert all(p.stat().st_size == FILE for p in _spares(tier))
    data = os.urandom(BLOCK - 100)  # a file's last block, a little shorter
    _, inode, kept = _land(tier, ("f", 0), data)
    assert kept and inode in made and len(_spares(tier)) == 2
    held = tier.get(("f", 0))
    assert held is not None and bytes(held[0]) == data


def test_spares_made_at_start_leave_the_file_system_room_for_the_tiers_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tier = ShmTier(str(tmp_path / "shm"), 4 * BLOCK, None, spare_bytes=8 * FILE)
    spares = tier.spares
    assert spares is not None

    class FileSystem:  # room for the capacity and two spares, less what spares took
        f_frsize = 1

        @property
        def f_bavail(self) -> int:
            return 4 * BLOCK + 2 * FILE + FILE // 2 - spares.spare_bytes

    monkeypatch.setattr(os, "statvfs", lambda path: FileSystem())
    assert tier.preallocate(BLOCK) == 2
    assert len(_spares(tier)) == 2


def test_a_small_block_does_not_take_a_spare_made_for_a_whole_block(tmp_path: Path) -> None:
    tier = ShmTier(str(tmp_path / "shm"), 4 * BLOCK, None, spare_bytes=2 * FILE)
    assert tier.preallocate(BLOCK) == 2
    made = {p.stat().st_ino for p in _spares(tier)}
    _, inode, kept = _land(tier, ("small", 0), os.urandom(BLOCK // 4))
    assert kept and inode not in made and len(_spares(tier)) == 2


def test_a_block_kept_from_its_writer_is_written_into_a_spare(tmp_path: Path) -> None:
    tier = ShmTier(str(tmp_path / "shm"), 4 * BLOCK, None, spare_bytes=FILE)
    assert tier.preallocate(BLOCK) == 1
    (spare,) = _spares(tier)
    made = spare.stat().st_ino
    data = os.urandom(BLOCK - 10)  # a checkpoint's block, not fetched: no landing
    assert tier.put(("w", 0), data, checksum(data), 0)
    (published,) = [p for p in tier.directory.iterdir() if p.is_file()]
    assert published.stat().st_ino == made and published.stat().st_size == HEADER_SIZE + len(data)
    assert published.stat().st_mode & 0o777 == 0o444  # block files are read-only
    held = tier.get(("w", 0))
    assert held is not None and bytes(held[0]) == data and held[1] == checksum(data)
    assert _spares(tier) == []
