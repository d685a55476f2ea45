"""Load jobs: put a data set into the cache before training starts.

`LoadJobs` is the master's table of jobs: submitted (idempotently, by the caller's request
id), watched, cancelled, and resumed by the next master. Each job's record lives in etcd
(job_records.py); running one is job_run.py's.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotFound
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.models import DRAINED, DRAINING, SERVING, WorkerRecord

from .block_moves import BlockMoves
from .job_counters import LoadJobCounters
from .job_records import DRAIN, FILL, LOAD, REPAIR, TERMINAL, Job, JobRecords
from .job_run import BlockLoader, JobRun, Membership, Namespace
from .locations import BlockLocationTable
from .worker_membership import WorkerMembership

log = logs.get_logger(__name__)

_REQUEST_ID = re.compile(r"[0-9a-f]{16,32}")


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
        moves: BlockMoves | None = None,
        marks: WorkerMembership | None = None,
    ) -> None:
        """`moves` runs drains and fills, `marks` puts a worker back in service after an
        undrain (without them, only loads)."""
        self._config = config
        self._moves = moves
        self._marks = marks
        self._namespace = namespace
        self._membership = membership
        self._records = JobRecords(store)
        self._runs = JobRun(
            self._records, config, namespace, membership, loader, locations, counters
        )
        self._locations = locations
        self._jobs: dict[str, Job] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def resume(self) -> None:
        """Picks up the jobs a previous master left unfinished."""
        async for job in self._records.scan():
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
        live = [w for w in await self._membership.workers() if w.serving]
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
            if not await self._records.create(job):
                return await self.get(job.id)
        else:
            await self._records.save(job)
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
        """The files a job was asked for, normalised, each once, in the order given; a
        relative name is below `top` (as `rsync --files-from` reads its list: a mirror's
        manifest names its files from its root)."""
        limit = self._config.load_max_files
        if len(files) > limit:
            # The list is kept in the job's record: a bounded record, and a client
            # with more to load submits several jobs.
            raise InvalidArgument(f"{len(files)} files named; at most {limit} per load job")
        named = list(dict.fromkeys(paths.normalize(_below(top, f)) for f in files))
        outside = [f for f in named if not paths.is_within(f, top)]
        if outside:
            raise InvalidArgument(f"{outside[0]} is not below the job's path {top}")
        return named

    async def drain(self, worker_id: str) -> Job:
        """Starts draining a worker (see block_moves.py); one already draining answers
        the job that drains it."""
        if self._moves is None or self._marks is None:
            raise InvalidArgument("this master does not move blocks between workers")
        worker = await self._marks.worker(worker_id)
        running = self._running(DRAIN, worker.id)
        if running is not None:
            return running
        if worker.state == DRAINED:  # e.g. a preStop hook drained it, then SIGTERM asks
            done = self._last(DRAIN, worker.id)
            if done is not None:
                return done
        live = await self._marks.workers()
        if not any(w.serving and w.id != worker.id for w in live):
            raise InvalidArgument(
                f"cannot drain {worker.id}: no other serving worker would take its blocks"
            )
        await self._marks.mark(worker, DRAINING)
        return await self._submit_move(DRAIN, worker.id)

    async def undrain(self, worker_id: str) -> Job:
        """Stops a worker's drain and puts it back in service; answers its last drain."""
        if self._marks is None:
            raise InvalidArgument("this master does not move blocks between workers")
        worker = await self._marks.worker(worker_id)
        if worker.serving:
            raise NotFound(f"worker {worker.id} is not draining")
        await self._marks.mark(worker, SERVING)
        last = self._last(DRAIN, worker.id)
        if last is None:  # its job record gone
            return Job(id="", path="", state="cancelled", kind=DRAIN, worker=worker.id)
        return await self._cancel(last)

    async def fill(self, worker: WorkerRecord) -> Job | None:
        """Starts copying onto a worker that joined the cached blocks it is now home of
        (None when nothing is cached, or fills are off)."""
        if self._moves is None or not self._config.fill_on_join or not self._locations.holds_any():
            return None
        if self._running(FILL, worker.id) is not None:
            return None
        return await self._submit_move(FILL, worker.id)

    async def repair(self, worker_id: str, blocks: dict[str, list[int]]) -> Job | None:
        """Starts copying again, from the copies left, the replicated blocks a lost
        worker held (`blocks`, by file)."""
        if self._moves is None or not blocks:
            return None
        job = await self._submit_move(REPAIR, worker_id, owed=blocks)
        return job

    def _last(self, kind: str, worker_id: str) -> Job | None:
        mine = [j for j in self._jobs.values() if j.kind == kind and j.worker == worker_id]
        return max(mine, key=lambda j: j.created_ms) if mine else None

    def _running(self, kind: str, worker_id: str) -> Job | None:
        for job in self._jobs.values():
            if job.kind == kind and job.worker == worker_id and job.state not in TERMINAL:
                return job
        return None

    async def _submit_move(
        self, kind: str, worker_id: str, owed: dict[str, list[int]] | None = None
    ) -> Job:
        job = Job(
            id=uuid.uuid4().hex[:12],
            path="",
            kind=kind,
            worker=worker_id,
            created_ms=int(time.time() * 1000),
        )
        await self._records.save(job)
        self._jobs[job.id] = job
        if owed is not None and self._moves is not None:
            self._moves.owe(job.id, owed)
        self._start(job)
        log.info("block_move_submitted", job=job.id, kind=kind, worker=worker_id)
        return job

    def _start(self, job: Job) -> None:
        run = self._runs.run if job.kind == LOAD or self._moves is None else self._moves.run
        task = asyncio.create_task(run(job))
        self._tasks[job.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job.id, None))

    async def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id) or await self._records.get(job_id)
        if job is None:
            raise NotFound(f"no load job {job_id!r}")
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
        jobs = [job async for job in self._records.scan()]
        for job in jobs:
            if job.id in self._jobs:
                job.__dict__.update(self._jobs[job.id].__dict__)
        return sorted(jobs, key=lambda j: j.created_ms)

    async def cancel(self, job_id: str) -> Job:
        job = await self.get(job_id)
        if job.kind == DRAIN and job.state not in TERMINAL:
            return await self.undrain(job.worker)  # a drain cancelled is an undrain
        return await self._cancel(job)

    async def _cancel(self, job: Job) -> Job:
        if job.state in TERMINAL:
            return job
        task = self._tasks.get(job.id)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        job.state = "cancelled"
        await self._records.save(job)
        log.info("load_job_cancelled", job=job.id, kind=job.kind)
        return job

    async def close(self) -> None:
        """Stops running jobs without changing their records: the next master resumes them."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _below(top: str, name: str) -> str:
    """`name` as a path: itself when absolute, else below `top`."""
    return name if name.startswith("/") else f"{top.rstrip('/')}/{name}"
