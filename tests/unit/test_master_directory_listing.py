"""The master's first touch of a directory, on an in-process memory:// store and file://
under-stores (no sockets): one listing, shared by every reader that misses there at once,
answers them all; a HEAD only where a listing does not pay, one for every reader that
misses the path at once, answered before its inode is stored."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from reservoir.common.config import MasterConfig
from reservoir.common.errors import NotFound
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import MountOptions
from reservoir.common.understore.local_under_store import LocalUnderStore
from reservoir.master import metadata_sync
from reservoir.master.service import MasterService

HOUR = MountOptions(metadata_sync="interval:1h")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """What the master asked the file:// under-store, by kind (the real store answers)."""
    counts: Counter[str] = Counter()

    def counted(kind: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: LocalUnderStore, *args: Any) -> Any:
            counts[kind] += 1
            return real(self, *args)

        return call

    monkeypatch.setattr(LocalUnderStore, "list", counted("LIST", LocalUnderStore.list))
    monkeypatch.setattr(LocalUnderStore, "head", counted("HEAD", LocalUnderStore.head))
    return counts


def _master(**settings: Any) -> MasterService:
    config = MasterConfig(metadata_url="memory://", allowed_schemes="s3,file", **settings)
    return MasterService(MemoryMetadataStore(), config)


async def _bounded(uri: str, store: MemoryMetadataStore | None = None) -> MasterService:
    """A master whose listings stop at 3 entries, with `uri` mounted at /m."""
    config = MasterConfig(
        metadata_url="memory://", allowed_schemes="s3,file", metadata_list_max_entries=3
    )
    master = MasterService(store or MemoryMetadataStore(), config)
    await master.mount("/m", uri, HOUR)
    return master


_TEN = [f"d/f{i:02d}.bin" for i in range(10)]


def _tree(tmp_path: Path, files: list[str]) -> str:
    root = tmp_path / "ufs"
    for key in files:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(key.encode())
    return f"file://{root}/"


async def _stat_all(master: MasterService, many: list[str]) -> list[Any]:
    async def one(path: str) -> Any:
        try:
            return await master.reads.file_info(path)
        except NotFound as exc:
            return exc

    return await asyncio.gather(*(one(p) for p in many))


def test_sixteen_concurrent_misses_in_an_unlisted_directory_cause_one_listing_and_no_head(
    tmp_path: Path, calls: Counter[str]
) -> None:
    names = [f"d/f{i:02d}.bin" for i in range(16)]
    uri = _tree(tmp_path, [*names, "d/sub/deep.bin", "other/x.bin"])

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, HOUR)
        calls.clear()
        found = await _stat_all(master, [f"/m/{n}" for n in names] + ["/m/d/absent.bin"])
        assert [i.size for i in found[:16]] == [len(n) for n in names]
        assert isinstance(found[16], NotFound)
        assert calls == {"LIST": 1}
        # Afterwards every answer about the directory comes from the store.
        assert (await master.reads.file_info("/m/d/sub")).is_dir
        assert (await master.reads.file_info("/m/d/f03.bin")).size == len("d/f03.bin")
        with pytest.raises(NotFound):
            await master.reads.file_info("/m/d/absent.bin")
        assert calls == {"LIST": 1}
        # Another directory is its own first touch.
        assert (await master.reads.file_info("/m/other/x.bin")).size == len("other/x.bin")
        assert calls == {"LIST": 2}

    asyncio.run(scenario())


def test_a_file_created_after_the_listing_appears_once_the_sync_interval_has_passed(
    tmp_path: Path, calls: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = _tree(tmp_path, ["d/old.bin"])

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, HOUR)
        await master.reads.file_info("/m/d/old.bin")
        (tmp_path / "ufs" / "d" / "new.bin").write_bytes(b"new")
        with pytest.raises(NotFound):  # the listing is trusted for an hour
            await master.reads.file_info("/m/d/new.bin")
        lists = calls["LIST"]
        later = metadata_sync.now_ms() + 2 * 3600 * 1000
        monkeypatch.setattr(metadata_sync, "now_ms", lambda: later)
        assert (await master.reads.file_info("/m/d/new.bin")).size == 3
        assert calls["LIST"] == lists + 1 and calls["HEAD"] == 0

    asyncio.run(scenario())


def test_a_directory_past_the_listing_bound_answers_the_rest_with_a_head_each(
    tmp_path: Path, calls: Counter[str]
) -> None:
    names = _TEN
    uri = _tree(tmp_path, names)

    async def scenario() -> None:
        master = await _bounded(uri)
        calls.clear()
        # f00..f02 are in the bounded listing; f09 is not, so it costs a HEAD.
        found = await _stat_all(master, ["/m/d/f00.bin", "/m/d/f09.bin", "/m/d/absent.bin"])
        assert [getattr(i, "size", None) for i in found[:2]] == [len(names[0]), len(names[9])]
        assert isinstance(found[2], NotFound)
        assert calls["LIST"] == 1 + 1  # the bounded listing; the absent path's directory probe
        heads = calls["HEAD"]
        assert heads == 2
        # The directory is remembered as too big: a further miss is a HEAD, not a listing.
        assert (await master.reads.file_info("/m/d/f05.bin")).size == len(names[5])
        assert calls["LIST"] == 2 and calls["HEAD"] == heads + 1
        # What the bounded listing saw is stored and trusted.
        assert (await master.reads.file_info("/m/d/f01.bin")).size == len(names[1])
        assert calls["HEAD"] == heads + 1

    asyncio.run(scenario())


