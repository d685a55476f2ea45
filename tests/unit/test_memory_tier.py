from pathlib import Path

from reservoir.worker.memory_tier import MemoryTier


def test_least_recently_used_block_is_evicted_first() -> None:
    evicted: list[tuple[str, int]] = []
    tier = MemoryTier(30, lambda b, n: evicted.append(b))
    tier.put(("a", 0), b"x" * 10)
    tier.put(("b", 0), b"x" * 10)
    tier.put(("c", 0), b"x" * 10)
    assert tier.get(("a", 0)) is not None  # a is now the most recent
    tier.put(("d", 0), b"x" * 10)
    assert evicted == [("b", 0)]
    assert tier.used_bytes == 30


def test_block_larger_than_capacity_is_not_kept_and_evicts_nothing() -> None:
    evicted: list[tuple[str, int]] = []
    tier = MemoryTier(10, lambda b, n: evicted.append(b))
    tier.put(("a", 0), b"x" * 5)
    assert tier.put(("big", 0), b"x" * 11) is False
    assert evicted == [] and ("a", 0) in tier and ("big", 0) not in tier


def test_used_bytes_never_exceed_capacity() -> None:
    tier = MemoryTier(100, lambda b, n: None)
    for i in range(50):
        tier.put(("f", i), b"x" * (i % 37 + 1))
        assert tier.used_bytes <= 100


def test_shm_tier_keeps_blocks_as_files_and_unlinks_evicted_ones(tmp_path: Path) -> None:
    from reservoir.worker.shm_tier import ShmTier

    evicted: list[tuple[str, int]] = []
    tier = ShmTier(str(tmp_path / "shm"), 20, lambda b, n: evicted.append(b))
    tier.put(("a", 0), b"x" * 10)
    tier.put(("b", 0), b"y" * 10)
    assert bytes(tier.get(("a", 0)) or b"") == b"x" * 10
    tier.put(("c", 0), b"z" * 10)
    assert evicted == [("b", 0)]
    assert sorted(p.name for p in (tmp_path / "shm").iterdir()) == ["a-0", "c-0"]
    assert (tmp_path / "shm" / "c-0").read_bytes() == b"z" * 10
