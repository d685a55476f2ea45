"""A recursive metadata load derives the directories from a flat, ordered listing of keys
(`TreeLoad`), on an in-process memory:// store and a file:// under-store (no sockets):
every object stored once, directories right and marked listed, progress as it goes, a
second load idempotent, vanished objects and directories removed."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, MountOptions
from reservoir.common.understore.local_under_store import LocalUnderStore
from reservoir.common.understore.under_store import ObjectInfo
from reservoir.master import tree_load
from reservoir.master.service import MasterService

HOUR = MountOptions(metadata_sync="interval:1h")

# Names whose keys interleave in a flat listing: "a/b-x" sorts before the keys of "a/b/",
# "a/b0" after them, so directory a's own files come on both sides of its subdirectory.
KEYS = [
    "top.bin",
    "a/b-x",
    "a/b/1.bin",
    "a/b/2.bin",
    "a/b/c/d/deep.bin",
    "a/b0",
    "a/z.bin",
    "e/f.bin",
    *(f"wide/w{i:02d}/x{j}.bin" for i in range(12) for j in range(3)),
    "empty-parent/only/leaf.bin",
]


def _master(**settings: Any) -> MasterService:
    config = MasterConfig(metadata_url="memory://", allowed_schemes="file", **settings)
    return MasterService(MemoryMetadataStore(), config)


def _tree(root: Path, keys: list[str]) -> str:
    for key in keys:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(key.encode())
    return f"file://{root}/"


def _expected(keys: list[str]) -> tuple[set[str], set[str]]:
    """Files and directories (mount-relative paths under /m) that `keys` make."""
    files = {f"/m/{k}" for k in keys}
    dirs = set()
    for key in keys:
        parts = key.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            dirs.add("/m/" + "/".join(parts[:depth]))
    return files, dirs


async def _stored(master: MasterService) -> dict[str, Inode]:
    found: dict[str, Inode] = {}
    async for page in master.namespace.walk("/m"):
        for inode in page:
            assert inode.path not in found, f"{inode.path} stored twice"
            found[inode.path] = inode
    return found


async def _load(master: MasterService) -> list[tuple[int, int, int, bool]]:
    return [p async for p in master.reads.load_metadata("/m", recursive=True)]


@pytest.mark.parametrize(
    ("parallelism", "list_bound"),
    # 3: the mount's own 5 entries are too many to list: it is walked whole, from its root.
    [(1, 10_000), (4, 10_000), (8, 10_000), (4, 3)],
)
def test_every_object_is_stored_once_with_its_directories_marked_listed(
    tmp_path: Path, parallelism: int, list_bound: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tiny flush bound: the 12-entry directory writes entries before it is complete.
    monkeypatch.setattr(tree_load, "_FLUSH_ENTRIES", 5)
    uri = _tree(tmp_path / "ufs", KEYS)
    files, dirs = _expected(KEYS)

    async def scenario() -> None:
        master = _master(
            metadata_load_parallelism=parallelism, metadata_list_max_entries=list_bound
        )
        await master.mount("/m", uri, HOUR)
        progress = await _load(master)
        stored = await _stored(master)
        assert {p for p, i in stored.items() if not i.is_dir} == files
        assert {p for p, i in stored.items() if i.is_dir} == dirs
        for path in files:
            assert stored[path].size == len(path.removeprefix("/m/"))
        # Every directory's children are the truth: a stat of a missing name in any of
        # them is answered from etcd, and the whole tree is marked as loaded.
        for path in dirs:
            assert stored[path].listed_ms > 0, path
        assert await master.reads.tree_is_fresh("/m")
        # Progress: running counts that never go back, then the totals, done.
        entries = len(files) + len(dirs)
        assert progress[-1] == (entries, entries, 0, True)
        assert all(not done for *_, done in progress[:-1]) and len(progress) > 1
        for before, after in zip(progress, progress[1:], strict=False):
            assert all(a >= b for a, b in zip(after[:3], before[:3], strict=True))

    asyncio.run(scenario())


@pytest.mark.parametrize("list_bound", [10_000, 3])
def test_a_second_load_writes_nothing_and_removes_what_vanished(
    tmp_path: Path, list_bound: int
) -> None:
    root = tmp_path / "ufs"
    uri = _tree(root, KEYS)

    async def scenario() -> None:
        master = _master(metadata_load_parallelism=2, metadata_list_max_entries=list_bound)
        await master.mount("/m", uri, HOUR)
        await _load(master)
        first = await _stored(master)
        again = await _load(master)
        assert again[-1][1:] == (0, 0, True)  # nothing written, nothing removed
        second = await _stored(master)
        assert second.keys() == first.keys()
        for path, inode in first.items():
            assert second[path].file_id == inode.file_id
        (root / "a" / "b0").unlink()
        shutil.rmtree(root / "a" / "b" / "c")
        (root / "wide" / "w03" / "new.bin").write_bytes(b"new")
        last = await _load(master)
        assert last[-1][1:3] == (1, 2)  # new.bin written; a/b0 and a/b/c gone
        after = await _stored(master)
        assert "/m/a/b0" not in after and "/m/a/b/c" not in after
        assert "/m/a/b/c/d/deep.bin" not in after and "/m/a/b/c/d" not in after
        assert after["/m/wide/w03/new.bin"].size == 3

    asyncio.run(scenario())


def test_a_store_listing_keys_out_of_order_is_loaded_level_by_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_order = LocalUnderStore.walk

    def shuffled(self: LocalUnderStore, prefix: str) -> Iterator[list[ObjectInfo]]:
        for page in in_order(self, prefix):
            yield page[::-1]

    monkeypatch.setattr(LocalUnderStore, "walk", shuffled)
    uri = _tree(tmp_path / "ufs", KEYS)
    files, dirs = _expected(KEYS)

    async def scenario() -> None:
        master = _master(metadata_load_parallelism=2)
        await master.mount("/m", uri, HOUR)
        progress = await _load(master)
        stored = await _stored(master)
        assert set(stored) == files | dirs
        assert progress[-1][0] == len(files) + len(dirs) and progress[-1][3]

    asyncio.run(scenario())


def test_report_of_a_loaded_tree_counts_every_file_once(tmp_path: Path) -> None:
    uri = _tree(tmp_path / "ufs", KEYS)
    files, _ = _expected(KEYS)

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, HOUR)
        await _load(master)
        # Directories are read several at a time: each file still counts once.
        report = await master.reads.report("/m")
        assert report["files"] == len(files)
        assert report["bytes"] == sum(len(k) for k in KEYS)
        assert (await master.reads.report("/m/wide"))["files"] == 36

    asyncio.run(scenario())
