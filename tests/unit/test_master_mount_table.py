"""The master's mount table on the in-process memory:// store."""

from __future__ import annotations

import asyncio

import pytest

from reservoir.common.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Mount, MountOptions
from reservoir.master.mount_policy import MountPolicy
from reservoir.master.mount_table import MountTable

MiB = 1 << 20


def _table(store: MemoryMetadataStore | None = None) -> MountTable:
    return MountTable(store or MemoryMetadataStore(), MountPolicy("s3"), 4 * MiB)


def test_a_new_mount_records_the_effective_block_size_and_survives_a_reload() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        table = _table(store)
        path, options = table.admit("/data/", "s3://b/p/", MountOptions())
        assert (path, options.block_size) == ("/data", 4 * MiB)
        await table.put(Mount(path, "s3://b/p/", options))
        again = _table(store)
        await again.load()
        assert [m.options.block_size for m in again.mounts()] == [4 * MiB]

    asyncio.run(scenario())


def test_overlapping_and_repeated_mounts_are_refused_unless_replacing() -> None:
    async def scenario() -> None:
        table = _table()
        await table.put(Mount("/a", "s3://b/a/"))
        with pytest.raises(AlreadyExists):
            table.check_place("/a", replace=False)
        assert table.check_place("/a", replace=True) is not None
        for nested in ("/a/b", "/"):
            with pytest.raises(InvalidArgument):
                table.check_place(nested, replace=False)
        assert table.check_place("/ab", replace=False) is None

    asyncio.run(scenario())


def test_the_same_mount_again_is_found_as_already_there_and_anything_else_is_not() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        table = _table(store)
        path, options = table.admit("/a/", "s3://b/a/", MountOptions(endpoint_url="http://s3"))
        await table.put(Mount(path, "s3://b/a/", options, created_ms=1))
        reloaded = _table(store)  # as a restarted master sees it: read back from the store
        await reloaded.load()
        for t in (table, reloaded):
            # Asked the same way: the block size left to the default, the path unnormalised.
            at, same_options = t.admit("/a", "s3://b/a/", MountOptions(endpoint_url="http://s3"))
            same = t.already(at, "s3://b/a/", same_options)
            assert same is not None and same.created_ms == 1
            assert t.already("/a", "s3://b/other/", same_options) is None
            assert t.already("/b", "s3://b/a/", same_options) is None
            for different in (
                MountOptions(endpoint_url="http://elsewhere"),
                MountOptions(endpoint_url="http://s3", block_size=MiB),
                MountOptions(endpoint_url="http://s3", metadata_sync="never"),
            ):
                _, options = t.admit("/a", "s3://b/a/", different)
                assert t.already("/a", "s3://b/a/", options) is None
            with pytest.raises(AlreadyExists, match="replace"):
                t.check_place("/a", replace=False)

    asyncio.run(scenario())


def test_a_path_belongs_to_its_deepest_mount_and_mounts_appear_as_directories() -> None:
    async def scenario() -> None:
        table = _table()
        await table.put(Mount("/d/x", "s3://b/x/"))
        await table.put(Mount("/d/y/z", "s3://b/z/"))
        mount = table.mount_for("/d/x/file")
        assert mount is not None and mount.path == "/d/x"
        assert table.mount_for("/d/other") is None
        assert table.children_of("/d") == {"x", "y"}
        await table.remove("/d/x")
        with pytest.raises(NotFound):
            await table.remove("/d/x")

    asyncio.run(scenario())


def test_mount_on_root_or_a_refused_scheme_is_refused_before_anything_is_contacted() -> None:
    table = _table()
    with pytest.raises(InvalidArgument):
        table.admit("/", "s3://b/", MountOptions())
    with pytest.raises(PermissionDenied):
        table.admit("/etc", "file:///etc", MountOptions())


def test_only_a_scheme_registered_as_writable_can_be_mounted_writable() -> None:
    table = MountTable(
        MemoryMetadataStore(), MountPolicy("s3,file,http", resolve=lambda host: []), 4 * MiB
    )
    table.admit("/w", "s3://b/p/", MountOptions(writable=True))
    table.admit("/f", "file:///tmp/x/", MountOptions(writable=True))
    with pytest.raises(
        InvalidArgument,
        match=r"a http:// mount cannot be writable \(the stores that write: abfs://, abfss://, "
        r"az://, file://, gs://, hdfs://, s3://, webhdfs://",
    ):
        table.admit("/w", "http://mirror/data/", MountOptions(writable=True))
    table.admit("/r", "http://mirror/data/", MountOptions())
