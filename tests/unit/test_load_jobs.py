"""Load jobs on the master, in process: what a watcher of a job sees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from reservoir.common.config import MasterConfig
from reservoir.common.errors import ReservoirError, Unavailable
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.models import Inode, WorkerRecord
from reservoir.master import job_run
from reservoir.master.job_counters import LoadJobCounters
from reservoir.master.jobs import TERMINAL, LoadJobs
from reservoir.master.locations import BlockLocationTable

_FILE = Inode("/d/f", is_dir=False, size=10, block_size=4, file_id="f1", mount_path="/d")
_DIR = Inode("/d", is_dir=True, mount_path="/d")


class _Namespace:
    async def load_all_metadata(self, path: str) -> None:
        return None

    async def file_info(self, path: str, with_locations: bool = False) -> Inode:
        return _DIR if path == "/d" else _FILE

    async def file_infos(
        self, many: list[str], with_locations: bool = False
    ) -> list[Inode | ReservoirError]:
        return [_FILE for _ in many]

    async def subtree(self, path: str) -> AsyncIterator[list[Inode]]:
        yield [_DIR]
        yield [_FILE]

    async def workers(self) -> list[WorkerRecord]:
        return [WorkerRecord("w1", "127.0.0.1:1")]


class _GatedLoader:
    """Holds every batch until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        await self.gate.wait()
        return [None] * len(blocks)


def _jobs(store: MemoryMetadataStore, loader: _GatedLoader) -> LoadJobs:
    """A master's load jobs over `store` (several share one: masters over one etcd)."""
    namespace = _Namespace()
    return LoadJobs(
        store,
        MasterConfig(),
        namespace,
        namespace,
        loader,
        BlockLocationTable(store),
        LoadJobCounters(CollectorRegistry()),
    )


def test_a_watch_ends_with_the_finished_job_even_when_it_finishes_between_two_yields() -> None:
    asyncio.run(_job_finishing_while_its_watcher_holds_a_snapshot())


async def _job_finishing_while_its_watcher_holds_a_snapshot() -> None:
    store = MemoryMetadataStore()
    loader = _GatedLoader()
    jobs = _jobs(store, loader)
    job = await jobs.submit("/d", replicas=1, priority_paths=[], metadata_only=False)
    watch = jobs.watch(job.id, poll_s=0.01)
    first = await anext(watch)
    assert first.state not in TERMINAL
    # The job ends while the watcher still holds its first snapshot.
    loader.gate.set()
    await asyncio.wait_for(jobs._tasks[job.id], timeout=10)
    assert (await jobs.get(job.id)).state in TERMINAL
    seen = [snapshot async for snapshot in watch]
    assert seen, "the watch ended without showing the job's end"
    assert seen[-1].state == "completed"
    assert seen[-1].done_blocks == 3


class _LastBlockFails:
    """Every block of a batch lands but the file's last one (index 2, 2 bytes)."""

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        return [Unavailable("S3 said 503") if index == 2 else None for _, index in blocks]


def test_load_job_counters_add_up_the_blocks_and_bytes_loaded_and_failed() -> None:
    registry = CollectorRegistry()

    async def run() -> None:
        store = MemoryMetadataStore()
        namespace = _Namespace()
        jobs = LoadJobs(
            store,
            MasterConfig(),
            namespace,
            namespace,
            _LastBlockFails(),
            BlockLocationTable(store),
            LoadJobCounters(registry),
        )
        for _ in range(2):  # counters add up over jobs; a job's record starts from 0
            job = await jobs.submit("/d", replicas=1, priority_paths=[], metadata_only=False)
            await asyncio.wait_for(jobs._tasks[job.id], timeout=10)
            assert (await jobs.get(job.id)).state == "failed"

    asyncio.run(run())

    def value(name: str, outcome: str) -> float | None:
        return registry.get_sample_value(name, {"outcome": outcome})

    # _FILE: 10 bytes in blocks of 4, 4 and 2.
    assert value("reservoir_master_load_job_blocks_total", "loaded") == 2 * 2
    assert value("reservoir_master_load_job_bytes_total", "loaded") == 2 * 8
    assert value("reservoir_master_load_job_blocks_total", "failed") == 2 * 1
    assert value("reservoir_master_load_job_bytes_total", "failed") == 2 * 2


