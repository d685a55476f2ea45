"""The master's paged directory listing, on an in-process memory:// store and file://
under-stores (no sockets): every entry once, in name order, across pages; tokens bound to
their directory; the store read a page at a time, never the whole directory."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotADirectory
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, MountOptions
from reservoir.common.understore.local_under_store import LocalUnderStore
from reservoir.master.directory_pages import DirectoryPage, page_token
from reservoir.master.service import MasterService

HOUR = MountOptions(metadata_sync="interval:1h")
PAGE = 7


class CountingStore(MemoryMetadataStore):
    """The memory store, recording the range reads of /m/d's chunks (its namespace group)."""

    GROUP = keyspace.namespace_group("/m", "/m/d")

    def __init__(self) -> None:
        super().__init__()
        self.range_limits: list[int] = []

    async def get_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        if start.startswith(self.GROUP):
            self.range_limits.append(limit)
        return await super().get_range(start, end, limit)


def _master(store: MemoryMetadataStore | None = None, **settings: Any) -> MasterService:
    config = MasterConfig(metadata_url="memory://", allowed_schemes="s3,file", **settings)
    return MasterService(store or MemoryMetadataStore(), config)


def _tree(tmp_path: Path, files: list[str]) -> str:
    root = tmp_path / "ufs"
    root.mkdir(exist_ok=True)
    for key in files:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(key.encode())
    return f"file://{root}/"


async def _all_pages(master: MasterService, path: str, size: int = PAGE) -> list[DirectoryPage]:
    pages = [await master.reads.directories.page(path, size)]
    while pages[-1].next_token:
        pages.append(await master.reads.directories.page(path, size, pages[-1].next_token))
    return pages


def _names(entries: list[Inode]) -> list[str]:
    return [e.path.rsplit("/", 1)[1] for e in entries]


