"""Per-mount quota shares, fair eviction and idle reclaim on one worker, driven through
the real memory tier and tiered store (no sockets)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.metadata.worker_registry import WorkerRegistry
from reservoir.common.models import Mount, MountOptions, WorkerRecord
from reservoir.worker.cache_rules import CacheRuleTable
from reservoir.worker.eviction import new_policy
from reservoir.worker.fair_eviction import FairEviction
from reservoir.worker.idle_reclaim import IdleReclaim
from reservoir.worker.memory_tier import NO_PINS, BlockId, MemoryTier, Pins
from reservoir.worker.mount_shares import MountShares
from reservoir.worker.share_weight import ShareWeight, capacity_weight
from reservoir.worker.shm_tier import ShmTier
from reservoir.worker.tiered_store import TieredStore

BLOCK = 1024
CAPACITY = 100 * BLOCK


class _Owner:
    """The tiered store's owner, as the worker service is: a block gone leaves its mount."""

    def __init__(self) -> None:
        self.shares: MountShares | None = None

    def block_gone(self, block: BlockId, size: int, tier: str) -> None:
        assert self.shares is not None
        self.shares.gone(block)

    def block_corrupt(self, block: BlockId, tier: str, error: str) -> None:
        raise AssertionError("no block is corrupt here")


def _worker(
    policy: str = "lru", weight: float | None = 1.0, pins: Pins = NO_PINS
) -> tuple[TieredStore, MountShares]:
    owner = _Owner()
    memory = MemoryTier(CAPACITY, None, new_policy(policy, CAPACITY))
    store = TieredStore(memory, [], owner, io_threads=1, scan_parallelism=1, write_queue_bytes=0)
    shares = MountShares(pins)
    shares.weight = weight
    memory.order = FairEviction(shares, CAPACITY)
    owner.shares = shares
    return store, shares


def _mount(shares: MountShares, path: str, **options: object) -> None:
    shares.mount_changed(Mount(path, f"s3://b{path}/", MountOptions(**options), 0))  # type: ignore[arg-type]


def _read(store: TieredStore, shares: MountShares, mount: str, block: BlockId) -> bool:
    """One reader's request as the worker serves it: a hit, or a fetch offered for keeping."""
    shares.read(block, mount)
    if store.memory.get(block) is not None:
        return True
    shares.keep(store, mount, block, b"x" * BLOCK, 0, 0)
    return False


def test_a_mount_at_its_share_makes_room_from_its_own_coldest_blocks() -> None:
    store, shares = _worker()
    _mount(shares, "/a", quota_bytes=10 * BLOCK)
    _mount(shares, "/b")
    for i in range(5):
        _read(store, shares, "/b", ("b", i))
    for i in range(30):
        _read(store, shares, "/a", ("a", i))
    assert shares.bytes_of("/a") == 10 * BLOCK
    assert sorted(shares.blocks_of("/a")) == [("a", i) for i in range(20, 30)]
    assert shares.bytes_of("/b") == 5 * BLOCK  # another mount's blocks are not touched


def test_the_share_is_the_quota_times_the_workers_capacity_weight() -> None:
    store, shares = _worker(weight=0.25)
    _mount(shares, "/a", quota_bytes=40 * BLOCK)
    for i in range(40):
        _read(store, shares, "/a", ("a", i))
    assert shares.bytes_of("/a") == 10 * BLOCK


