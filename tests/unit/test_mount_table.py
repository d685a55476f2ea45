"""The worker's MountTable follows the mounts in the metadata store (in-process memory://
store and a fake master; no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from reservoir.common.errors import NotFound, Unavailable
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Mount, MountOptions
from reservoir.worker.mount_table import MountTable

URI = "s3://bucket/data/"


def _mount(endpoint: str, block_size: int = 0) -> Mount:
    return Mount("/m", URI, MountOptions(endpoint_url=endpoint, block_size=block_size), 1)


class _Master:
    def __init__(self, mounts: list[Mount]) -> None:
        self.list = mounts
        self.calls = 0
        self.down = False

    async def mounts(self) -> list[Mount]:
        self.calls += 1
        if self.down:
            raise Unavailable("master is down")
        return list(self.list)


async def _started_following(table: MountTable) -> None:
    for _ in range(100):  # a few loop turns: the in-memory store answers at once
        if table.following:
            return
        await asyncio.sleep(0)
    raise AssertionError("the mount table did not start following the store")


def test_a_remount_in_the_store_reaches_the_next_lookup_without_asking_the_master() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        await store.put(keyspace.mount_key("/m"), _mount("http://a:9000").to_json())
        master = _Master([])
        table = MountTable(store, master)
        follower = asyncio.create_task(table.follow())
        await _started_following(table)
        assert (await table.get("/m", URI + "f")).options.endpoint_url == "http://a:9000"
        remounted = _mount("http://b:9000", block_size=8192)
        await store.put(keyspace.mount_key("/m"), remounted.to_json())
        await asyncio.sleep(0)  # the watch delivers
        assert await table.get("/m", URI + "f") == remounted
        await store.delete(keyspace.mount_key("/m"))
        await asyncio.sleep(0)
        with pytest.raises(NotFound):
            await table.get("/m", URI + "f")  # unknown: the master is asked, knows nothing
        assert master.calls == 1
        follower.cancel()

    asyncio.run(scenario())


def test_without_a_watch_lookups_ask_the_master_and_survive_its_absence() -> None:
    async def scenario() -> None:
        master = _Master([_mount("http://a:9000")])
        table = MountTable(MemoryMetadataStore(), master)  # never follows
        assert (await table.get("/m", URI + "f")).options.endpoint_url == "http://a:9000"
        master.list = [_mount("http://b:9000")]
        assert (await table.get("/m", URI + "f")).options.endpoint_url == "http://b:9000"
        master.down = True  # the last known mount serves rather than failing the read
        assert (await table.get("/m", URI + "f")).options.endpoint_url == "http://b:9000"
        with pytest.raises(Unavailable):
            await table.get("/other", "s3://x/")
        assert master.calls == 4

    asyncio.run(scenario())


def test_recheck_finds_a_remount_at_the_master_at_most_once_per_interval() -> None:
    async def scenario() -> None:
        old, new = _mount("http://a:9000"), _mount("http://b:9000")
        master = _Master([old])
        table = MountTable(MemoryMetadataStore(), master, recheck_interval_s=3600)
        assert await table.get("/m", URI + "f") == old
        master.list = [new]
        assert await table.recheck(old) == new
        assert await table.recheck(new) is None  # asked again too soon: not asked
        assert master.calls == 2
        other = MountTable(MemoryMetadataStore(), master, recheck_interval_s=0)
        assert await other.recheck(new) is None  # unchanged
        master.down = True
        assert await other.recheck(old) is None  # the master is down: no answer, no error

    asyncio.run(scenario())