class _EndlessTree(_Namespace):
    """A directory whose pages of files keep coming until the test has seen a load."""

    def __init__(self, loaded: asyncio.Event) -> None:
        self.loaded = loaded
        self.pages_read = 0

    async def subtree(self, path: str) -> AsyncIterator[list[Inode]]:
        for page in range(1000):
            if self.loaded.is_set():
                return
            self.pages_read += 1
            yield [
                Inode(f"/d/p{page}-{i}", False, size=4, block_size=4, file_id=f"{page}-{i}")
                for i in range(3)
            ]


class _SignallingLoader:
    def __init__(self, loaded: asyncio.Event) -> None:
        self.loaded = loaded

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        self.loaded.set()
        return [None] * len(blocks)


def test_a_job_loads_its_first_page_of_files_before_it_reads_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(job_run, "_PAGE_FILES", 3)  # a round is one page of 3 files

    async def run() -> None:
        store = MemoryMetadataStore()
        loaded = asyncio.Event()
        namespace = _EndlessTree(loaded)
        jobs = LoadJobs(
            store,
            MasterConfig(),
            namespace,
            namespace,
            _SignallingLoader(loaded),
            BlockLocationTable(store),
            LoadJobCounters(CollectorRegistry()),
        )
        job = await jobs.submit("/d", replicas=1, priority_paths=[], metadata_only=False)
        await asyncio.wait_for(jobs._tasks[job.id], timeout=10)
        done = await jobs.get(job.id)
        # The first page's blocks went out before the second page was asked for: a job
        # over millions of files starts at once and holds a page, not its file list.
        assert namespace.pages_read == 1
        assert (done.state, done.total_files, done.done_blocks) == ("completed", 3, 3)

    asyncio.run(run())


def test_a_submission_sent_again_with_its_request_id_gets_the_job_it_started() -> None:
    """A client retries SubmitLoad after a lost answer or a leader change with the same
    request: the master (this one, or the next one reading etcd) returns the same job and
    starts no second one."""

    async def scenario() -> None:
        store = MemoryMetadataStore()
        loader = _GatedLoader()

        first, next_leader = _jobs(store, loader), _jobs(store, loader)
        request_id = "0123456789abcdef0123456789abcdef"
        args = ("/d", 1, [], False)
        job = await first.submit(*args, request_id=request_id)
        assert job.id == request_id
        # Two retries at once, on this master and on the next one: one job all along.
        again, elsewhere = await asyncio.gather(
            first.submit(*args, request_id=request_id),
            next_leader.submit(*args, request_id=request_id),
        )
        assert again.id == elsewhere.id == job.id
        assert list(first._tasks) == [job.id] and not next_leader._tasks
        assert [j.id for j in await first.all()] == [job.id]
        with pytest.raises(ReservoirError, match="request_id"):
            await first.submit("/d", 1, [], False, request_id="not hex")
        with pytest.raises(ReservoirError, match="names a job of /d"):
            await first.submit("/e", 1, [], False, request_id=request_id)
        loader.gate.set()
        await first.close()

    asyncio.run(scenario())


def test_a_job_naming_files_takes_relative_names_below_its_path_and_refuses_escapes() -> None:
    """A mirror's manifest names its files from its root: `load /d --files-from` of
    `f` is /d/f; `..` is refused, never resolved out of the job's path."""

    async def scenario() -> None:
        jobs = _jobs(MemoryMetadataStore(), _GatedLoader())
        job = await jobs.submit("/d", 1, [], False, ["f", "/d/f", "sub/g"])
        assert job.files == ["/d/f", "/d/sub/g"]
        with pytest.raises(ReservoirError, match="path"):
            await jobs.submit("/d", 1, [], False, ["../e/f"])
        await jobs.close()

    asyncio.run(scenario())