def test_a_block_larger_than_the_share_is_served_but_not_kept() -> None:
    store, shares = _worker()
    _mount(shares, "/a", quota_bytes=BLOCK // 2)
    assert not _read(store, shares, "/a", ("a", 0))
    assert ("a", 0) not in store
    assert shares.bytes_of("/a") == 0


def test_a_quota_mount_keeps_nothing_until_the_worker_knows_its_weight() -> None:
    store, shares = _worker(weight=None)
    _mount(shares, "/a", quota_bytes=50 * BLOCK)
    _mount(shares, "/b")
    _read(store, shares, "/a", ("a", 0))
    _read(store, shares, "/b", ("b", 0))
    assert ("a", 0) not in store and ("b", 0) in store


@pytest.mark.parametrize("policy", ["lru", "tinylfu"])
def test_a_scan_of_one_mount_does_not_push_another_below_its_share(policy: str) -> None:
    store, shares = _worker(policy)
    _mount(shares, "/a", quota_bytes=40 * BLOCK)
    _mount(shares, "/b")
    working_set = [("a", i) for i in range(40)]
    rng = random.Random(3)
    for _ in range(3):  # A warms up
        for block in rng.sample(working_set, len(working_set)):
            _read(store, shares, "/a", block)
    hits = reads = 0
    for n in range(1000):  # B scans 10x the cache, A keeps reading its working set
        _read(store, shares, "/b", ("scan", n))
        if n % 4 == 0:
            hits += _read(store, shares, "/a", rng.choice(working_set))
            reads += 1
    assert hits / reads >= 0.95
    assert shares.bytes_of("/a") == 40 * BLOCK
    assert store.memory.used_bytes <= CAPACITY


def test_a_mount_under_its_share_gets_in_past_admission_while_another_is_over() -> None:
    store, shares = _worker("tinylfu")
    _mount(shares, "/a", quota_bytes=40 * BLOCK)
    _mount(shares, "/b")
    for _ in range(3):  # B's blocks are hot and fill the cache
        for i in range(100):
            _read(store, shares, "/b", ("b", i))
    assert shares.bytes_of("/b") == CAPACITY
    for i in range(40):  # each A block asked for once: TinyLFU alone would turn it down
        _read(store, shares, "/a", ("a", i))
    assert shares.bytes_of("/a") == 40 * BLOCK
    assert shares.bytes_of("/b") == 60 * BLOCK


def test_of_mounts_over_their_share_low_priority_ones_are_evicted_first() -> None:
    store, shares = _worker()
    _mount(shares, "/high", priority="high")
    _mount(shares, "/low", priority="low")
    _mount(shares, "/q", quota_bytes=20 * BLOCK)
    for i in range(50):  # the oldest: LRU alone would evict these first
        _read(store, shares, "/high", ("h", i))
    for i in range(50):
        _read(store, shares, "/low", ("l", i))
    # Both over their open share (40 blocks each of what /q's quota leaves).
    for i in range(10):
        _read(store, shares, "/q", ("q", i))
    assert shares.bytes_of("/low") == 40 * BLOCK
    assert shares.bytes_of("/high") == 50 * BLOCK


def test_without_quotas_or_priorities_eviction_is_the_policys_alone() -> None:
    store, shares = _worker()
    _mount(shares, "/a")
    _mount(shares, "/b")
    for i in range(80):
        _read(store, shares, "/a", ("a", i))
    for i in range(40):
        _read(store, shares, "/b", ("b", i))
    assert shares.bytes_of("/a") == 60 * BLOCK  # LRU: A's oldest went, though B is smaller


def test_a_lowered_quota_names_the_mounts_coldest_blocks_over_the_new_share() -> None:
    store, shares = _worker()
    _mount(shares, "/a", quota_bytes=20 * BLOCK)
    for i in range(20):
        _read(store, shares, "/a", ("a", i))
    _read(store, shares, "/a", ("a", 0))  # read again: the warmest
    assert shares.excess() == []
    _mount(shares, "/a", quota_bytes=15 * BLOCK)  # the mount table brings the change
    assert shares.excess() == [("a", i) for i in range(1, 6)]
    shares.weight = None
    assert shares.excess() == []  # a weight not known yet never empties the cache


def test_a_block_kept_before_its_mount_was_known_counts_with_it_once_read() -> None:
    store, shares = _worker()
    _mount(shares, "/a", quota_bytes=20 * BLOCK)
    store.put(("a", 0), b"x" * BLOCK, 0, 0)  # e.g. found on disk at start
    shares.held(("a", 0), BLOCK)
    assert shares.bytes_of("/a") == 0
    shares.adopt(("a", 0), "/a", BLOCK)
    assert shares.bytes_of("/a") == BLOCK and shares.blocks_of("/a") == [("a", 0)]


def test_a_pinned_block_is_kept_past_its_mounts_share_and_never_evicted_for_it() -> None:
    async def pinned_rules() -> CacheRuleTable:
        meta = MemoryMetadataStore()
        await meta.put(keyspace.pinned_key("/a", "pinned"), b"1")
        rules = CacheRuleTable(meta)
        await rules.load()
        return rules

    store, shares = _worker(pins=asyncio.run(pinned_rules()))
    _mount(shares, "/a", quota_bytes=2 * BLOCK)
    for i in range(3):
        assert shares.keep(store, "/a", ("pinned", i), b"x" * BLOCK, 0, 0)
    assert not shares.keep(store, "/a", ("other", 0), b"x" * BLOCK, 0, 0)
    assert shares.bytes_of("/a") == 3 * BLOCK
    assert shares.excess() == []


def test_capacity_weight_is_this_workers_part_of_the_live_capacity() -> None:
    assert capacity_weight("w1", 100, {"w1": 100, "w2": 300}) == 0.25
    assert capacity_weight("w1", 100, {"w2": 100}) == 0.5  # not registered yet: counted
    assert capacity_weight("w1", 100, {}) == 1.0


def test_mount_options_refuse_a_negative_quota_or_ttl_and_an_unknown_priority() -> None:
    for bad in (
        MountOptions(quota_bytes=-1),
        MountOptions(idle_ttl_ms=-1),
        MountOptions(priority="urgent"),
    ):
        with pytest.raises(InvalidArgument):
            bad.validated()
    assert MountOptions(quota_bytes=1, priority="low", idle_ttl_ms=1).validated()


def _idle_worker(
    worker_id: str, meta: MemoryMetadataStore
) -> tuple[TieredStore, MountShares, IdleReclaim]:
    store, shares = _worker()
    _mount(shares, "/a", idle_ttl_ms=60_000)
    _mount(shares, "/b")
    return store, shares, IdleReclaim(shares, store, NO_PINS, meta, worker_id)


def test_an_idle_mounts_blocks_are_reclaimed_and_a_read_one_keeps_them() -> None:
    async def scenario() -> None:
        meta = MemoryMetadataStore()
        store, shares, idle = _idle_worker("w1", meta)
        shares.read(("a", 0), "/a", now_s=1000.0)
        shares.keep(store, "/a", ("a", 0), b"x" * BLOCK, 0, 0)
        shares.keep(store, "/b", ("b", 0), b"x" * BLOCK, 0, 0)
        await idle.sweep(now_s=1030.0)
        assert ("a", 0) in store
        await idle.sweep(now_s=1061.0)
        assert ("a", 0) not in store and ("b", 0) in store
        assert shares.bytes_of("/a") == 0

    asyncio.run(scenario())


def test_a_mount_read_on_another_worker_within_its_ttl_is_not_idle() -> None:
    async def scenario() -> None:
        meta = MemoryMetadataStore()
        store, shares, idle = _idle_worker("w1", meta)
        _, other_shares, other = _idle_worker("w2", meta)
        shares.read(("a", 0), "/a", now_s=1000.0)
        shares.keep(store, "/a", ("a", 0), b"x" * BLOCK, 0, 0)
        other_shares.read(("a", 1), "/a", now_s=1050.0)
        await other.sweep(now_s=1050.0)  # w2 publishes its read
        await idle.sweep(now_s=1070.0)
        assert ("a", 0) in store
        assert await meta.get_prefix(keyspace.mount_reads_prefix("/a"))
        await idle.sweep(now_s=1111.0)  # w2's read may have moved on by a quarter TTL
        assert ("a", 0) in store
        await idle.sweep(now_s=1126.0)
        assert ("a", 0) not in store

    asyncio.run(scenario())


def test_a_shm_block_file_read_directly_is_seen_once_per_read(tmp_path: Path) -> None:
    tier = ShmTier(str(tmp_path / "shm"), CAPACITY, None)
    tier.put(("a", 0), b"x" * BLOCK, 0, 0)
    ref = tier.file_of(("a", 0))
    assert ref is not None
    tier.read_directly(("a", 0))  # arms it (the worker's own write may count as a read)
    assert not tier.read_directly(("a", 0))
    Path(ref.path).read_bytes()  # a short-circuit reader
    assert tier.read_directly(("a", 0))
    assert not tier.read_directly(("a", 0))
    assert not tier.read_directly(("a", 1))  # not held: no file


def _short_circuit_read(path: str) -> bytes:
    """What a same-host client does: reads the worker's block file, telling it nothing."""
    return Path(path).read_bytes()


def test_an_idle_mount_read_only_through_its_shm_files_is_kept(tmp_path: Path) -> None:
    async def scenario() -> None:
        shares = MountShares(NO_PINS)
        shares.weight = 1.0
        memory = ShmTier(str(tmp_path / "shm"), CAPACITY, None)
        memory.order = FairEviction(shares, CAPACITY)
        owner = _Owner()
        owner.shares = shares
        store = TieredStore(
            memory, [], owner, io_threads=1, scan_parallelism=1, write_queue_bytes=0
        )
        _mount(shares, "/a", idle_ttl_ms=60_000)
        idle = IdleReclaim(shares, store, NO_PINS, MemoryMetadataStore(), "w1")
        shares.read(("a", 0), "/a", now_s=1000.0)
        shares.keep(store, "/a", ("a", 0), b"x" * BLOCK, 0, 0)
        ref = memory.file_of(("a", 0))
        assert ref is not None
        _short_circuit_read(ref.path)
        await idle.sweep(now_s=1061.0)  # read directly since it landed: kept, re-armed
        assert ("a", 0) in store
        _short_circuit_read(ref.path)
        await idle.sweep(now_s=1122.0)  # read again within the TTL: kept
        assert ("a", 0) in store
        await idle.sweep(now_s=1183.0)  # not read since: reclaimed
        assert ("a", 0) not in store

    asyncio.run(scenario())


def test_a_busy_mounts_last_read_is_written_once_per_quarter_ttl() -> None:
    async def scenario() -> list[bytes]:
        meta = MemoryMetadataStore()
        store, shares, idle = _idle_worker("w1", meta)
        key = keyspace.mount_read_key("/a", "w1")
        seen = []
        for t in range(1000, 1031):
            shares.read(("a", 0), "/a", now_s=float(t))
            await idle.sweep(now_s=float(t))
            value = await meta.get(key)
            if value is not None and (not seen or seen[-1] != value):
                seen.append(value)
        return seen

    assert asyncio.run(scenario()) == [b"1000000", b"1015000", b"1030000"]


def test_a_mount_that_loses_its_idle_ttl_loses_this_workers_last_read_key() -> None:
    async def scenario() -> bytes | None:
        meta = MemoryMetadataStore()
        _, shares, idle = _idle_worker("w1", meta)
        shares.read(("a", 0), "/a", now_s=1000.0)
        await idle.sweep(now_s=1000.0)
        assert await meta.get(keyspace.mount_read_key("/a", "w1")) is not None
        shares.mount_removed("/a")
        await idle.sweep(now_s=1001.0)
        return await meta.get(keyspace.mount_read_key("/a", "w1"))

    assert asyncio.run(scenario()) is None


def test_the_weight_comes_from_the_registry_and_a_shrunk_share_is_evicted() -> None:
    async def scenario() -> None:
        meta = MemoryMetadataStore()
        registry = WorkerRegistry(meta)
        await registry.register(WorkerRecord("w1", "a:1", capacity_bytes=CAPACITY), 10)
        store, shares = _worker(weight=None)
        weight = ShareWeight(registry, shares, store, "w1", CAPACITY)
        await weight.refresh()
        assert shares.weight == 1.0
        _mount(shares, "/a", quota_bytes=40 * BLOCK)
        for i in range(40):
            _read(store, shares, "/a", ("a", i))
        await registry.register(WorkerRecord("w2", "b:1", capacity_bytes=3 * CAPACITY), 10)
        await weight.refresh()  # a worker joined: this one's share is a quarter now
        assert shares.weight == 0.25
        assert shares.bytes_of("/a") == 10 * BLOCK
        assert sorted(shares.blocks_of("/a")) == [("a", i) for i in range(30, 40)]

    asyncio.run(scenario())
