"""Cache rules (pins, TTLs, free) on the in-process memory:// store: the master's table,
and the worker's view of it, which follows the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotFound, ReservoirError, ResourceExhausted
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, Mount, WorkerRecord, file_id_for
from reservoir.master.cache_rules import CacheRules
from reservoir.master.job_counters import LoadJobCounters
from reservoir.master.jobs import LoadJobs
from reservoir.master.locations import BlockLocationTable
from reservoir.master.mount_policy import MountPolicy
from reservoir.master.mount_table import MountTable
from reservoir.v1 import common_pb2, worker_pb2
from reservoir.worker.cache_rules import BlockExpiry, CacheRuleTable

KiB = 1024
BLOCK = 4 * KiB
URI = "s3://b/d/"


def _inode(path: str, size: int) -> Inode:
    uri = URI + path[len("/m/") :]
    return Inode(
        path=path,
        is_dir=False,
        size=size,
        etag="e",
        block_size=BLOCK,
        file_id=file_id_for(uri, "e", size, BLOCK),
        ufs_uri=uri,
        mount_path="/m",
    )


class Namespace:
    """The files of one mount at /m: /m/a/* and /m/b/*."""

    def __init__(self) -> None:
        files = [_inode(f"/m/a/f{i}", BLOCK) for i in range(4)]
        files += [_inode(f"/m/b/f{i}", 2 * BLOCK) for i in range(4)]
        self.files = {f.path: f for f in files}
        self.worker = WorkerRecord("w1", "127.0.0.1:1", capacity_bytes=64 * KiB)

    async def load_all_metadata(self, path: str) -> None:
        pass

    async def file_info(self, path: str, with_locations: bool = False) -> Inode:
        if path in self.files:
            return self.files[path]
        if any(p.startswith(path + "/") for p in self.files):
            return Inode(path=path, is_dir=True, mount_path="/m")
        raise NotFound(path)

    async def subtree(self, path: str) -> AsyncIterator[list[Inode]]:
        yield [f for p, f in self.files.items() if p.startswith(path + "/")]

    async def workers(self) -> list[WorkerRecord]:
        return [self.worker]


class Workers:
    """One worker with a 40 KiB memory tier (no disk) that frees whatever it is asked."""

    def __init__(self) -> None:
        self.freed: list[str] = []

    async def stats(self, worker: WorkerRecord) -> worker_pb2.WorkerStats:
        return worker_pb2.WorkerStats(
            tiers=[worker_pb2.TierStats(name="mem", capacity_bytes=40 * KiB, in_service=True)]
        )

    async def free_blocks(
        self, worker: WorkerRecord, file_ids: list[str]
    ) -> worker_pb2.FreeBlocksResponse:
        self.freed.extend(file_ids)
        refs = [common_pb2.BlockRef(file_id=f, index=0) for f in file_ids]
        return worker_pb2.FreeBlocksResponse(freed=refs, freed_bytes=BLOCK * len(refs))

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        return [None] * len(blocks)


async def _rules(store: MemoryMetadataStore) -> tuple[CacheRules, Workers]:
    config = MasterConfig(metadata_url="memory://")
    mounts = MountTable(store, MountPolicy("s3"), BLOCK)
    await mounts.put(Mount("/m", URI))
    namespace, workers = Namespace(), Workers()
    locations = BlockLocationTable(store)
    jobs = LoadJobs(
        store,
        config,
        namespace=namespace,
        membership=namespace,
        loader=workers,
        locations=locations,
        counters=LoadJobCounters(CollectorRegistry()),
    )
    rules = CacheRules(
        store,
        config,
        namespace=namespace,
        membership=namespace,
        mounts=mounts,
        workers=workers,
        jobs=jobs,
        locations=locations,
    )
    return rules, workers


def _run(scenario: Callable[[MemoryMetadataStore], Awaitable[None]]) -> None:
    asyncio.run(scenario(MemoryMetadataStore()))


def test_a_pin_is_kept_in_the_store_and_a_worker_knows_its_files_after_a_restart() -> None:
    async def scenario(store: MemoryMetadataStore) -> None:
        rules, _ = await _rules(store)
        rule, job_id = await rules.pin("/m/a/")
        assert (rule.path, rule.pinned_files, rule.pinned_bytes) == ("/m/a", 4, 4 * BLOCK)
        assert job_id
        again, _ = await _rules(store)  # a restarted (or standby) master
        assert [r.path for r in await again.rules()] == ["/m/a"]
        worker = CacheRuleTable(store)  # a restarted worker, before it serves anything
        await worker.load()
        a0, b0 = _inode("/m/a/f0", BLOCK), _inode("/m/b/f0", 2 * BLOCK)
        assert worker.pinned((a0.file_id, 0)) and not worker.pinned((b0.file_id, 0))
        assert worker.pinned_files == 4

    _run(scenario)


def test_pinning_more_than_the_workers_have_left_is_refused_and_writes_nothing() -> None:
    async def scenario(store: MemoryMetadataStore) -> None:
        rules, _ = await _rules(store)
        await rules.pin("/m/b")  # 32 KiB of the 40
        before = await store.get_prefix(b"/reservoir/v1/cache/")
        with pytest.raises(ResourceExhausted, match="32.0KiB pinned already"):
            await rules.pin("/m/a")  # 16 KiB more
        assert await store.get_prefix(b"/reservoir/v1/cache/") == before
        await rules.pin("/m/b")  # pinned again: counted once, fits
        rule, _ = await rules.pin("/m/a/f0")  # 4 KiB more: fits
        assert rule.pinned_files == 1

    _run(scenario)


def test_unpin_keeps_a_ttl_on_the_same_path_and_a_rule_with_neither_is_gone() -> None:
    async def scenario(store: MemoryMetadataStore) -> None:
        rules, _ = await _rules(store)
        await rules.pin("/m/a")
        await rules.set_ttl("/m/a", 5000)
        rule = await rules.unpin("/m/a")
        assert (rule.pinned, rule.ttl_ms) == (False, 5000)
        with pytest.raises(NotFound):
            await rules.unpin("/m/a")
        await rules.clear_ttl("/m/a")
        assert await rules.rules() == []
        assert await store.get_prefix(b"/reservoir/v1/cache/") == []

    _run(scenario)


def test_rules_outside_a_mount_and_ttls_that_are_not_positive_are_refused() -> None:
    async def scenario(store: MemoryMetadataStore) -> None:
        rules, _ = await _rules(store)
        with pytest.raises(InvalidArgument, match="not under any mount"):
            await rules.set_ttl("/elsewhere", 1000)
        with pytest.raises(InvalidArgument, match="positive"):
            await rules.set_ttl("/m", 0)
        with pytest.raises(InvalidArgument):
            await rules.pin("/m/../x")

    _run(scenario)


def test_free_asks_workers_for_every_file_below_the_path_but_the_pinned_ones() -> None:
    async def scenario(store: MemoryMetadataStore) -> None:
        rules, workers = await _rules(store)
        await rules.pin("/m/a")
        result = await rules.free("/m")
        assert (result.files, result.pinned_files, result.freed_blocks) == (8, 4, 4)
        b_ids = {_inode(f"/m/b/f{i}", 2 * BLOCK).file_id for i in range(4)}
        assert set(workers.freed) == b_ids

    _run(scenario)


def test_a_worker_follows_ttls_as_they_change_and_the_deepest_rule_wins() -> None:
    async def scenario(store: MemoryMetadataStore) -> None:
        rules, _ = await _rules(store)
        worker = CacheRuleTable(store)
        follow = asyncio.create_task(worker.follow())
        try:
            await rules.set_ttl("/m", 60_000)
            await rules.set_ttl("/m/a", 2_000)
            await asyncio.sleep(0.05)
            assert worker.ttl_s("/m", URI + "a/f0") == 2.0
            assert worker.ttl_s("/m", URI + "b/f0") == 60.0
            assert worker.ttl_s("/m", URI + "ab") == 60.0  # a sibling sharing a name prefix
            assert worker.ttl_s("/other", URI + "a/f0") is None
            await rules.clear_ttl("/m/a")
            await asyncio.sleep(0.05)
            assert worker.ttl_s("/m", URI + "a/f0") == 60.0
        finally:
            follow.cancel()

    _run(scenario)


def test_expiry_hands_out_blocks_once_their_deadline_passes_and_only_the_latest_one() -> None:
    expiry = BlockExpiry()
    expiry.set(("f", 0), landed_s=100.0, ttl_s=10.0)
    expiry.set(("f", 1), landed_s=100.0, ttl_s=5.0)
    expiry.set(("f", 1), landed_s=108.0, ttl_s=5.0)  # fetched again: a new deadline
    assert expiry.due(104.0) == []
    assert expiry.due(110.0) == [(("f", 0), 100.0)]
    assert expiry.due(113.0) == [(("f", 1), 108.0)] and len(expiry) == 0
