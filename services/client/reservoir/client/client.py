"""The blocking client: the asyncio client run on a private event loop thread."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import typing
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from reservoir.common import config as cfg
from reservoir.common.errors import ReservoirError
from reservoir.common.models import CacheRule, Inode, MasterRecord, Mount, WorkerRecord

from . import discovery, sigterm_aborts
from .async_client import AsyncClient
from .cache_state import CacheReport, FreeResult, PinResult, WorkerStats
from .datasets import Dataset
from .load_jobs import LoadJob, MetadataLoadProgress
from .locality import Locality
from .loop_runtime import LoopRuntime
from .reservoir_file import ReservoirFile, joined
from .reservoir_writer import ReservoirWriter
from .thread_reads import ThreadReads

T = TypeVar("T")


class Client:
    """Reservoir's SDK for ordinary (threaded) code.

    >>> with Client("127.0.0.1:19998") as rs:
    ...     data = rs.read("/datasets/train/part-0001")

    `master`: one address, or several masters' comma-separated ("m1:19998,m2:19998"):
    calls go to whichever leads.
    """

    def __init__(self, master: str | None = None, config: cfg.ClientConfig | None = None) -> None:
        if config is None:
            config = discovery.client_config(master)
        elif master:
            config = dataclasses.replace(config, master=master)
        self.config = config
        self._runtime = LoopRuntime(config)
        self._runtime.client  # noqa: B018 - settings that cannot work fail here, not later

    @property
    def _async(self) -> AsyncClient:
        return self._runtime.client

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runtime.run(coro)

    def close(self) -> None:
        """Closes its channels and stops its event loop thread."""
        self._runtime.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Callable[..., Client], tuple[cfg.ClientConfig]]:
        # A client travels as its settings (to DataLoader workers, spawn or fork); the copy
        # opens its own channels on first use. Never sockets across processes.
        return _unpickle, (self.config,)

    @property
    def aio(self) -> AsyncClient:
        """The asyncio client this one runs (for code that has an event loop of its own
        to hand work to: its coroutines run on this client's loop thread only)."""
        return self._async

    def mount(
        self,
        path: str,
        uri: str,
        *,
        endpoint_url: str = "",
        region: str = "",
        block_size: int = 0,
        credentials: str = "",
        metadata_ttl_ms: int = 0,
        metadata_sync: str = "",
        replace: bool = False,
        writable: bool = False,
        events_queue_url: str = "",
        quota_bytes: int = 0,
        priority: str = "",
        idle_ttl_ms: int = 0,
        max_requests_per_s: int = 0,
        max_bytes_per_s: int = 0,
        max_in_flight: int = 0,
    ) -> Mount:
        """Mounts the under-store `uri` (e.g. "s3://bucket/prefix/") at `path`, with
        the options `reservoir mount` documents; `replace` swaps out a mount already
        at `path`; `writable` lets files be written there through Reservoir;
        `events_queue_url` names an SQS queue of the bucket's S3 event notifications.
        `quota_bytes` caps what the cluster caches of the mount, `priority` ("low",
        "normal", "high") orders whose blocks go first under pressure, and `idle_ttl_ms`
        drops its blocks once it was not read for that long; the `max_*` budgets bound
        what all workers together ask of the under-store."""
        return self._run(
            self._async.mount(
                path,
                uri,
                endpoint_url=endpoint_url,
                region=region,
                block_size=block_size,
                credentials=credentials,
                metadata_ttl_ms=metadata_ttl_ms,
                metadata_sync=metadata_sync,
                replace=replace,
                writable=writable,
                events_queue_url=events_queue_url,
                quota_bytes=quota_bytes,
                priority=priority,
                idle_ttl_ms=idle_ttl_ms,
                max_requests_per_s=max_requests_per_s,
                max_bytes_per_s=max_bytes_per_s,
                max_in_flight=max_in_flight,
            )
        )

    def unmount(self, path: str) -> None:
        """Removes the mount at `path` (the under-store keeps its objects)."""
        self._run(self._async.unmount(path))

    def mounts(self) -> list[Mount]:
        """Every mount, by path."""
        return self._run(self._async.mounts())

    def workers(self) -> list[WorkerRecord]:
        """The live workers."""
        return self._run(self._async.workers())

    def masters(self) -> list[MasterRecord]:
        """The cluster's masters, leader first (see AsyncClient.masters)."""
        return self._run(self._async.masters())

    def worker_stats(self, *, reachable_only: bool = False) -> list[WorkerStats]:
        """Every live worker's counters; a worker that does not answer fails the call,
        or with `reachable_only` is left out."""
        return self._run(self._async.worker_stats(reachable_only=reachable_only))

    def stat(self, path: str, *, with_locations: bool = False) -> Inode:
        """A file's or directory's inode; `with_locations` adds the workers that hold
        each block. FileNotFoundError when there is nothing at `path`."""
        return self._run(self._async.stat(path, with_locations=with_locations))

    def stat_many(self, paths: Sequence[str], *, with_locations: bool = False) -> list[Inode]:
        """Stats of many paths in batched master calls (see AsyncClient.stat_many)."""
        return self._run(self._async.stat_many(paths, with_locations=with_locations))

    def refresh(self, path: str) -> Inode:
        """A file's inode as the under-store has it now, whatever the sync interval."""
        return self._run(self._async.refresh(path))

    def ls(self, path: str, *, with_locations: bool = False) -> list[Inode]:
        """The entries of a directory in name order (NotADirectoryError for a file), all
        pages of them; remembered, so reads of them need no master call."""
        return self._run(self._async.ls(path, with_locations=with_locations))

    def iter_ls(
        self,
        path: str,
        *,
        page_size: int | None = None,
        with_locations: bool = False,
        start_after: str = "",
    ) -> Iterator[Inode]:
        """The entries of a directory in name order, fetched a page at a time as the loop
        reaches them (see `AsyncClient.iter_ls`): the client holds one page. `start_after`
        (a name): only the entries whose names sort after it."""
        token = self._run(self._async._ls_start(path, start_after))
        while True:
            page, token = self._run(self._async._ls_page(path, page_size, token, with_locations))
            yield from page
            if not token:
                return

    def _thread_reads(self) -> ThreadReads:
        """The reads this thread answers itself, once the worker list is known (one hop
        to fetch it the first time; after that it renews in the background)."""
        reads = self._async.thread_reads
        if not reads.knows_workers():
            with contextlib.suppress(ReservoirError):  # the full path reports it
                self._run(self._async.workers(fresh=False))
        return reads

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Bytes [offset, offset+length) of a file; length -1 reads to the end."""
        if offset >= 0 and length >= -1:
            # Read in this thread (same-host block files, data ports) once the file is
            # known; a file not known yet costs one hop to the loop for its info first.
            reads = self._thread_reads()
            inode = reads.known_inode(path)
            if inode is None and reads.can_read():
                inode = self._run(self._async.stat(path))
            if inode is not None and not inode.is_dir:
                local = reads.read_inode_bytes(inode, offset, length)
                if local is not None:
                    return local
        return joined(self._run(self._async.read_pieces(path, offset, length)))

    def _read_inode(self, inode: Inode, offset: int, length: int) -> list[bytes | memoryview]:
        """A range of the file as `inode` has it (an open file's reads)."""
        local = self._thread_reads().read_inode_bytes(inode, offset, length)
        if local is not None:
            return [local]
        return list(self._run(self._async._read_inode_pieces(inode, offset, length)))

    def read_ranges(
        self, ranges: Sequence[tuple[str, int, int]], *, return_exceptions: bool = False
    ) -> list[bytes | BaseException]:
        """Many `(path, offset, length)` reads at once (see `AsyncClient.read_ranges`)."""
        return self._run(self._async.read_ranges(ranges, return_exceptions=return_exceptions))

    def read_many(self, paths: Sequence[str]) -> list[bytes]:
        """Whole contents of many files; small ones read in this thread where it can
        (pipelined to workers' data ports, same-host block files), the rest in batches
        over gRPC (`AsyncClient.read_many`)."""
        reads = self._thread_reads()
        if not reads.can_read() or not paths:
            return self._run(self._async.read_many(paths))
        # Inodes the view still trusts cost no hop to the loop (a warm epoch's batches).
        known = [reads.known_inode(path) for path in paths]
        unknown = [path for path, inode in zip(paths, known, strict=True) if inode is None]
        found = iter(self._run(self._async.stat_many(unknown)) if unknown else ())
        results = reads.read_many([i if i is not None else next(found) for i in known])
        missing = [i for i, data in enumerate(results) if data is None]
        rest = iter(
            self._run(self._async.read_many([paths[i] for i in missing])) if missing else []
        )
        return [data if data is not None else next(rest) for data in results]

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
        name below it; in that order). Returns the job as submitted: follow it with `watch_job(job.id)`."""
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

    @typing.overload
    def open(
        self, path: str, mode: typing.Literal["r", "rb"] = "rb", buffering: int = -1
    ) -> io.BufferedReader: ...
    @typing.overload
    def open(
        self, path: str, mode: typing.Literal["w", "wb"], buffering: int = -1
    ) -> ReservoirWriter: ...
    def open(
        self, path: str, mode: str = "rb", buffering: int = -1
    ) -> io.BufferedReader | ReservoirWriter:
        """A binary file object: "rb" reads (seekable, readinto, usable with io wrappers);
        "wb" writes a new version on a writable mount, published whole on close
        (`with` aborts it on an exception)."""
        if mode in ("w", "wb"):
            self._abort_writes_on_sigterm()
            return ReservoirWriter(self, self._run(self._async.begin_write(path)))
        if mode not in ("r", "rb"):
            raise ValueError(f"unsupported mode {mode!r}: rb or wb")
        raw = ReservoirFile(self, self.stat(path))
        return io.BufferedReader(raw, buffer_size=buffering if buffering > 0 else 1 << 20)

    def write(self, path: str, data: bytes) -> Inode:
        """Writes a whole file on a writable mount (see `open(path, "wb")`)."""
        self._abort_writes_on_sigterm()
        return self._run(self._async.write(path, data))

    def _abort_writes_on_sigterm(self) -> None:
        if self.config.write_abort_on_sigterm:
            sigterm_aborts.abort_writes_on_sigterm()

    def rm(self, path: str, *, recursive: bool = False) -> int:
        """Removes a file, or (`recursive`) a directory tree; objects deleted."""
        return self._run(self._async.rm(path, recursive=recursive))

    def rename(self, source: str, destination: str) -> Inode:
        """Moves a file within its mount, atomically for readers."""
        return self._run(self._async.rename(source, destination))

    def makedirs(self, path: str) -> Inode:
        """Makes the directory and its parents; an existing one is fine."""
        return self._run(self._async.makedirs(path))

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


def _unpickle(config: cfg.ClientConfig) -> Client:
    client = Client.__new__(Client)
    client.config = config
    client._runtime = LoopRuntime(config)  # started by the first call in this process
    return client


async def _followed(items: AsyncIterator[T], progress: Callable[[T], None] | None) -> T | None:
    """The last of `items` (None if there is none), each handed to `progress` on the way."""
    last: T | None = None
    async for item in items:
        if progress is not None:
            progress(item)
        last = item
    return last
