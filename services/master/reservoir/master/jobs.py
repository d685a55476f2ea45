"""Load jobs: put a data set into the cache before training starts.

A job record lives in etcd (state, totals, progress, an error sample), so a restarted
master resumes running jobs instead of losing them. The master expands the path (or the
files a reader named below it) into blocks, sends each block to its home workers (the
same rendezvous order readers use; the next workers for extra replicas) and counts a block
done only when the worker confirms it holds it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotFound, ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import Guard, MetadataStore
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.placement import Candidate, Placement, block_key, placement

from .job_counters import FAILED, LOADED, LoadJobCounters
from .locations import BlockLocationTable

log = logs.get_logger(__name__)

TERMINAL = ("completed", "failed", "cancelled")
MAX_ERRORS = 20
# Files a job places and loads per round, at least (a round waits for its last block).
_PAGE_FILES = 4096
_REQUEST_ID = re.compile(r"[0-9a-f]{16,32}")


@dataclass
class Job:
    id: str
    path: str
    state: str = "pending"
    replicas: int = 1
    priority_paths: list[str] = field(default_factory=list)
    metadata_only: bool = False
    total_files: int = 0
    total_blocks: int = 0
    total_bytes: int = 0
    done_blocks: int = 0
    done_bytes: int = 0
    failed_blocks: int = 0
    errors: list[str] = field(default_factory=list)
    created_ms: int = 0
    updated_ms: int = 0
    attempts: int = 0
    # Only these files, in this order (a reader's list of what it is about to read);
    # empty: every file below `path`.
    files: list[str] = field(default_factory=list)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Job:
        return cls(**json.loads(raw))

    def fail(self, message: str) -> None:
        self.failed_blocks += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)


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
    """Drives workers to fetch blocks (see worker_link.WorkerLink)."""

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        """Per entry: None when the worker holds the block afterwards, else the error."""
        ...


class LoadJobs:
    def __init__(
        self,
        store: MetadataStore,
        config: MasterConfig,
        namespace: Namespace,
        membership: Membership,
        loader: BlockLoader,
        locations: BlockLocationTable,
        counters: LoadJobCounters,
    ) -> None:
        self._store = store
        self._config = config
        self._namespace = namespace
        self._membership = membership
        self._loader = loader
        self._locations = locations
        self._counters = counters
        self._jobs: dict[str, Job] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @staticmethod
    def _key(job_id: str) -> bytes:
        return keyspace.JOBS + job_id.encode()

    async def _save(self, job: Job) -> None:
        job.updated_ms = int(time.time() * 1000)
        await self._store.put(self._key(job.id), job.to_json())

    async def resume(self) -> None:
        """Picks up the jobs a previous master left unfinished."""
        async for page in self._store.scan_prefix(keyspace.JOBS):
            for _, raw in page:
                job = Job.from_json(raw)
                self._jobs[job.id] = job
                if job.state not in TERMINAL:
                    log.info("load_job_resumed", job=job.id, path=job.path, attempts=job.attempts)
                    self._start(job)

    async def submit(
        self,
        path: str,
        replicas: int,
        priority_paths: list[str],
        metadata_only: bool,
        files: Sequence[str] = (),
        *,
        request_id: str = "",
    ) -> Job:
        """Starts a job loading every file below `path`, or only `files` (each at or
        below `path`; loaded in the order given). `request_id`, the caller's name for the
        submission, becomes the job's id: submitted again, it is the job already started."""
        if request_id and not _REQUEST_ID.fullmatch(request_id):
            raise InvalidArgument("request_id must be 16-32 lowercase hex digits")
        if request_id:
            earlier = await self._earlier(request_id, path)
            if earlier is not None:
                return earlier
        info = await self._namespace.file_info(path)  # NOT_FOUND / INVALID_ARGUMENT early
        replicas = replicas or 1
        live = await self._membership.workers()
        if replicas < 1 or (not metadata_only and replicas > len(live)):
            raise InvalidArgument(f"replicas must be between 1 and {len(live)} (live workers)")
        named = self._named_files(info.path, files)
        job = Job(
            id=request_id or uuid.uuid4().hex[:12],
            path=info.path,
            replicas=replicas,
            priority_paths=[paths.normalize(p) for p in priority_paths],
            metadata_only=metadata_only,
            created_ms=int(time.time() * 1000),
            files=named,
        )
        if request_id:
            job.updated_ms = job.created_ms
            # Created only if absent: a retry racing the first attempt finds its job.
            if not await self._store.write_if(
                [Guard(self._key(job.id), None)], puts=[(self._key(job.id), job.to_json())]
            ):
                return await self.get(job.id)
        else:
            await self._save(job)
        self._jobs[job.id] = job
        self._start(job)
        log.info(
            "load_job_submitted",
            job=job.id,
            path=job.path,
            replicas=replicas,
            named_files=len(named),
        )
        return job

    async def _earlier(self, request_id: str, path: str) -> Job | None:
        """The job an earlier attempt of this submission started, if any."""
        try:
            job = await self.get(request_id)
        except NotFound:
            return None
        if job.path != paths.normalize(path):
            raise InvalidArgument(f"request_id {request_id} names a job of {job.path}")
        return job

    def _named_files(self, top: str, files: Sequence[str]) -> list[str]:
        """The files a job was asked for, normalised, each once, in the order given."""
        limit = self._config.load_max_files
        if len(files) > limit:
            # The list is kept in the job's record: a bounded record, and a client
            # with more to load submits several jobs.
            raise InvalidArgument(f"{len(files)} files named; at most {limit} per load job")
        named = list(dict.fromkeys(paths.normalize(f) for f in files))
        outside = [f for f in named if not paths.is_within(f, top)]
        if outside:
            raise InvalidArgument(f"{outside[0]} is not below the job's path {top}")
        return named

    def _start(self, job: Job) -> None:
        task = asyncio.create_task(self._run(job))
        self._tasks[job.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.id, None))

    async def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raw = await self._store.get(self._key(job_id))
            if raw is None:
                raise NotFound(f"no load job {job_id!r}")
            job = Job.from_json(raw)
        return job

    async def watch(self, job_id: str, poll_s: float = 0.25) -> AsyncIterator[Job]:
        """The job each time it changes, until it ends (read from etcd when another
        master runs it)."""
        last: Job | None = None
        while True:
            job = await self.get(job_id)
            if job != last:
                last = copy.deepcopy(job)  # a snapshot: the running job keeps changing
                yield last
            # The snapshot decides, not the live job: it may end while the caller holds
            # the yielded snapshot, and a watch that stopped then would hand its caller a
            # job still "running" as the last word (`load --wait` returning too early).
            if last.state in TERMINAL:
                return
            await asyncio.sleep(poll_s)

    async def all(self) -> list[Job]:
        jobs = [
            Job.from_json(raw)
            async for page in self._store.scan_prefix(keyspace.JOBS)
            for _, raw in page
        ]
        for job in jobs:
            if job.id in self._jobs:
                job.__dict__.update(self._jobs[job.id].__dict__)
        return sorted(jobs, key=lambda j: j.created_ms)

    async def cancel(self, job_id: str) -> Job:
        job = await self.get(job_id)
        if job.state in TERMINAL:
            return job
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        job.state = "cancelled"
        await self._save(job)
        log.info("load_job_cancelled", job=job.id)
        return job

    async def close(self) -> None:
        """Stops running jobs without changing their records: the next master resumes them."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: Job) -> None:
        saver: asyncio.Task[None] | None = None
        try:
            job.state = "running"
            job.attempts += 1
            job.done_blocks = job.done_bytes = job.failed_blocks = 0
            job.errors = []
            await self._save(job)
            if not job.files:
                await self._namespace.load_all_metadata(job.path)
            job.total_files = job.total_bytes = job.total_blocks = 0
            homes = None if job.metadata_only else await self._homes(job)
            saver = asyncio.create_task(self._save_every(job))
            # A page of files at a time, loaded as it comes: a job over millions of files
            # starts at once, and the master never holds its whole file list. The totals
            # grow with the pages (they are whole when the last page is in).
            async for files in self._file_pages(job):
                job.total_files += len(files)
                job.total_bytes += sum(f.size for f in files) * job.replicas
                job.total_blocks += sum(f.block_count for f in files) * job.replicas
                await self._save(job)  # what a watcher sees before the page's blocks land
                if homes is not None:
                    await self._load(job, files, *homes)
            job.state = "failed" if job.failed_blocks else "completed"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            job.state = "failed"
            job.errors.append(f"{type(exc).__name__}: {exc}")
            log.warning("load_job_failed", job=job.id, error=str(exc))
        finally:
            if saver is not None:
                saver.cancel()
        await self._save(job)
        log.info(
            "load_job_finished",
            job=job.id,
            state=job.state,
            done=job.done_blocks,
            failed=job.failed_blocks,
            bytes=job.done_bytes,
        )

    async def _save_every(self, job: Job) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                await self._save(job)
            except ReservoirError as exc:
                log.warning("load_job_save_failed", job=job.id, error=str(exc))

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
        if len(workers) < job.replicas:
            raise InvalidArgument(f"{job.replicas} replicas asked, {len(workers)} workers live")
        by_id = {w.id: w for w in workers}
        return by_id, placement([Candidate(w.id, float(w.capacity_bytes or 1)) for w in workers])

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