@pytest.fixture
def lists(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often the master listed the file:// under-store (the real store answers)."""
    counts: Counter[str] = Counter()
    real: Callable[..., Any] = LocalUnderStore.list

    def counted(self: LocalUnderStore, *args: Any) -> Any:
        counts["LIST"] += 1
        return real(self, *args)

    monkeypatch.setattr(LocalUnderStore, "list", counted)
    return counts


def test_a_directory_larger_than_a_page_lists_every_entry_once_in_name_order(
    tmp_path: Path, lists: Counter[str]
) -> None:
    names = [f"f{i:02d}.bin" for i in range(50)] + ["sub/x.bin"]
    uri = _tree(tmp_path, [f"d/{n}" for n in names])

    async def scenario() -> None:
        store = CountingStore()
        master = _master(store)
        await master.mount("/m", uri, HOUR)
        lists.clear()
        pages = await _all_pages(master, "/m/d")
        assert [len(p.entries) for p in pages] == [PAGE] * 7 + [2]
        listed = [e for p in pages for e in p.entries]
        assert _names(listed) == sorted([f"f{i:02d}.bin" for i in range(50)] + ["sub"])
        assert listed[-1].is_dir and listed[0].size == len("d/f00.bin")
        # The under-store is listed once, for the first page (whose sync reads what the
        # store held); then every page is one read of the one chunk it needs (51 entries
        # fit one; the first page also looks the directory up), never a scan of it.
        assert lists["LIST"] == 1
        store.range_limits.clear()
        await _all_pages(master, "/m/d")
        assert set(store.range_limits) == {1} and 8 <= len(store.range_limits) <= 9
        # The whole listing, through the pages, says the same.
        assert _names(await master.reads.list_directory("/m/d")) == _names(listed)

    asyncio.run(scenario())


def test_above_every_mount_the_mount_points_are_the_entries_paged_in_name_order(
    tmp_path: Path,
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.bin").write_bytes(b"x")

    async def scenario() -> None:
        master = _master()
        for mount in ("/top/c", "/top/a", "/top/b/deeper", "/top/d", "/elsewhere"):
            await master.mount(mount, f"file://{other}/", HOUR)
        pages = await _all_pages(master, "/top", 2)
        assert [_names(p.entries) for p in pages] == [["a", "b"], ["c", "d"]]
        assert all(e.is_dir for p in pages for e in p.entries)
        assert _names((await master.reads.directories.page("/", 5)).entries) == ["elsewhere", "top"]

    asyncio.run(scenario())


def test_an_empty_directory_is_one_empty_last_page(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()

    async def scenario() -> None:
        master = _master()
        await master.mount("/e", f"file://{empty}/", HOUR)
        page = await master.reads.directories.page("/e", PAGE)
        assert page == DirectoryPage([], "")

    asyncio.run(scenario())


def test_a_token_of_another_directory_or_one_the_master_did_not_make_is_refused(
    tmp_path: Path,
) -> None:
    uri = _tree(tmp_path, [f"a/f{i:02d}" for i in range(10)] + [f"b/f{i:02d}" for i in range(10)])

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, HOUR)
        first = await master.reads.directories.page("/m/a", PAGE)
        assert first.next_token
        with pytest.raises(InvalidArgument, match="of a listing of /m/a, not of /m/b"):
            await master.reads.directories.page("/m/b", PAGE, first.next_token)
        for garbage in ("not base64!", "bm90IGpzb24=", page_token("/m/a", "")[:-4], "e30="):
            with pytest.raises(InvalidArgument, match="bad page token"):
                await master.reads.directories.page("/m/a", PAGE, garbage)
        # The good token still works after the refusals: tokens are not state.
        second = await master.reads.directories.page("/m/a", PAGE, first.next_token)
        assert _names(second.entries) == ["f07", "f08", "f09"] and not second.next_token

    asyncio.run(scenario())


def test_a_page_size_above_the_masters_most_or_below_zero_is_refused(tmp_path: Path) -> None:
    uri = _tree(tmp_path, ["d/f.bin", "d/g.bin", "d/h.bin"])

    async def scenario() -> None:
        master = _master(list_page_size=2, list_max_page_size=5)
        await master.mount("/m", uri, HOUR)
        with pytest.raises(InvalidArgument, match="RESERVOIR_LIST_MAX_PAGE_SIZE"):
            await master.reads.directories.page("/m/d", 6)
        with pytest.raises(InvalidArgument, match="negative"):
            await master.reads.directories.page("/m/d", -1)
        assert len((await master.reads.directories.page("/m/d", 5)).entries) == 3
        # 0: the master's own page size.
        assert len((await master.reads.directories.page("/m/d", 0)).entries) == 2
        with pytest.raises(NotADirectory):
            await master.reads.directories.page("/m/d/f.bin", 0)

    asyncio.run(scenario())


def test_entries_added_between_pages_neither_repeat_nor_hide_the_entries_already_there(
    tmp_path: Path,
) -> None:
    names = [f"f{i:02d}" for i in range(0, 40, 2)]  # even numbers: room for odd ones
    uri = _tree(tmp_path, [f"d/{n}" for n in names])

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, HOUR)
        first = await master.reads.directories.page("/m/d", PAGE)
        assert _names(first.entries) == names[:PAGE]
        # Files land in the under-store before and after the page already read, and a
        # metadata load stores them while the listing is half way.
        _tree(tmp_path, ["d/a-first", "d/f01", "d/f13", "d/f39"])
        async for _ in master.reads.load_metadata("/m/d", recursive=False):
            pass
        rest = await _all_pages_from(master, "/m/d", first.next_token)
        later = _names([e for p in rest for e in p.entries])
        assert later == sorted(names[PAGE:] + ["f13", "f39"])  # after the cursor: shown
        seen = _names(first.entries) + later
        assert len(seen) == len(set(seen))  # nothing twice
        assert set(names) <= set(seen)  # nothing that was there throughout is missed

    asyncio.run(scenario())


async def _all_pages_from(master: MasterService, path: str, token: str) -> list[DirectoryPage]:
    pages = [await master.reads.directories.page(path, PAGE, token)]
    while pages[-1].next_token:
        pages.append(await master.reads.directories.page(path, PAGE, pages[-1].next_token))
    return pages
