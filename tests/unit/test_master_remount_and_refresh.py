"""MasterService on an in-process memory:// store and file:// under-stores (no sockets):
remounts swap safely; a refresh re-reads one file whatever the sync interval."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.errors import AlreadyExists, NotFound
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import MountOptions
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.master.service import MasterService

HOUR = MountOptions(metadata_sync="interval:1h")


def _master() -> MasterService:
    # file:// under-stores: the operator allows them here, as RESERVOIR_ALLOWED_SCHEMES would.
    config = MasterConfig(metadata_url="memory://", allowed_schemes="s3,file")
    return MasterService(MemoryMetadataStore(), config)


def _dir(tmp_path: Path, name: str, files: dict[str, bytes]) -> str:
    root = tmp_path / name
    root.mkdir()
    for key, data in files.items():
        (root / key).write_bytes(data)
    return f"file://{root}/"


def test_refresh_rereads_one_overwritten_file_despite_a_long_sync_interval(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        uri = _dir(tmp_path, "a", {"f.bin": b"old", "g.bin": b"other"})
        master = _master()
        await master.mount("/m", uri, HOUR)
        await master.reads.list_directory("/m")
        before = await master.reads.file_info("/m/f.bin")
        (tmp_path / "a" / "f.bin").write_bytes(b"newer bytes")
        os.utime(tmp_path / "a" / "f.bin", ns=(1, 10**18))  # a different mtime, surely
        assert await master.reads.file_info("/m/f.bin") == before  # trusted for an hour
        fresh = await master.reads.file_info("/m/f.bin", refresh=True)
        assert fresh.size == len(b"newer bytes") and fresh.file_id != before.file_id
        assert await master.reads.file_info("/m/f.bin") == fresh  # stored for everyone
        assert [i.path for i in await master.reads.list_directory("/m")] == ["/m/f.bin", "/m/g.bin"]
        (tmp_path / "a" / "f.bin").unlink()
        with pytest.raises(NotFound):
            await master.reads.file_info("/m/f.bin", refresh=True)

    asyncio.run(scenario())


def test_mounting_the_same_mount_again_is_a_no_op_that_keeps_its_namespace(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        uri = _dir(tmp_path, "a", {"f.bin": b"f"})
        master = _master()
        first = await master.mount("/m", uri, HOUR)
        assert [i.path for i in await master.reads.list_directory("/m")] == ["/m/f.bin"]
        (tmp_path / "a" / "g.bin").write_bytes(b"g")
        # The same URI (here without its slash) and options: the mount as it was...
        assert await master.mount("/m/", uri.rstrip("/"), HOUR) == first
        assert master.mounts() == [first]
        # ...its namespace untouched (a remount would have dropped it and listed g.bin).
        assert [i.path for i in await master.reads.list_directory("/m")] == ["/m/f.bin"]
        await master.mount("/m", uri, HOUR, replace=True)
        assert [i.path for i in await master.reads.list_directory("/m")] == ["/m/f.bin", "/m/g.bin"]

    asyncio.run(scenario())


def test_replace_swaps_the_mount_and_reads_its_namespace_afresh(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = _dir(tmp_path, "a", {"same.bin": b"from a", "only_a.bin": b"a"})
        second = _dir(tmp_path, "b", {"same.bin": b"from b, longer", "only_b.bin": b"b"})
        master = _master()
        await master.mount("/m", first, HOUR)
        assert [i.path for i in await master.reads.list_directory("/m")] == [
            "/m/only_a.bin",
            "/m/same.bin",
        ]
        with pytest.raises(AlreadyExists):
            await master.mount("/m", second, HOUR)
        with pytest.raises(NotFound):  # the new store is checked first...
            await master.mount("/m", f"file://{tmp_path}/missing/", HOUR, replace=True)
        assert [m.uri for m in master.mounts()] == [first]  # ...and the old mount stays
        mount = await master.mount("/m", second, MountOptions(block_size=8192), replace=True)
        assert master.mounts() == [mount]
        assert [i.path for i in await master.reads.list_directory("/m")] == [
            "/m/only_b.bin",
            "/m/same.bin",
        ]
        same = await master.reads.file_info("/m/same.bin")
        assert same.size == len(b"from b, longer") and same.block_size == 8192

    asyncio.run(scenario())


def test_what_a_file_was_written_with_outlives_a_listing_and_a_refresh_of_it(
    tmp_path: Path,
) -> None:
    """A listing does not say an object's content type or user metadata: the inode keeps
    what its write said while the object is the same, and drops it once it changed."""

    async def scenario() -> None:
        uri = _dir(tmp_path, "a", {"page.html": b"<html/>"})
        master = _master()
        await master.mount("/m", uri, MountOptions(metadata_sync="always"))
        listed = await master.reads.file_info("/m/page.html")
        written = ObjectMetadata.of({"team": "vision"}, content_type="text/html")
        await master.namespace.put(replace(listed, metadata=written))
        await master.reads.list_directory("/m")  # listed again: "always"
        assert (await master.reads.file_info("/m/page.html")).metadata == written
        refreshed = await master.reads.file_info("/m/page.html", refresh=True)
        assert refreshed.metadata == written
        (tmp_path / "a" / "page.html").write_bytes(b"<html>changed</html>")
        changed = await master.reads.file_info("/m/page.html", refresh=True)
        assert changed.etag != listed.etag and not changed.metadata

    asyncio.run(scenario())