def test_a_mount_that_always_syncs_checks_each_file_with_a_head_not_a_listing(
    tmp_path: Path, calls: Counter[str]
) -> None:
    uri = _tree(tmp_path, ["d/a.bin", "d/b.bin"])

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, MountOptions(metadata_sync="always"))
        calls.clear()
        await master.reads.file_info("/m/d/a.bin")
        await master.reads.file_info("/m/d/a.bin")
        assert calls == {"HEAD": 2}

    asyncio.run(scenario())


def test_a_failed_listing_reaches_every_waiting_reader_and_the_next_miss_lists_again(
    tmp_path: Path, calls: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = _tree(tmp_path, ["d/a.bin", "d/b.bin"])
    real = LocalUnderStore.list
    failing = [True]

    def flaky(self: LocalUnderStore, *args: Any) -> Any:
        if failing[0]:
            raise ConnectionError("the under-store is away")
        return real(self, *args)

    async def scenario() -> None:
        master = _master()
        await master.mount("/m", uri, HOUR)
        monkeypatch.setattr(LocalUnderStore, "list", flaky)
        results = await asyncio.gather(
            *(master.reads.file_info(f"/m/d/{n}.bin") for n in "ab"), return_exceptions=True
        )
        assert [type(r) for r in results] == [ConnectionError, ConnectionError]
        failing[0] = False
        assert (await master.reads.file_info("/m/d/b.bin")).size == len("d/b.bin")

    asyncio.run(scenario())


class _ListedMeanwhile(MemoryMetadataStore):
    """A real memory store on which the directory's listing lands right after the first
    lookup of one key (a stat's read of its chunk): the interleaving of a stat with
    another reader's listing."""

    def __init__(self) -> None:
        super().__init__()
        self.key = b""
        self.meanwhile: Callable[[], Any] | None = None

    async def first_in_ranges(
        self, ranges: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes] | None]:
        found = await super().first_in_ranges(ranges)
        if any(start == self.key for start, _ in ranges) and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()
        return found


def test_a_stat_that_races_the_storing_of_its_directory_listing_finds_the_file(
    tmp_path: Path,
) -> None:

    uri = _tree(tmp_path, ["f.bin", "g.bin"])

    async def scenario() -> None:
        store = _ListedMeanwhile()
        config = MasterConfig(metadata_url="memory://", allowed_schemes="s3,file")
        master = MasterService(store, config)
        mount = await master.mount("/m", uri, HOUR)
        store.key = keyspace.namespace_group("/m", "/m") + b"f.bin"
        store.meanwhile = lambda: master.sync.sync_directory(mount, "/m")
        assert (await master.reads.file_info("/m/f.bin")).size == len("f.bin")

    asyncio.run(scenario())


def test_concurrent_misses_of_one_file_in_a_directory_too_big_to_list_cause_one_head(
    tmp_path: Path, calls: Counter[str]
) -> None:
    names = _TEN
    uri = _tree(tmp_path, names)

    async def scenario() -> None:
        master = await _bounded(uri)
        await master.reads.file_info("/m/d/f00.bin")  # lists, and finds it too big
        calls.clear()
        found = await _stat_all(master, ["/m/d/f09.bin"] * 16)
        assert [i.size for i in found] == [len(names[9])] * 16
        assert calls == {"HEAD": 1}
        await asyncio.sleep(0)  # the flight's inode stored
        assert (await master.reads.file_info("/m/d/f09.bin")).size == len(names[9])
        assert calls == {"HEAD": 1}

    asyncio.run(scenario())


class _HeldWrites(MemoryMetadataStore):
    """A real memory store whose writes wait while `held` is clear: a slow etcd."""

    def __init__(self) -> None:
        super().__init__()
        self.held: asyncio.Event | None = None

    async def put_many(self, items: Sequence[tuple[bytes, bytes]], lease: Any = None) -> None:
        if self.held is not None:
            await self.held.wait()
        await super().put_many(items, lease)


def test_a_head_answers_its_readers_before_the_inode_is_stored_and_a_reader_meanwhile_joins_it(
    tmp_path: Path, calls: Counter[str]
) -> None:
    names = _TEN
    uri = _tree(tmp_path, names)

    async def scenario() -> None:
        store = _HeldWrites()
        master = await _bounded(uri, store)
        await master.reads.file_info("/m/d/f00.bin")
        await asyncio.sleep(0.05)  # the bounded listing stored
        calls.clear()
        store.held = asyncio.Event()
        first = await asyncio.wait_for(master.reads.file_info("/m/d/f09.bin"), timeout=5)
        assert first.size == len(names[9])  # answered while its write waits
        again = await asyncio.wait_for(master.reads.file_info("/m/d/f09.bin"), timeout=5)
        assert again == first and calls == {"HEAD": 1}  # the flight, not a second HEAD
        store.held.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if await master.namespace.get("/m/d/f09.bin") is not None:
                break
        assert await master.namespace.get("/m/d/f09.bin") == first
        assert (await master.reads.file_info("/m/d/f09.bin")) == first
        assert calls == {"HEAD": 1}

    asyncio.run(scenario())
