"""MountedStores opens one under-store per mount, off the event loop, and reopens it when the
mount changes; a worker's stores open as soon as its mount table learns of a mount."""

from __future__ import annotations

import asyncio
import threading

from reservoir.common.metadata import keyspace
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.s3_under_store import S3UnderStore
from reservoir.worker.mount_table import MountTable


def _mount(**options: object) -> Mount:
    return Mount("/m", "s3://bucket/data/", MountOptions(**options), 1)  # type: ignore[arg-type]


def test_the_same_mount_reuses_its_store() -> None:
    async def scenario() -> None:
        stores = MountedStores(timeout_s=1)
        first, second = await asyncio.gather(stores.open(_mount()), stores.open(_mount()))
        assert first is second
        assert await stores.open(_mount()) is first

    asyncio.run(scenario())


def test_a_remount_with_a_new_endpoint_credentials_or_block_size_reopens_the_store() -> None:
    async def scenario() -> None:
        stores = MountedStores(timeout_s=1)
        first = await stores.open(_mount(endpoint_url="http://a:9000"))
        moved = await stores.open(_mount(endpoint_url="http://b:9000"))
        assert moved is not first
        assert isinstance(moved, S3UnderStore) and moved.endpoint == "http://b:9000"
        anonymous = await stores.open(_mount(endpoint_url="http://b:9000", credentials="anonymous"))
        assert anonymous is not moved
        resized = await stores.open(_mount(endpoint_url="http://b:9000", block_size=8192))
        assert resized is not anonymous

    asyncio.run(scenario())


def test_a_store_opens_on_another_thread_while_the_loop_keeps_running() -> None:
    async def scenario() -> None:
        stores = MountedStores(timeout_s=1)
        loop_thread = threading.get_ident()
        opened_on: list[int] = []
        original = S3UnderStore.__init__

        def recording(self: S3UnderStore, *args: object, **kwargs: object) -> None:
            opened_on.append(threading.get_ident())
            original(self, *args, **kwargs)  # type: ignore[arg-type]

        S3UnderStore.__init__ = recording  # type: ignore[method-assign]
        try:
            await stores.open(_mount())
        finally:
            S3UnderStore.__init__ = original  # type: ignore[method-assign]
        assert opened_on and loop_thread not in opened_on

    asyncio.run(scenario())


def test_a_worker_opens_the_store_of_a_mount_it_learns_of_before_any_read() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        stores = MountedStores(timeout_s=1)

        class _NoMaster:
            async def mounts(self) -> list[Mount]:
                return []

        table = MountTable(store, _NoMaster())
        table.subscribe(stores)
        follower = asyncio.create_task(table.follow())
        mount = _mount(endpoint_url="http://a:9000")
        await store.put(keyspace.mount_key("/m"), mount.to_json())
        for _ in range(500):
            if stores.is_open(mount):
                break
            await asyncio.sleep(0.01)
        assert stores.is_open(mount), "the store was not opened ahead of the first read"
        await store.delete(keyspace.mount_key("/m"))
        for _ in range(100):
            if not stores.is_open(mount):
                break
            await asyncio.sleep(0.01)
        assert not stores.is_open(mount), "an unmounted store stayed open"
        follower.cancel()

    asyncio.run(scenario())
