"""The namespace in chunks (master/namespace_store.py), on an in-process memory:// store:
every write keeps each name findable with one lookup, listings come back whole and in
order across chunks and pages, and a namespace stored by the JSON layout is migrated
when the master starts."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from pathlib import Path

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.inode_codec import iter_chunk
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, Mount, MountOptions, file_id_for
from reservoir.master.metadata_sync import now_ms
from reservoir.master.mount_policy import MountPolicy
from reservoir.master.mount_table import MountTable
from reservoir.master.namespace_store import CHUNK_BYTES, CHUNK_ENTRIES, NamespaceStore
from reservoir.master.service import MasterService

MOUNT = Mount("/data", "s3://bucket/imagenet/", MountOptions(metadata_sync="interval:1h"), 1)


def _file(path: str, size: int = 1000) -> Inode:
    uri = MOUNT.uri + path[len(MOUNT.path) + 1 :]
    etag = f"{hash(path) & (2**128 - 1):032x}"
    return Inode(
        path=path,
        is_dir=False,
        size=size,
        mtime_ms=1_764_500_000_000,
        etag=etag,
        file_id=file_id_for(uri, etag, size, 4 * 1024 * 1024),
        ufs_uri=uri,
        mount_path=MOUNT.path,
        synced_ms=now_ms(),
    )


def _dir(path: str) -> Inode:
    return Inode(path=path, is_dir=True, mount_path=MOUNT.path, synced_ms=now_ms())


async def _namespace(store: MemoryMetadataStore) -> NamespaceStore:
    mounts = MountTable(store, MountPolicy("s3", ""), 4 * 1024 * 1024)
    await mounts.put(MOUNT)
    return NamespaceStore(store, mounts)


@pytest.mark.parametrize("synced_apart_ms", [0, 1, 29])
def test_a_directory_of_thousands_of_files_is_packed_into_full_chunks(
    synced_apart_ms: int,
) -> None:
    """Entries synced at different times store larger ages; chunks stay within bounds.
    (1 ms apart is what a slow machine does while the test builds its files.)"""

    async def scenario() -> None:
        store = MemoryMetadataStore(page_keys=7)
        namespace = await _namespace(store)
        now = now_ms()
        files = [
            replace(_file(f"/data/train/img-{i:06d}.jpg"), synced_ms=now - i * synced_apart_ms)
            for i in range(3000)
        ]
        await namespace.put_many(files)
        group = keyspace.namespace_group("/data", "/data/train")
        chunks = [raw for _, raw in await store.get_prefix(group)]
        assert all(len(list(iter_chunk(raw))) <= CHUNK_ENTRIES for raw in chunks)
        # Each about as large as etcd packs well, none larger.
        assert all(len(raw) <= CHUNK_BYTES for raw in chunks)
        assert sum(len(raw) for raw in chunks) / len(chunks) >= 0.8 * CHUNK_BYTES
        assert await namespace.children("/data/train") == files
        picked = random.Random(1).sample(files, 50)
        assert await namespace.get_many([f.path for f in picked]) == picked
        assert await namespace.get("/data/train/img-999999.jpg") is None

    asyncio.run(scenario())


def test_random_writes_and_deletes_keep_every_name_findable_in_one_lookup() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore(page_keys=5)
        namespace = await _namespace(store)
        rng = random.Random(7)
        names = [f"f{rng.randrange(10**6):06d}" for _ in range(1500)]
        model: dict[str, Inode] = {}
        for _ in range(60):
            batch = rng.sample(names, rng.choice([1, 3, 40, 200]))
            if rng.random() < 0.3 and model:
                gone = rng.sample(sorted(model), min(len(model), len(batch)))
                await namespace.delete_many(gone)
                for path in gone:
                    model.pop(path)
            else:
                inodes = [_file(f"/data/d/{n}", size=rng.randrange(10**6)) for n in batch]
                await namespace.put_many(inodes)
                model.update((i.path, i) for i in inodes)
        assert await namespace.children("/data/d") == [model[p] for p in sorted(model)]
        everything = sorted({f"/data/d/{n}" for n in names})
        found = await namespace.get_many(everything)
        assert found == [model.get(p) for p in everything]
        # No chunk is past the bound, and a stat never reads more than one.
        group = keyspace.namespace_group("/data", "/data/d")
        for _, raw in await store.get_prefix(group):
            assert 0 < len(list(iter_chunk(raw))) <= CHUNK_ENTRIES

    asyncio.run(scenario())


def test_a_walk_yields_every_inode_below_a_directory_and_nothing_beside_it() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore(page_keys=2)
        namespace = await _namespace(store)
        below = [_dir("/data/a"), _dir("/data/a/b")] + [
            _file(f"/data/a/b/{i:03d}") for i in range(150)
        ]
        await namespace.put_many([*below, _file("/data/a/x"), _dir("/data/z")])
        await namespace.put(_file("/data/z/outside"))
        walked = [i async for page in namespace.walk("/data/a") for i in page]
        assert sorted(i.path for i in walked) == sorted([i.path for i in below[1:]] + ["/data/a/x"])
        await namespace.delete_subtree("/data/a")
        assert [p async for p in namespace.walk("/data/a")] == []
        assert await namespace.get("/data/a") == below[0]
        assert await namespace.get("/data/z/outside") is not None

    asyncio.run(scenario())


def test_a_namespace_stored_as_json_per_key_is_migrated_when_the_master_starts(
    tmp_path: Path,
) -> None:
    """Upgrade: the master moves the previous layout (one JSON inode per key, by depth
    then path) into chunks at start, then serves stats, listings and reports from them."""
    root = tmp_path / "ufs"
    root.mkdir()
    mount = Mount("/m", f"file://{root}/", MountOptions(metadata_sync="interval:1h"), 1)
    synced = now_ms()

    def legacy(path: str, size: int) -> Inode:
        uri = mount.uri + path[len("/m/") :]
        return Inode(
            path=path,
            is_dir=False,
            size=size,
            mtime_ms=1_764_500_000_000,
            etag=f"{size:032x}",
            file_id=file_id_for(uri, f"{size:032x}", size, 4 * 1024 * 1024),
            ufs_uri=uri,
            mount_path="/m",
            synced_ms=synced,
        )

    files = [legacy(f"/m/train/img-{i:04d}.jpg", 1000 + i) for i in range(250)]
    top = replace(_dir("/m"), mount_path="/m", listed_ms=synced)
    train = replace(_dir("/m/train"), mount_path="/m", listed_ms=synced)
    orphan = replace(legacy("/gone/x", 1), mount_path="/gone")

    async def scenario() -> None:
        store = MemoryMetadataStore(page_keys=16)
        await store.put(keyspace.mount_key("/m"), mount.to_json())
        await store.put_many(
            [(keyspace.legacy_inode_key(i.path), i.to_json()) for i in [top, train, *files]]
            + [(keyspace.legacy_inode_key(orphan.path), orphan.to_json())]
        )
        config = MasterConfig(metadata_url="memory://", allowed_schemes="s3,file")
        master = MasterService(store, config)
        await master.start()
        try:
            assert await store.get_prefix(keyspace.LEGACY_INODES) == []
            # Nothing in the under-store: every answer comes from the migrated inodes.
            assert await master.reads.file_info("/m/train/img-0042.jpg") == files[42]
            assert [i.path for i in await master.reads.list_directory("/m/train")] == [
                f.path for f in files
            ]
            report = await master.reads.report("/m")
            assert report["files"] == 250
            assert report["bytes"] == sum(f.size for f in files)
        finally:
            await master.close()

    asyncio.run(scenario())


def test_a_walk_of_files_closed_early_with_its_queue_full_returns_at_once() -> None:
    """A report whose caller gives up leaves the walk's readers ahead of it; closing the
    walk must not wait on a reader putting into the queue nobody reads any more."""

    async def scenario() -> None:
        store = MemoryMetadataStore(page_keys=1)
        namespace = await _namespace(store)
        await namespace.put_many([_dir(f"/data/d{i:02d}") for i in range(40)])
        await namespace.put_many(
            [_file(f"/data/d{i:02d}/{j}") for i in range(40) for j in range(3)]
        )
        walk = namespace.walk_files("/data", with_ids=False, parallel=2)
        await anext(walk)
        for _ in range(20):
            await asyncio.sleep(0)  # the readers fill the queue meanwhile
        await asyncio.wait_for(walk.aclose(), 2)

    asyncio.run(scenario())
