"""Running one load job: the path (or the files a reader named below it) expanded into
blocks a page of files at a time, each block sent to its home workers (the same
rendezvous order readers use; the next workers for extra replicas), and a block counted
done only when the worker confirms it holds it."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Protocol

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotFound, ReservoirError
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.placement import Placement, block_key, placement_of

from .job_counters import FAILED, LOADED, LoadJobCounters
from .job_records import Job, JobRecords
from .locations import BlockLocationTable

log = logs.get_logger(__name__)

# Files a job places and loads per round, at least (a round waits for its last block).
_PAGE_FILES = 4096


class Namespace(Protocol):
    """What a load job needs of the master's namespace."""

    async def load_all_metadata(self, path: str) -> None: ...

    async def file_info(self, path: str, with_locations: bool = False) -> Inode: ...

    async def file_infos(
        self, many: list[str], with_locations: bool = False
    ) -> list[Inode | ReservoirError]: ...

    def subtree(self, path: str) -> AsyncIterator[list[Inode]]:
        """Every stored inode below `path`, a page at a time."""
        ...


class Membership(Protocol):
    """The workers registered now (the master's membership)."""

    async def workers(self) -> list[WorkerRecord]: ...


class BlockLoader(Protocol):
    """Drives workers to fetch blocks (see common/worker_calls.py)."""

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        """Per entry: None when the worker holds the block afterwards, else the error."""
        ...


class JobRun:
    """Runs jobs: `run(job)` loads what the job names, updating its record as it goes."""

    def __init__(
        self,
        records: JobRecords,
        config: MasterConfig,
        namespace: Namespace,
        membership: Membership,
        loader: BlockLoader,
        locations: BlockLocationTable,
        counters: LoadJobCounters,
    ) -> None:
        self._records = records
        self._config = config
        self._namespace = namespace
        self._membership = membership
        self._loader = loader
        self._locations = locations
        self._counters = counters

    async def run(self, job: Job) -> None:
        async with self._records.running(job):
            if not job.files:
                await self._namespace.load_all_metadata(job.path)
            homes = None if job.metadata_only else await self._homes(job)
            # A page of files at a time, loaded as it comes: a job over millions of files
            # starts at once, and the master never holds its whole file list. The totals
            # grow with the pages (they are whole when the last page is in).
            async for files in self._file_pages(job):
                job.total_files += len(files)
                job.total_bytes += sum(f.size for f in files) * job.replicas
                job.total_blocks += sum(f.block_count for f in files) * job.replicas
                await self._records.save(job)  # what a watcher sees before the page's blocks land
                if homes is not None:
                    await self._load(job, files, *homes)
            job.state = "failed" if job.failed_blocks else "completed"

    async def _file_pages(self, job: Job) -> AsyncIterator[list[Inode]]:
        """The job's files a page at a time: its named files; or the files below its
        path, those below its priority paths first, each page in path order."""
        if job.files:
            yield await self._named(job)
            return
        info = await self._namespace.file_info(job.path)
        if not info.is_dir:
            yield [info]
            return
        tops: list[str] = []
        for top in job.priority_paths:
            if paths.is_within(top, info.path) and not any(paths.is_within(top, t) for t in tops):
                tops.append(top)
        for top in tops:
            try:
                first = await self._namespace.file_info(top)
            except NotFound:
                continue
            if not first.is_dir:
                yield [first]
                continue
            async for files in self._files_below(top, []):
                yield files
        async for files in self._files_below(info.path, tops):
            yield files

    async def _files_below(self, top: str, skip: list[str]) -> AsyncIterator[list[Inode]]:
        """The files below `top` (but those below `skip`), in runs of at least
        _PAGE_FILES: each run is one round of loads, so many small directories do not
        each wait on their own round."""
        files: list[Inode] = []
        async for page in self._namespace.subtree(top):
            files.extend(
                i
                for i in page
                if not i.is_dir and not any(paths.is_within(i.path, s) for s in skip)
            )
            if len(files) >= _PAGE_FILES:
                yield sorted(files, key=lambda f: f.path)
                files = []
        if files:
            yield sorted(files, key=lambda f: f.path)

    async def _named(self, job: Job) -> list[Inode]:
        """The job's named files, in its order; one that is gone or a directory is an
        error of the job (the others are still loaded)."""
        found: list[Inode] = []
        answers = await self._namespace.file_infos(job.files)
        for path, answer in zip(job.files, answers, strict=True):
            if isinstance(answer, ReservoirError):
                job.fail(f"{path}: {answer}")
            elif answer.is_dir:
                job.fail(f"{path}: is a directory (a job names files, or loads a directory)")
            else:
                found.append(answer)
        return found

    async def _homes(self, job: Job) -> tuple[dict[str, WorkerRecord], Placement]:
        """The live workers by id and the placement over them, for the whole job."""
        workers = await self._membership.workers()
        serving = sum(w.serving for w in workers)
        if serving < job.replicas:
            raise InvalidArgument(f"{job.replicas} replicas asked, {serving} workers serving")
        by_id = {w.id: w for w in workers}
        return by_id, placement_of(workers)

    async def _load(
        self, job: Job, files: list[Inode], by_id: dict[str, WorkerRecord], table: Placement
    ) -> None:
        def priority(inode: Inode) -> int:
            return 0 if any(paths.is_within(inode.path, p) for p in job.priority_paths) else 1

        queues: dict[str, list[tuple[Inode, int]]] = defaultdict(list)
        # Stable: the files' own order (by path, or as a reader named them) within each.
        for inode in sorted(files, key=priority):
            for index in range(inode.block_count):
                for worker_id in table.homes(block_key(inode.file_id, index), job.replicas):
                    queues[worker_id].append((inode, index))

        async def drain(worker_id: str) -> None:
            queue = queues[worker_id]
            size = self._config.load_batch_blocks
            while queue:
                batch, queue[:] = queue[:size], queue[size:]
                try:
                    outcomes = await self._loader.load_blocks(by_id[worker_id], batch)
                except ReservoirError as exc:
                    outcomes = [exc] * len(batch)
                for (inode, index), outcome in zip(batch, outcomes, strict=True):
                    length = inode.block_length(index)
                    if outcome is None:
                        # Recorded now, not when the worker's report arrives: a job
                        # that ends has its blocks in the table (`load --wait`, then
                        # `report`, is exact).
                        self._locations.record(worker_id, inode.file_id, index)
                        job.done_blocks += 1
                        job.done_bytes += length
                        self._counters.count(LOADED, length)
                    else:
                        job.fail(f"{inode.path} block {index} on {worker_id}: {outcome}")
                        self._counters.count(FAILED, length)

        await asyncio.gather(
            *(
                drain(worker_id)
                for worker_id in queues
                for _ in range(self._config.load_calls_per_worker)
            )
        )
