"""The blocking client: the asyncio client run on a private event loop thread."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import typing
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from reservoir.common import config as cfg
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode, MasterRecord, Mount, WorkerRecord

from . import discovery, sigterm_aborts
from .async_client import AsyncClient
from .blocking_cluster_operations import BlockingClusterOperations
from .cache_state import WorkerStats
from .loop_runtime import LoopRuntime
from .reservoir_file import ReservoirFile, joined
from .reservoir_writer import ReservoirWriter
from .thread_reads import ThreadReads

T = TypeVar("T")


class Client(BlockingClusterOperations):
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


def _unpickle(config: cfg.ClientConfig) -> Client:
    client = Client.__new__(Client)
    client.config = config
    client._runtime = LoopRuntime(config)  # started by the first call in this process
    return client
