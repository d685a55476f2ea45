"""The blocking client's calls about the cluster's work: metadata loads, load jobs,
declared datasets, drains, cache rules (pin, TTL, free), locality and reports.
`AsyncClient`'s coroutines (`cluster_operations.py`) run to their end on the client's
loop; a part of `Client`, kept apart so its own file holds the read and write paths."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from reservoir.common.models import CacheRule

from .cache_state import CacheReport, FreeResult, PinResult
from .datasets import Dataset
from .load_jobs import LoadJob, MetadataLoadProgress
from .locality import Locality

if TYPE_CHECKING:
    from .async_client import AsyncClient

T = TypeVar("T")


class BlockingClusterOperations:
    if TYPE_CHECKING:  # the Client's

        @property
        def _async(self) -> AsyncClient: ...

        def _run(self, coro: Coroutine[Any, Any, T]) -> T: ...

    def load_metadata(
        self,
        path: str,
        recursive: bool = True,
        progress: Callable[[MetadataLoadProgress], None] | None = None,
    ) -> MetadataLoadProgress:
        """Syncs the namespace below `path` from the under-store into etcd now, calling
        `progress` with each update; returns the last (its `done` is set)."""
        followed = _followed(self._async.load_metadata(path, recursive), progress)
        return self._run(followed) or MetadataLoadProgress()

    def locality(self, path: str = "", *, dataset: str = "") -> Locality:
        """Bytes of `path` (or of the declared dataset named `dataset`) cached per host,
        zone and region."""
        return self._run(self._async.locality(path, dataset=dataset))

    def report(self, path: str) -> CacheReport:
        """The files and bytes below `path`, and how much of them is cached."""
        return self._run(self._async.report(path))

    def submit_load(
        self,
        path: str,
        *,
        replicas: int = 1,
        priority_paths: Sequence[str] = (),
        metadata_only: bool = False,
        files: Sequence[str] = (),
    ) -> LoadJob:
        """Starts a load job that caches every file below `path` on `replicas` workers
        each, the files below `priority_paths` first; `metadata_only` syncs the namespace
        and caches no data; `files` loads only those (each at or below `path`, a relative
        name below it; in that order). Returns the job as submitted: follow it with
        `watch_job(job.id)`."""
        return self._run(
            self._async.submit_load(
                path,
                replicas=replicas,
                priority_paths=priority_paths,
                metadata_only=metadata_only,
                files=files,
            )
        )

    def job(self, job_id: str) -> LoadJob:
        """A load job as the master has it now. NotFound (a FileNotFoundError) for an unknown id."""
        return self._run(self._async.job(job_id))

    def watch_job(self, job_id: str, progress: Callable[[LoadJob], None] | None = None) -> LoadJob:
        """Waits for the job to end, calling `progress` with the job each time it changes
        (`progress=print` prints a line a person reads); returns the finished job."""

        async def run() -> LoadJob:
            last = await _followed(self._async.watch_job(job_id), progress)
            # The master's watch always sends the job at least once; should a stream end
            # without a word, the job as it is now is the honest answer.
            return last if last is not None else await self._async.job(job_id)

        return self._run(run())

    def cancel_job(self, job_id: str) -> LoadJob:
        """Stops a load job (what it cached stays cached); a finished job is returned as
        it is."""
        return self._run(self._async.cancel_job(job_id))

    def apply_dataset(self, document: Mapping[str, Any] | str | Path) -> Dataset:
        """Declares a dataset (see `AsyncClient.apply_dataset`)."""
        return self._run(self._async.apply_dataset(document))

    def datasets(self) -> list[Dataset]:
        return self._run(self._async.datasets())

    def dataset(self, name: str) -> Dataset:
        return self._run(self._async.dataset(name))

    def delete_dataset(self, name: str, *, keep_cache: bool = False) -> Dataset:
        return self._run(self._async.delete_dataset(name, keep_cache=keep_cache))

    def drain(self, worker_id: str, *, wait: bool = False) -> LoadJob:
        """Drains a worker (see `AsyncClient.drain`); with `wait`, returns once the drain
        has ended (its `state` says how)."""
        job = self._run(self._async.drain(worker_id))
        return self.watch_job(job.id) if wait else job

    def undrain(self, worker_id: str) -> LoadJob:
        """Stops a worker's drain and puts it back in service."""
        return self._run(self._async.undrain(worker_id))

    def jobs(self) -> list[LoadJob]:
        """Every load job the cluster remembers, oldest first."""
        return self._run(self._async.jobs())

    # ---- cache rules: pin, TTL, free (see AsyncClient) -----------------------------------

    def pin(self, path: str) -> PinResult:
        """Keeps the files below `path` in the cache, never evicted, and starts loading
        them (`watch_job(result.load_job_id)` waits for that). ResourceExhausted when
        they do not fit."""
        return self._run(self._async.pin(path))

    def unpin(self, path: str) -> CacheRule:
        """Lets the files below `path` be evicted again; returns the rule left there."""
        return self._run(self._async.unpin(path))

    def set_ttl(self, path: str, ttl: float | str) -> CacheRule:
        """Blocks below `path` expire `ttl` (seconds, or "30s", "6h", "7d") after they
        landed: read again from the under-store, and evicted first."""
        return self._run(self._async.set_ttl(path, ttl))

    def clear_ttl(self, path: str) -> CacheRule:
        """Removes the TTL on `path`; returns the rule left there."""
        return self._run(self._async.clear_ttl(path))

    def cache_rules(self) -> list[CacheRule]:
        """Every pin and TTL."""
        return self._run(self._async.cache_rules())

    def free(self, path: str) -> FreeResult:
        """Evicts the blocks below `path` from every worker now (pinned files are kept)."""
        return self._run(self._async.free(path))


async def _followed(items: AsyncIterator[T], progress: Callable[[T], None] | None) -> T | None:
    """The last of `items` (None if there is none), each handed to `progress` on the way."""
    last: T | None = None
    async for item in items:
        if progress is not None:
            progress(item)
        last = item
    return last
