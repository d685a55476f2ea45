"""The leader's count of files and directories (master/namespace_counts.py), on an
in-process memory:// store: a count from scratch and the count kept through writes agree
with what the namespace holds, whatever was written while the count was under way."""

from __future__ import annotations

import asyncio

from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.master.namespace_store import NamespaceStore
from tests.unit.test_master_namespace_store import MOUNT, _dir, _file, _namespace


async def _held(namespace: NamespaceStore) -> tuple[int, int]:
    """(files, directories) found by walking the whole mount, its own directory included."""
    files = directories = 0
    async for page in namespace.walk(MOUNT.path):
        for inode in page:
            directories += inode.is_dir
            files += not inode.is_dir
    return files, directories + 1


def test_a_count_from_scratch_and_the_count_kept_through_writes_agree_with_the_namespace() -> None:
    async def run() -> None:
        store = MemoryMetadataStore()
        namespace = await _namespace(store)
        await namespace.put(_dir(MOUNT.path))
        await namespace.put_many([_dir(f"/data/d{d}") for d in range(3)])
        await namespace.put_many([_file(f"/data/d{d}/f{i}") for d in range(3) for i in range(300)])
        assert namespace.counts.totals() is None  # nothing counted yet: no totals
        await namespace.count()
        assert namespace.counts.totals() == await _held(namespace) == (900, 4)
        # Kept through writes: new files, a file replaced, files and a subtree removed.
        await namespace.put_many([_file(f"/data/d0/new{i}") for i in range(5)])
        await namespace.put(_file("/data/d1/f0", size=5))
        await namespace.delete_many(["/data/d2/f0", "/data/d2/f1", "/data/d2/missing"])
        await namespace.delete_subtree("/data/d1")
        await namespace.delete("/data/d1")
        assert namespace.counts.totals() == await _held(namespace) == (603, 3)
        # Counted again by another master, the same.
        again = NamespaceStore(store, namespace._mounts)
        await again.count()
        assert again.counts.totals() == namespace.counts.totals()
        await namespace.delete_mount(MOUNT.path)
        assert namespace.counts.totals() == (0, 0)

    asyncio.run(run())


def test_writes_while_the_count_runs_are_counted_once() -> None:
    async def run() -> None:
        store = MemoryMetadataStore()
        namespace = await _namespace(store)
        await namespace.put(_dir(MOUNT.path))
        directories = [f"/data/d{d:02d}" for d in range(20)]
        await namespace.put_many([_dir(d) for d in directories])
        await namespace.put_many([_file(f"{d}/f{i}") for d in directories for i in range(50)])
        counting = asyncio.create_task(namespace.count())
        for round_ in range(20):  # each write lands before, during or after the count
            await namespace.put_many([_file(f"{d}/late{round_}") for d in directories[::3]])
            await asyncio.sleep(0)
        await counting
        assert namespace.counts.totals() == await _held(namespace)

    asyncio.run(run())
