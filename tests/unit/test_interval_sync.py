"""The leader's interval sync (`IntervalSync`) on an in-process memory:// store and a
file:// under-store (no sockets): a pass writes only what changed, counts what it found
(added, changed, removed, and the paths of the first two, bounded) into the mount's
record, and a mount is due an interval after it was made or last synced."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, Mount, MountOptions
from reservoir.master import tree_load
from reservoir.master.service import MasterService

HOUR = MountOptions(metadata_sync="interval:1h")


def _master(**settings: Any) -> MasterService:
    config = MasterConfig(metadata_url="memory://", allowed_schemes="file", **settings)
    return MasterService(MemoryMetadataStore(), config)


def _write(root: Path, key: str, data: bytes) -> None:
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(data)


async def _files(master: MasterService) -> dict[str, Inode]:
    found: dict[str, Inode] = {}
    async for page in master.namespace.walk("/m"):
        found.update((i.path, i) for i in page if not i.is_dir)
    return found


@pytest.mark.parametrize(
    ("flush_entries", "list_bound", "parallelism"),
    # Level by level (a small tree); subtrees walked flat, their directories writing
    # entries (2 at a time) before they are complete; the mount's own entries too many
    # to list in one go (3), so it is walked flat from its root.
    [(10_000, 10_000, 8), (2, 10_000, 1), (10_000, 3, 8)],
)
def test_a_sync_writes_only_what_changed_and_records_what_it_found(
    tmp_path: Path,
    flush_entries: int,
    list_bound: int,
    parallelism: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tree_load, "_FLUSH_ENTRIES", flush_entries)
    root = tmp_path / "ufs"
    keys = ["a.bin", "b.bin", "d/c.bin", "d/e.bin", "d/f.bin", "g/h.bin"]
    for key in keys:
        _write(root, key, key.encode())

    async def scenario() -> None:
        master = _master(
            metadata_list_max_entries=list_bound, metadata_load_parallelism=parallelism
        )
        mount = await master.mount("/m", f"file://{root}/", HOUR)
        first = await master.interval_sync.sync_mount(mount, baseline=True)
        assert (first.added, first.changed, first.removed, first.error) == (6, 0, 0, "")
        assert first.baseline
        before = await _files(master)

        _write(root, "d/new.bin", b"new")
        _write(root, "a.bin", b"a.bin, now longer")
        os.remove(root / "b.bin")
        second = await master.interval_sync.sync_mount(mount)
        assert (second.added, second.changed, second.removed) == (1, 1, 1)
        assert sorted(second.found) == ["/m/a.bin", "/m/d/new.bin"]
        assert not second.more_found and not second.baseline
        after = await _files(master)
        assert set(after) == {"/m/a.bin", "/m/d/c.bin", "/m/d/e.bin", "/m/d/f.bin"} | {
            "/m/g/h.bin",
            "/m/d/new.bin",
        }
        assert after["/m/a.bin"].size == len(b"a.bin, now longer")
        assert after["/m/a.bin"].file_id != before["/m/a.bin"].file_id
        # Unchanged files were not written again: they keep the first pass's check time.
        for path in ("/m/d/c.bin", "/m/d/e.bin", "/m/g/h.bin"):
            assert after[path] == before[path], path

        third = await master.interval_sync.sync_mount(mount)
        assert (third.added, third.changed, third.removed, third.found) == (0, 0, 0, [])
        assert await _files(master) == after
        # The record is in etcd, for any master to read.
        assert await master.interval_sync.records.get("/m") == third
        assert await master.interval_sync.last_sync("/m") == third

    asyncio.run(scenario())


def test_the_found_paths_are_bounded_and_the_record_says_there_were_more(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ufs"
    _write(root, "seed.bin", b"x")

    async def scenario() -> None:
        master = _master(sync_found_max=2)
        mount = await master.mount("/m", f"file://{root}/", HOUR)
        await master.interval_sync.sync_mount(mount)
        for n in range(5):
            _write(root, f"n{n}.bin", b"y")
        record = await master.interval_sync.sync_mount(mount)
        assert record.added == 5 and len(record.found) == 2 and record.more_found

    asyncio.run(scenario())


def test_a_mount_is_synced_an_interval_after_it_was_made_then_after_its_last_sync(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ufs"
    _write(root, "f.bin", b"x")

    async def scenario() -> None:
        master = _master()
        fresh = await master.mount("/fresh", f"file://{root}/", HOUR)
        made = await master.mount("/old", f"file://{root}/", HOUR)
        # Made two hours ago (as etcd would have it after a restart).
        old = dataclasses.replace(made, created_ms=made.created_ms - 2 * 3_600_000)
        await master.mount_table.put(old)
        never = Mount("/never", f"file://{root}/", MountOptions(metadata_sync="never"), 1)
        await master.mount_table.put(never)

        await master.interval_sync.tick()
        await master.interval_sync.wait()
        record = await master.interval_sync.last_sync("/old")
        assert record is not None and record.baseline and record.added == 1
        assert await master.interval_sync.last_sync(fresh.path) is None
        assert await master.interval_sync.last_sync("/never") is None

        await master.interval_sync.tick()  # synced just now: not due for an hour
        await master.interval_sync.wait()
        assert await master.interval_sync.last_sync("/old") == record

        # Unmounted: its record goes too.
        await master.unmount("/old")
        assert await master.interval_sync.records.get("/old") is None

    asyncio.run(scenario())


def test_a_change_a_reader_found_between_passes_is_in_the_next_record(tmp_path: Path) -> None:
    root = tmp_path / "ufs"
    _write(root, "f.bin", b"x")

    async def scenario() -> None:
        master = _master()
        mount = await master.mount("/m", f"file://{root}/", HOUR)
        await master.interval_sync.sync_mount(mount)
        _write(root, "late.bin", b"late")
        # A reader asks for the file first (a refresh HEADs it and stores it): the next
        # pass finds nothing to write, yet its record tells of the new file.
        assert (await master.reads.file_info("/m/late.bin", refresh=True)).size == 4
        record = await master.interval_sync.sync_mount(mount)
        assert (record.added, record.changed, record.removed) == (1, 0, 0)
        assert record.found == ["/m/late.bin"]
        again = await master.interval_sync.sync_mount(mount)
        assert (again.added, again.found) == (0, [])

    asyncio.run(scenario())


def test_a_new_leader_continues_the_schedule_from_the_record_in_etcd(tmp_path: Path) -> None:
    root = tmp_path / "ufs"
    _write(root, "f.bin", b"x")

    async def scenario() -> None:
        store = MemoryMetadataStore()
        config = MasterConfig(metadata_url="memory://", allowed_schemes="file")
        first = MasterService(store, config)
        made = await first.mount("/m", f"file://{root}/", HOUR)
        due = dataclasses.replace(made, created_ms=made.created_ms - 2 * 3_600_000)
        await first.mount_table.put(due)
        await first.interval_sync.tick()
        await first.interval_sync.wait()
        record = await first.interval_sync.last_sync("/m")
        assert record is not None

        second = MasterService(store, config)  # the next leader, on the same etcd
        await second.start()
        await second.interval_sync.tick()  # the record says: synced just now
        await second.interval_sync.wait()
        assert await second.interval_sync.last_sync("/m") == record
        await second.close()
        await first.close()

    asyncio.run(scenario())


def test_passes_run_for_at_most_the_set_number_of_mounts_at_once(tmp_path: Path) -> None:
    root = tmp_path / "ufs"
    _write(root, "f.bin", b"x")

    async def scenario() -> None:
        master = _master(sync_mounts_at_once=1)
        for path in ("/a", "/b"):
            made = await master.mount(path, f"file://{root}/", HOUR)
            await master.mount_table.put(
                dataclasses.replace(made, created_ms=made.created_ms - 2 * 3_600_000)
            )
        await master.interval_sync.tick()
        await master.interval_sync.wait()
        synced = [p for p in ("/a", "/b") if await master.interval_sync.last_sync(p)]
        assert synced == ["/a"]
        await master.interval_sync.tick()  # /a is not due again; /b's turn
        await master.interval_sync.wait()
        assert await master.interval_sync.last_sync("/b") is not None

    asyncio.run(scenario())
