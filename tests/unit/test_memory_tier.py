from pathlib import Path

import pytest

from reservoir.common.blocks.block_file import HEADER_SIZE, checksum
from reservoir.common.errors import DataLoss
from reservoir.worker.memory_tier import BlockId, MemoryTier


def _put(tier: MemoryTier, block: BlockId, data: bytes) -> bool:
    return tier.put(block, data, checksum(data), 0)


def test_least_recently_used_block_is_evicted_first() -> None:
    evicted: list[tuple[str, int]] = []
    tier = MemoryTier(30, lambda b, n: evicted.append(b))
    _put(tier, ("a", 0), b"x" * 10)
    _put(tier, ("b", 0), b"x" * 10)
    _put(tier, ("c", 0), b"x" * 10)
    assert tier.get(("a", 0)) is not None  # a is now the most recent
    _put(tier, ("d", 0), b"x" * 10)
    assert evicted == [("b", 0)]
    assert tier.used_bytes == 30


def test_block_larger_than_capacity_is_not_kept_and_evicts_nothing() -> None:
    evicted: list[tuple[str, int]] = []
    tier = MemoryTier(10, lambda b, n: evicted.append(b))
    _put(tier, ("a", 0), b"x" * 5)
    assert _put(tier, ("big", 0), b"x" * 11) is False
    assert evicted == [] and ("a", 0) in tier and ("big", 0) not in tier


def test_used_bytes_never_exceed_capacity() -> None:
    tier = MemoryTier(100, lambda b, n: None)
    for i in range(50):
        _put(tier, ("f", i), b"x" * (i % 37 + 1))
        assert tier.used_bytes <= 100


def test_shm_tier_keeps_blocks_as_files_and_unlinks_evicted_ones(tmp_path: Path) -> None:
    from reservoir.worker.shm_tier import ShmTier

    evicted: list[tuple[str, int]] = []
    tier = ShmTier(str(tmp_path / "shm"), 20, lambda b, n: evicted.append(b))
    _put(tier, ("a", 0), b"x" * 10)
    _put(tier, ("b", 0), b"y" * 10)
    held = tier.get(("a", 0))
    assert held is not None and bytes(held[0]) == b"x" * 10 and held[1] == checksum(b"x" * 10)
    _put(tier, ("c", 0), b"z" * 10)
    assert evicted == [("b", 0)]
    assert sorted(p.name for p in (tmp_path / "shm").iterdir()) == ["a-0", "c-0"]
    assert (tmp_path / "shm" / "c-0").read_bytes()[HEADER_SIZE:] == b"z" * 10


def test_shm_tier_refuses_a_block_file_changed_behind_its_back(tmp_path: Path) -> None:
    from reservoir.worker.shm_tier import ShmTier

    tier = ShmTier(str(tmp_path / "shm"), 100, lambda b, n: None)
    _put(tier, ("a", 0), b"x" * 10)
    path = tmp_path / "shm" / "a-0"
    raw = bytearray(path.read_bytes())
    raw[HEADER_SIZE + 3] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(raw))
    with pytest.raises(DataLoss):
        tier.get(("a", 0))
    assert tier.drop(("a", 0)) and not path.exists() and tier.used_bytes == 0


def test_a_dropped_block_is_no_longer_held() -> None:
    tier = MemoryTier(10, lambda b, n: None)
    _put(tier, ("a", 0), b"abc")
    held = tier.get(("a", 0))
    assert held is not None and bytes(held[0]) == b"abc"
    assert tier.drop(("a", 0)) and tier.get(("a", 0)) is None and tier.used_bytes == 0


class _Pinned:
    def __init__(self, *files: str) -> None:
        self.files = set(files)

    def pinned(self, block: BlockId) -> bool:
        return block[0] in self.files


def test_a_pinned_block_is_never_evicted_and_a_full_tier_of_them_serves_without_keeping() -> None:
    evicted: list[BlockId] = []
    tier = MemoryTier(20, lambda b, n: evicted.append(b))
    tier.pins = _Pinned("p")
    _put(tier, ("p", 0), b"x" * 10)
    _put(tier, ("a", 0), b"x" * 10)
    assert _put(tier, ("b", 0), b"x" * 10)  # evicts a, the only unpinned block
    assert evicted == [("a", 0)]
    _put(tier, ("p", 1), b"x" * 10)  # pinned: evicts b
    assert _put(tier, ("c", 0), b"x" * 10) is False  # all pinned: not kept, nothing lost
    assert sorted(tier.blocks()) == [("p", 0), ("p", 1)] and tier.pinned_bytes() == 20


@pytest.mark.parametrize("shm", [False, True])
def test_a_rekeyed_block_is_held_under_its_new_id_and_offset_only(
    tmp_path: Path, shm: bool
) -> None:
    from reservoir.common.blocks.block_file import read_block_file
    from reservoir.worker.shm_tier import ShmTier

    tier = ShmTier(str(tmp_path / "shm"), 100, None) if shm else MemoryTier(100, None)
    data = memoryview(b"header--" + b"payload!!")[8:]  # a view, as a staged block arrives
    assert tier.put(("staged-w", 2), data, checksum(data), 0)
    assert tier.rekey(("staged-w", 2), ("file", 2), 18)
    assert ("staged-w", 2) not in tier and tier.used_bytes == 9
    held = tier.get(("file", 2))
    assert held is not None and bytes(held[0]) == b"payload!!" and held[1] == checksum(data)
    entry = tier.entry(("file", 2))
    assert entry is not None and entry.offset == 18
    if shm:
        assert sorted(p.name for p in (tmp_path / "shm").iterdir()) == ["file-2"]
        assert (tmp_path / "shm" / "file-2").stat().st_mode & 0o777 == 0o444  # still read-only
        assert read_block_file(str(tmp_path / "shm" / "file-2"), 9, 18)[0] == b"payload!!"
    # Nothing to move, or a block already held under the new id: nothing changes.
    assert not tier.rekey(("staged-w", 2), ("file", 3), 27)
    assert tier.put(("staged-w", 3), b"other", checksum(b"other"), 0)
    assert not tier.rekey(("staged-w", 3), ("file", 2), 18)
    assert ("staged-w", 3) in tier and bytes(tier.get(("file", 2))[0]) == b"payload!!"  # type: ignore[index]
