"""The asyncio client: resolves paths with the master, reads blocks from the workers."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from opentelemetry import trace

from reservoir.common import config as cfg
from reservoir.common import logs, paths
from reservoir.common.block_file import checksum, checksum_of_pieces, read_block_file
from reservoir.common.errors import (
    Conflict,
    DataLoss,
    DeadlineExceeded,
    InvalidArgument,
    IsADirectory,
    NotFound,
    ReservoirError,
    Unavailable,
    error_for_code_value,
)
from reservoir.common.malloc_tuning import tune_for_large_buffers
from reservoir.common.models import (
    Inode,
    Mount,
    MountOptions,
    WorkerRecord,
    block_request,
    shm_block_name,
)
from reservoir.common.mounted_stores import MountedStores
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import (
    CHANNEL_OPTIONS,
    ChannelPool,
    error_from_rpc,
    is_transport_failure,
)
from reservoir.common.security import Transport
from reservoir.common.under_store import BodyRetry
from reservoir.v1 import master_pb2, master_pb2_grpc, worker_pb2

from .routing import candidates

log = logs.get_logger(__name__)
_tracer = trace.get_tracer("reservoir.client")

_READ_BLOCK = "/reservoir.v1.WorkerService/ReadBlock"
_READ_BLOCKS = "/reservoir.v1.WorkerService/ReadBlocks"
_GET_STATS = "/reservoir.v1.WorkerService/GetStats"
# Worker failures that mean "try another replica"; anything else is the answer. DataLoss:
# bytes that failed their checksum or length on the way here.
_RETRY_ELSEWHERE = (Unavailable, DeadlineExceeded, DataLoss)
_WORKER_PENALTY_S = 2.0
_STAT_BATCH = 1000


def chunk_payload(message: bytes) -> memoryview | int:
    """The `data` of a BlockChunk, sliced out of the received message without a copy; or,
    for the stream's last message, the `crc32c` it carries."""
    if not message:
        return memoryview(b"")
    if message[0] == 0x15 and len(message) == 5:
        return int.from_bytes(message[1:5], "little")
    if message[0] != 0x0A:
        raise Unavailable("malformed block chunk from worker")
    length = shift = 0
    pos = 1
    while True:
        byte = message[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            break
        shift += 7
    view = memoryview(message)[pos : pos + length]
    if len(view) != length:
        raise Unavailable("truncated block chunk from worker")
    return view


def _range_length(inode: Inode, index: int, offset: int, length: int) -> int:
    """How many bytes a read of [offset, offset+length) within block `index` returns."""
    block_length = inode.block_length(index)
    start = min(offset, block_length)
    return block_length - start if length < 0 else min(length, block_length - start)


def _verified_payload(
    item: worker_pb2.BlockPayload, inode: Inode, worker: WorkerRecord, verify: bool
) -> bytes | None:
    """A batch entry's bytes when their length and checksum are right; None (read again
    one by one, with failover) when not."""
    data = item.data
    intact = item.HasField("crc32c") and (not verify or checksum(data) == item.crc32c)
    if len(data) != inode.size or not intact:
        log.warning("batch_block_rejected", worker=worker.id, path=inode.path, bytes=len(data))
        return None
    return data


@dataclass
class _Cached:
    value: Any
    expires: float


class AsyncClient:
    """Reservoir's asyncio SDK. One instance per process is enough; it is cheap to share."""

    def __init__(self, master: str | None = None, config: cfg.ClientConfig | None = None) -> None:
        self.config = config or cfg.load(cfg.ClientConfig, master=master)
        if master:
            self.config = cfg.ClientConfig(**{**self.config.__dict__, "master": master})
        if self.config.tune_malloc:
            tune_for_large_buffers()
        transport = Transport(self.config.security, CHANNEL_OPTIONS)
        self._master_channel = transport.channel(self.config.master)
        self._master = master_pb2_grpc.MasterServiceStub(self._master_channel)
        self._worker_channels = ChannelPool(transport)
        self._infos: dict[str, _Cached] = {}
        self._workers: _Cached | None = None
        self._workers_refresh: asyncio.Future[None] | None = None
        self._mounts: _Cached | None = None
        self._penalised: dict[str, float] = {}
        self._under_stores = MountedStores(
            self.config.ufs_timeout_s,
            body_retry=BodyRetry(
                self.config.ufs_body_retries,
                self.config.ufs_retry_backoff_s,
                self.config.ufs_retry_backoff_max_s,
            ),
        )
        self.short_circuit_bytes = 0  # bytes read from same-host workers' files

    async def close(self) -> None:
        await self._worker_channels.close()
        await self._master_channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- master calls -------------------------------------------------------------------

    async def _call(self, method: str, request: Any, what: str) -> Any:
        try:
            return await getattr(self._master, method)(
                request, timeout=self.config.rpc_timeout_s, metadata=inject_metadata()
            )
        except grpc.RpcError as exc:
            error = error_from_rpc(exc, what)
            if is_transport_failure(exc) and not isinstance(error, DeadlineExceeded):
                error = Unavailable(f"{what}: master at {self.config.master} is unreachable")
            raise error from None

    async def mount(
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
    ) -> Mount:
        """Mounts `uri` at `path`; `replace` swaps out a mount already at `path`."""
        options = MountOptions(
            endpoint_url, region, block_size, credentials, metadata_ttl_ms, metadata_sync
        )
        request = master_pb2.MountRequest(
            path=path,
            uri=uri,
            options=Mount(path, uri, options).to_proto().options,
            replace=replace,
        )
        response = await self._call("Mount", request, f"mount {path}")
        self._mounts = None
        if replace:
            self._forget_below(path)
        return Mount.from_proto(response.mount)

    async def unmount(self, path: str) -> None:
        await self._call("Unmount", master_pb2.UnmountRequest(path=path), f"unmount {path}")
        self._mounts = None
        self._infos.clear()

    async def mounts(self) -> list[Mount]:
        response = await self._call("ListMounts", master_pb2.ListMountsRequest(), "list mounts")
        mounts = [Mount.from_proto(m) for m in response.mounts]
        self._mounts = _Cached(mounts, time.monotonic() + self.config.file_info_ttl_s)
        return mounts

    async def workers(self, *, fresh: bool = True) -> list[WorkerRecord]:
        """The live workers. `fresh=False` is the read path's view: the last list known,
        renewed in the background once it is older than `workers_ttl_s`, so neither a
        slow nor a dead master ever holds up a read that has workers to go to."""
        known = self._workers
        if fresh or known is None:
            return await self._fetch_workers()
        if known.expires <= time.monotonic() and self._workers_refresh is None:
            self._workers_refresh = asyncio.ensure_future(self._refresh_workers())
        return list(known.value)

    async def _fetch_workers(self) -> list[WorkerRecord]:
        response = await self._call("ListWorkers", master_pb2.ListWorkersRequest(), "list workers")
        workers = [WorkerRecord.from_proto(w) for w in response.workers]
        self._workers = _Cached(workers, time.monotonic() + self.config.workers_ttl_s)
        return workers

    async def _refresh_workers(self) -> None:
        try:
            await self._fetch_workers()
        except ReservoirError as exc:
            # Keep reading with the list we have; ask again after another interval.
            if self._workers is not None:
                self._workers.expires = time.monotonic() + self.config.workers_ttl_s
            log.debug("workers_refresh_failed", error=str(exc))
        finally:
            self._workers_refresh = None

    def _worker_failed(self, worker: WorkerRecord, error: ReservoirError) -> None:
        """Routes around one worker for a while and asks for news of the membership,
        without forgetting the others."""
        self._penalised[worker.id] = time.monotonic() + _WORKER_PENALTY_S
        if self._workers is not None:
            self._workers.expires = 0.0
        log.info("worker_failed", worker=worker.id, error=str(error))

    async def stat(self, path: str, *, with_locations: bool = False, fresh: bool = False) -> Inode:
        path = paths.normalize(path)
        hit = self._infos.get(path)
        if not fresh and not with_locations and hit is not None and hit.expires > time.monotonic():
            return hit.value  # type: ignore[no-any-return]
        try:
            message = await self._call(
                "GetFileInfo",
                master_pb2.GetFileInfoRequest(path=path, with_locations=with_locations),
                f"stat {path}",
            )
        except Unavailable:
            if hit is None or fresh or with_locations:
                raise
            # The master is down: what we knew still reads right, because the workers and
            # the under-store check the file's identity (ETag) on every fetch.
            return hit.value  # type: ignore[no-any-return]
        inode = Inode.from_proto(message)
        self._remember(inode)
        return inode

    async def stat_many(self, many: Sequence[str]) -> list[Inode]:
        """Stats of many paths in one master call (those not already cached)."""
        normal = [paths.normalize(p) for p in many]
        now = time.monotonic()
        missing = sorted(
            {p for p in normal if not (p in self._infos and self._infos[p].expires > now)}
        )
        # Calls of bounded size, so each finishes well within its deadline.
        for start in range(0, len(missing), _STAT_BATCH):
            chunk = missing[start : start + _STAT_BATCH]
            try:
                response = await self._call(
                    "GetFileInfos", master_pb2.GetFileInfosRequest(paths=chunk), "stat many"
                )
            except Unavailable:
                if any(p not in self._infos for p in chunk):
                    raise
                continue  # the master is down: read with what we knew (see `stat`)
            for result in response.results:
                if result.code:
                    raise error_for_code_value(result.code, result.message)
                self._remember(Inode.from_proto(result.info))
        return [self._infos[p].value for p in normal]

    async def ls(self, path: str, *, with_locations: bool = False) -> list[Inode]:
        path = paths.normalize(path)
        response = await self._call(
            "ListDirectory",
            master_pb2.ListDirectoryRequest(path=path, with_locations=with_locations),
            f"ls {path}",
        )
        entries = [Inode.from_proto(e) for e in response.entries]
        for entry in entries:
            self._remember(entry)  # a read that follows needs no master call
        return entries

    def _remember(self, inode: Inode) -> None:
        # Locations age fast; the cache keeps the stable part only.
        plain = dataclasses.replace(inode, locations={}) if inode.locations else inode
        self._infos[inode.path] = _Cached(plain, time.monotonic() + self.config.file_info_ttl_s)

    def forget(self, path: str) -> None:
        self._infos.pop(path, None)

    async def refresh(self, path: str) -> Inode:
        """A file's inode as the under-store has it now: the master checks it (HEAD) and
        stores what it finds, whatever the mount's sync interval says."""
        path = paths.normalize(path)
        message = await self._call(
            "GetFileInfo",
            master_pb2.GetFileInfoRequest(path=path, refresh=True),
            f"refresh {path}",
        )
        inode = Inode.from_proto(message)
        self._remember(inode)
        return inode

    def _forget_below(self, path: str) -> None:
        top = paths.normalize(path)
        for known in [p for p in self._infos if paths.is_within(p, top)]:
            del self._infos[known]

    # ---- reads --------------------------------------------------------------------------

    async def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Bytes [offset, offset+length) of a file; length -1 reads to the end.

        A range past the end is clipped, as a file read is; a negative offset is refused.
        """
        return b"".join(await self.read_pieces(path, offset, length))

    async def read_pieces(self, path: str, offset: int = 0, length: int = -1) -> list[memoryview]:
        """The same range as `read`, as the received buffers in order (no copy made).

        The blocking client joins them in the caller's thread: a large result allocated
        there can reuse freed heap memory, where the event loop thread's arena cannot."""
        if offset < 0 or length < -1:
            raise InvalidArgument("offset must be >= 0 and length >= -1")
        with _tracer.start_as_current_span("reservoir.read", attributes={"path": path}):
            for attempt in range(2):
                inode = await self.stat(path)
                try:
                    return await self._read_inode_pieces(inode, offset, length)
                except (Conflict, InvalidArgument):
                    if attempt:
                        raise
                    # The object changed since its metadata was stored (Conflict), or the
                    # mount was remounted with another block size and a worker refused the
                    # old geometry (InvalidArgument): the master checks this one file
                    # against the under-store, and the read runs once more.
                    self.forget(inode.path)
                    log.info("file_changed_refreshing", path=inode.path, etag=inode.etag)
                    await self.refresh(path)
        raise AssertionError("unreachable")

    async def _read_inode(self, inode: Inode, offset: int, length: int) -> bytes:
        return b"".join(await self._read_inode_pieces(inode, offset, length))

    async def _read_inode_pieces(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        if inode.is_dir:
            raise IsADirectory(f"{inode.path}: is a directory")
        end = inode.size if length < 0 else min(inode.size, offset + length)
        if offset >= end:
            return []
        first, last = offset // inode.block_size, (end - 1) // inode.block_size
        workers = await self.workers(fresh=False)

        async def part(index: int) -> list[memoryview]:
            block_start = index * inode.block_size
            lo = max(offset, block_start) - block_start
            hi = min(end, block_start + inode.block_length(index)) - block_start
            return await self._read_block(inode, index, lo, hi - lo, workers)

        if first == last:
            return await part(first)
        limit = asyncio.Semaphore(self.config.parallelism)

        async def bounded(index: int) -> list[memoryview]:
            async with limit:
                return await part(index)

        parts = await asyncio.gather(*(bounded(i) for i in range(first, last + 1)))
        return [p for ps in parts for p in ps]

    def _ordered(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> list[WorkerRecord]:
        order = candidates(
            inode.file_id,
            index,
            workers,
            inode.locations.get(index, ()),
            self.config.host,
            self.config.zone,
        )
        now = time.monotonic()
        healthy = [w for w in order if self._penalised.get(w.id, 0) <= now]
        return healthy + [w for w in order if self._penalised.get(w.id, 0) > now]

    async def _read_block(
        self, inode: Inode, index: int, offset: int, length: int, workers: list[WorkerRecord]
    ) -> list[memoryview]:
        ordered = self._ordered(inode, index, workers)
        for worker in ordered:
            local = self._local_block(worker, inode, index, offset, length)
            if local is not None:
                return [memoryview(local)]
        request = block_request(inode, index, offset, length)
        expected = _range_length(inode, index, offset, length)
        last_error: ReservoirError | None = None
        for worker in ordered:
            try:
                return await self._stream_block(worker, request, expected)
            except _RETRY_ELSEWHERE as exc:
                last_error = exc
                self._worker_failed(worker, exc)
        return [
            memoryview(await self._read_from_under_store(inode, index, offset, length, last_error))
        ]

    def _local_block(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, length: int
    ) -> bytes | memoryview | None:
        """The block range read straight from a same-host worker's shared-memory file, or
        None when that is not possible (another host, not cached there, evicted)."""
        if not (self.config.short_circuit and worker.shm_dir and worker.host == self.config.host):
            return None
        path = os.path.join(worker.shm_dir, shm_block_name(inode.file_id, index))
        block_length = inode.block_length(index)
        try:
            # The whole block, copied out and checked against the checksum in its header:
            # the file is another process's, so it is never mapped or trusted.
            data, _ = read_block_file(
                path, block_length, index * inode.block_size, verify=self.config.verify_checksums
            )
        except OSError:
            return None  # not cached there (or evicted since)
        except DataLoss as exc:
            # The worker will find the same when asked over gRPC, drop it and refetch.
            log.warning("short_circuit_block_corrupt", worker=worker.id, error=str(exc))
            return None
        start = min(offset, block_length)
        want = block_length - start if length < 0 else min(length, block_length - start)
        self.short_circuit_bytes += want
        if (start, want) == (0, block_length):
            return data
        return memoryview(data)[start : start + want]

    async def _stream_block(
        self, worker: WorkerRecord, request: worker_pb2.ReadBlockRequest, expected: int
    ) -> list[memoryview]:
        """The range's bytes, checked for length and against the checksum that ends the
        stream; DataLoss when either disagrees."""
        call = self._worker_channels.get(worker.address).unary_stream(
            _READ_BLOCK,
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=None,
        )
        pieces: list[memoryview] = []
        crc: int | None = None
        try:
            async for message in call(
                request, timeout=self.config.read_timeout_s, metadata=inject_metadata()
            ):
                part = chunk_payload(message)
                if isinstance(part, int):
                    crc = part
                else:
                    pieces.append(part)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"read block from worker {worker.id}") from None
        what = f"block {request.index} of {request.file_id} from worker {worker.id}"
        received = sum(len(p) for p in pieces)
        if received != expected:
            raise DataLoss(f"{what}: {received} bytes, expected {expected}")
        if crc is None:
            raise DataLoss(f"{what}: no checksum")
        if self.config.verify_checksums and checksum_of_pieces(pieces) != crc:
            raise DataLoss(f"{what}: checksum mismatch")
        return pieces

    async def _read_from_under_store(
        self,
        inode: Inode,
        index: int,
        offset: int,
        length: int,
        cause: ReservoirError | None,
    ) -> bytes:
        if not self.config.ufs_fallback:
            raise Unavailable(f"{inode.path}: no worker could serve block {index} ({cause})")
        try:
            mounts = await self.mounts()
        except Unavailable:
            if self._mounts is None:
                raise
            mounts = self._mounts.value  # the master is down too: the last list known
        mount = next((m for m in mounts if m.path == inode.mount_path), None)
        if mount is None:
            raise NotFound(f"{inode.mount_path} is no longer mounted")
        ufs = self._under_stores.for_mount(mount)
        log.info("read_from_under_store", path=inode.path, block=index)
        start = index * inode.block_size + min(offset, inode.block_length(index))
        want = _range_length(inode, index, offset, length)
        data = await asyncio.to_thread(
            ufs.get_range, ufs.key_of(inode.ufs_uri), start, want, inode.etag
        )
        if len(data) != want:
            raise DataLoss(
                f"{inode.path}: the under-store returned {len(data)} bytes of block {index}, "
                f"expected {want}"
            )
        return data

    async def read_many(self, many: Sequence[str]) -> list[bytes]:
        """Whole contents of many files, small ones batched: one worker call per batch."""
        with _tracer.start_as_current_span("reservoir.read_many", attributes={"files": len(many)}):
            return await self._read_many(many)

    async def _read_many(self, many: Sequence[str]) -> list[bytes]:
        inodes = await self.stat_many(many)
        for inode in inodes:
            if inode.is_dir:
                raise IsADirectory(f"{inode.path}: is a directory")
        results: list[bytes | None] = [None] * len(inodes)
        workers = await self.workers(fresh=False)
        batches: dict[str, list[int]] = {}
        large: list[int] = []
        for position, inode in enumerate(inodes):
            if inode.size == 0:
                results[position] = b""
            elif inode.size <= min(self.config.small_file_bytes, inode.block_size) and workers:
                home = self._ordered(inode, 0, workers)[0]
                batches.setdefault(home.id, []).append(position)
            else:
                large.append(position)
        by_id = {w.id: w for w in workers}
        limit = asyncio.Semaphore(self.config.parallelism)
        jobs = []
        for worker_id, positions in batches.items():
            for start in range(0, len(positions), self.config.batch_files):
                chunk = positions[start : start + self.config.batch_files]
                jobs.append(self._read_batch(by_id[worker_id], inodes, chunk, results, limit))
        for position in large:
            jobs.append(self._read_whole(inodes[position], position, results, limit))
        await asyncio.gather(*jobs)
        return [r if r is not None else b"" for r in results]

    async def _read_whole(
        self, inode: Inode, position: int, results: list[bytes | None], limit: asyncio.Semaphore
    ) -> None:
        async with limit:
            results[position] = await self.read(inode.path)

    async def _read_batch(
        self,
        worker: WorkerRecord,
        inodes: list[Inode],
        positions: list[int],
        results: list[bytes | None],
        limit: asyncio.Semaphore,
    ) -> None:
        remote = []
        for position in positions:
            local = self._local_block(worker, inodes[position], 0, 0, -1)
            if local is None:
                remote.append(position)
            else:
                results[position] = bytes(local)  # the whole block: no copy
        if not remote:
            return
        positions = remote
        request = worker_pb2.ReadBlocksRequest(
            blocks=[block_request(inodes[p], 0, 0, -1) for p in positions]
        )
        call = self._worker_channels.get(worker.address).unary_stream(
            _READ_BLOCKS,
            request_serializer=worker_pb2.ReadBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockPayload.FromString,
        )
        async with limit:
            try:
                async for item in call(
                    request, timeout=self.config.read_timeout_s, metadata=inject_metadata()
                ):
                    position = positions[item.position]
                    if item.code == 0:
                        results[position] = _verified_payload(
                            item, inodes[position], worker, self.config.verify_checksums
                        )
                    else:
                        error = error_for_code_value(item.code, item.message)
                        if not isinstance(error, _RETRY_ELSEWHERE + (Conflict,)):
                            raise error
                        # otherwise left empty: read again below, with failover
            except grpc.RpcError as exc:
                error = error_from_rpc(exc, f"batch read from worker {worker.id}")
                if not isinstance(error, _RETRY_ELSEWHERE):
                    raise error from None
                self._worker_failed(worker, error)
        # Whatever the batch did not deliver is read one by one, with failover.
        missing = [p for p in positions if results[p] is None]
        for position in missing:
            results[position] = await self.read(inodes[position].path)

    # ---- warm-up: metadata load, load jobs, cached report ----------------------------------

    async def _stream(self, method: str, request: Any, what: str) -> AsyncIterator[Any]:
        try:
            async for item in getattr(self._master, method)(
                request, timeout=self.config.job_timeout_s, metadata=inject_metadata()
            ):
                yield item
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, what) from None

    async def load_metadata(
        self, path: str, recursive: bool = True
    ) -> AsyncIterator[master_pb2.LoadMetadataProgress]:
        """Syncs the namespace below `path` from the under-store into etcd, with progress."""
        request = master_pb2.LoadMetadataRequest(path=path, recursive=recursive)
        async for progress in self._stream("LoadMetadata", request, f"load metadata {path}"):
            yield progress
        self._infos.clear()

    async def report(self, path: str) -> master_pb2.ReportResponse:
        """Files, bytes and how much of them is cached."""
        response: master_pb2.ReportResponse = await self._call(
            "Report", master_pb2.ReportRequest(path=path), f"report {path}"
        )
        return response

    async def submit_load(
        self,
        path: str,
        *,
        replicas: int = 1,
        priority_paths: Sequence[str] = (),
        metadata_only: bool = False,
    ) -> master_pb2.Job:
        request = master_pb2.SubmitLoadRequest(
            path=path,
            replicas=replicas,
            priority_paths=list(priority_paths),
            metadata_only=metadata_only,
        )
        job: master_pb2.Job = await self._call("SubmitLoad", request, f"load {path}")
        return job

    async def job(self, job_id: str) -> master_pb2.Job:
        job: master_pb2.Job = await self._call(
            "GetJob", master_pb2.GetJobRequest(id=job_id), f"job {job_id}"
        )
        return job

    async def watch_job(self, job_id: str) -> AsyncIterator[master_pb2.Job]:
        """The job's record each time it changes, until it ends."""
        request = master_pb2.GetJobRequest(id=job_id)
        async for job in self._stream("WatchJob", request, f"watch job {job_id}"):
            yield job

    async def cancel_job(self, job_id: str) -> master_pb2.Job:
        job: master_pb2.Job = await self._call(
            "CancelJob", master_pb2.GetJobRequest(id=job_id), f"cancel job {job_id}"
        )
        return job

    async def jobs(self) -> list[master_pb2.Job]:
        response = await self._call("ListJobs", master_pb2.ListJobsRequest(), "list jobs")
        return list(response.jobs)

    async def worker_stats(self) -> list[worker_pb2.WorkerStats]:
        stats = []
        for worker in await self.workers():
            call = self._worker_channels.get(worker.address).unary_unary(
                _GET_STATS,
                request_serializer=worker_pb2.GetStatsRequest.SerializeToString,
                response_deserializer=worker_pb2.WorkerStats.FromString,
            )
            try:
                stats.append(
                    await call(worker_pb2.GetStatsRequest(), timeout=self.config.rpc_timeout_s)
                )
            except grpc.RpcError as exc:
                raise error_from_rpc(exc, f"stats of worker {worker.id}") from None
        return stats
