"""Load jobs as etcd keeps them: one JSON record per job (state, totals, progress, an
error sample), so a restarted master resumes the jobs that were running."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import Guard, MetadataStore

log = logs.get_logger(__name__)

TERMINAL = ("completed", "failed", "cancelled")
# What a job does: loads files from the under-store; or moves blocks between workers, off
# `worker` (a drain), onto it (a fill, for a worker that joined), or copies again what
# lost a replica with it (a repair, for a worker that died).
LOAD, DRAIN, FILL, REPAIR = "load", "drain", "fill", "repair"
MAX_ERRORS = 20


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
    kind: str = LOAD
    worker: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Job:
        return cls(**json.loads(raw))

    def fail(self, message: str) -> None:
        self.failed_blocks += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)


class JobRecords:
    """The jobs' records in the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    @contextlib.asynccontextmanager
    async def running(self, job: Job) -> AsyncIterator[None]:
        """One run of `job` as its record tells it: running (an attempt more, its counts
        from zero), saved every half second while it runs, failed with the error when the
        body raises one (cancellation passes: the next leader resumes the job), and saved
        once more at the end. The body sets the state it ends in."""
        job.state = "running"
        job.attempts += 1
        job.done_blocks = job.done_bytes = job.failed_blocks = 0
        job.total_files = job.total_bytes = job.total_blocks = 0
        job.errors = []
        await self.save(job)
        saver = asyncio.create_task(self._save_every(job))
        try:
            yield
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            job.state = "failed"
            job.errors.append(f"{type(exc).__name__}: {exc}")
            log.warning("job_failed", job=job.id, kind=job.kind, error=str(exc))
        finally:
            saver.cancel()
        await self.save(job)
        log.info(
            "job_finished",
            job=job.id,
            kind=job.kind,
            worker=job.worker or None,
            state=job.state,
            done=job.done_blocks,
            failed=job.failed_blocks,
            bytes=job.done_bytes,
        )

    async def _save_every(self, job: Job) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                await self.save(job)
            except ReservoirError as exc:
                log.warning("job_save_failed", job=job.id, error=str(exc))

    @staticmethod
    def _key(job_id: str) -> bytes:
        return keyspace.JOBS + job_id.encode()

    async def save(self, job: Job) -> None:
        job.updated_ms = int(time.time() * 1000)
        await self._store.put(self._key(job.id), job.to_json())

    async def create(self, job: Job) -> bool:
        """Stores a new job's record unless one with its id exists (False then)."""
        key = self._key(job.id)
        return await self._store.write_if([Guard(key, None)], puts=[(key, job.to_json())])

    async def get(self, job_id: str) -> Job | None:
        raw = await self._store.get(self._key(job_id))
        return None if raw is None else Job.from_json(raw)

    async def scan(self) -> AsyncIterator[Job]:
        async for page in self._store.scan_prefix(keyspace.JOBS):
            for _, raw in page:
                yield Job.from_json(raw)
