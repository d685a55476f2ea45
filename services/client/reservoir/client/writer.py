"""Writing a file through Reservoir: write-through to the store, published on close.

`WriteSession` is one file being written (asyncio): the master opens a multipart upload
and records it (`BeginWrite`); each part goes to the store straight from this process
(parts in parallel, each retried within a bound) while its blocks are staged on workers;
closing completes the upload and publishes the file in one namespace write
(`PublishWrite`), then has each staging worker keep its blocks under the published file's
id where they are and report them to the master, so a read right after costs the store
nothing (readers go to a block's holders before its home). Until the publish, readers see
the previous version or nothing; a write that fails is aborted at once, and one whose
process died is aborted by the master when its keep-alives stop.

The blocking file object over a session (`Client.open(path, "wb")`) is `ReservoirWriter`,
in reservoir_writer.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from reservoir.common import config as cfg
from reservoir.common import logs, worker_methods
from reservoir.common.blocks.block_file import checksum
from reservoir.common.blocks.staged_block_wire import encode_stage_request
from reservoir.common.errors import InvalidArgument, ReservoirError, Unavailable
from reservoir.common.models import Inode, Mount, WorkerRecord
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.observability import inject_metadata
from reservoir.common.placement import block_key
from reservoir.common.rpc import ChannelPool, error_from_rpc
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.object_writes import MAX_PARTS, ObjectWrites, Part
from reservoir.common.write_terms import WriteTerms
from reservoir.v1 import master_pb2, worker_pb2

from .cluster_view import ClusterView

log = logs.get_logger(__name__)

_T = TypeVar("_T")
NO_TERMS = WriteTerms()
_STAGE_BLOCK = worker_methods.STAGE_BLOCK
_COMMIT_BLOCKS = worker_methods.COMMIT_BLOCKS


class Writes:
    """What the writes of one client share: its under-store clients and the threads
    that run boto3's blocking part uploads."""

    def __init__(self, config: cfg.ClientConfig, view: ClusterView, channels: ChannelPool) -> None:
        self.config = config
        self.view = view
        self.channels = channels
        self.stores = MountedStores.from_settings(config.ufs)
        self.pool = ThreadPoolExecutor(config.write_concurrency, thread_name_prefix="write")

    async def begin(
        self, path: str, terms: WriteTerms = NO_TERMS, size: int | None = None
    ) -> WriteSession:
        """`size`, when the writer knows it: a file of at most one part then goes in one
        PUT (its ETag the MD5 of its bytes, as S3's PutObject gives), unless conditional."""
        whole = size is not None and size <= self.config.write_part_size and not terms.conditional
        request = master_pb2.BeginWriteRequest(
            path=path,
            metadata=terms.metadata.to_proto(),
            if_absent=terms.if_absent,
            if_match=terms.if_match,
            whole=whole,
        )
        reply = await self.view.call("BeginWrite", request, f"write {path}")
        session = WriteSession(self, path, reply, terms.metadata if whole else None)
        try:
            session.start(ObjectWrites.of(await self.stores.open(session.mount)))
        except BaseException:
            await session.abort()
            raise
        return session

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class WriteSession:
    def __init__(
        self,
        writes: Writes,
        path: str,
        reply: master_pb2.BeginWriteResponse,
        whole: ObjectMetadata | None = None,
    ) -> None:
        """`whole`: the metadata of a write in one PUT (`put_whole`), None for parts."""
        self._writes = writes
        self._config = writes.config
        self.path = path
        self.write_id = reply.write_id
        self._upload_id = reply.upload_id
        self.mount = Mount.from_proto(reply.mount)
        self._key = reply.ufs_uri[len(self.mount.uri) :]
        self.block_size = reply.block_size
        # Parts are whole blocks: a block never straddles two parts.
        blocks_per_part = max(1, -(-self._config.write_part_size // self.block_size))
        self.part_size = blocks_per_part * self.block_size
        self._keepalive_s = max(0.05, reply.keepalive_ms / 1000)
        self._parts: list[Part] = []
        self._staged: dict[int, WorkerRecord] = {}  # block index -> worker holding it
        self._store: ObjectWrites | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._lost: ReservoirError | None = None
        self._slots = asyncio.Semaphore(self._config.write_concurrency)
        self.whole = whole
        self._put_etag = ""

    def start(self, store: ObjectWrites) -> None:
        self._store = store
        self._keeper = asyncio.create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        request = master_pb2.WriteRef(write_id=self.write_id)
        while True:
            await asyncio.sleep(self._keepalive_s)
            try:
                await self._writes.view.call("KeepWrite", request, f"keep writing {self.path}")
            except ReservoirError as exc:
                # Unreachable for a while is survivable (the next keep-alive may get
                # through before the timeout); a write the master no longer knows is not.
                if isinstance(exc, FileNotFoundError):
                    self._lost = exc
                    return
                log.info("write_keepalive_failed", path=self.path, error=str(exc))

    # ---- parts ------------------------------------------------------------------------

    async def put_part(self, number: int, data: bytes) -> None:
        """Uploads part `number` (1-based; every part but the last `part_size` long) and
        stages its blocks on workers, at most `write_concurrency` parts at once."""
        if self._lost is not None:
            raise self._lost
        if number > MAX_PARTS:
            raise InvalidArgument(
                f"{self.path}: more than {MAX_PARTS} parts (raise RESERVOIR_WRITE_PART_SIZE)"
            )
        async with self._slots:
            first = (number - 1) * self.part_size // self.block_size
            staging = asyncio.ensure_future(self._stage(first, data))
            try:
                part = await self._upload(number, data)
            finally:
                await staging
            self._parts.append(part)

    async def put_whole(self, data: bytes) -> None:
        """The whole file in one PUT (a session begun with its size), its blocks staged
        meanwhile."""
        assert self.whole is not None and self._store is not None
        if self._lost is not None:
            raise self._lost
        staging = asyncio.ensure_future(self._stage(0, data))
        try:
            self._put_etag = await self._retried(
                "the object", self._store.put, self._key, data, self.whole
            )
        finally:
            await staging

    async def put_all(self, data: bytes) -> None:
        """Every part of `data`; a part is copied out of it only when its turn comes, so
        at most `write_concurrency` copies exist at once."""
        view = memoryview(data)
        size = self.part_size
        turns = asyncio.Semaphore(self._config.write_concurrency)

        async def one(number: int, start: int) -> None:
            async with turns:
                await self.put_part(number, bytes(view[start : start + size]))

        await asyncio.gather(*(one(n + 1, s) for n, s in enumerate(range(0, len(view), size))))

    async def _upload(self, number: int, data: bytes) -> Part:
        assert self._store is not None
        return await self._retried(
            f"part {number}", self._store.upload_part, self._key, self._upload_id, number, data
        )

    async def _retried(self, what: str, call: Callable[..., _T], *args: Any) -> _T:
        """A blocking store call on the write pool, retried within a bound while the
        store is unavailable."""
        loop = asyncio.get_running_loop()
        attempts = self._config.write_part_retries + 1
        for attempt in range(attempts):
            try:
                return await loop.run_in_executor(self._writes.pool, call, *args)
            except Unavailable as exc:
                if attempt == attempts - 1:
                    raise Unavailable(
                        f"{self.path}: {what} failed {attempts} times; the write is aborted ({exc})"
                    ) from exc
                delay = min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)
                log.info("write_part_retry", path=self.path, part=what, error=str(exc))
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _stage(self, first: int, data: bytes) -> None:
        """Offers each block of the part to a worker; one that cannot take it is read
        from the store later (never an error for the write)."""
        try:
            workers = await self._writes.view.workers(fresh=False)
        except ReservoirError:
            return
        if not workers:
            return
        table = self._writes.view.placement(workers)
        by_id = {w.id: w for w in workers}
        view = memoryview(data)

        async def one(index: int, start: int) -> None:
            block = view[start : start + self.block_size]
            worker = by_id[table.homes(block_key(self.write_id, index), 1)[0]]
            call = self._writes.channels.get(worker.address).unary_unary(
                _STAGE_BLOCK,
                request_serializer=None,  # already wire bytes: one copy of the block
                response_deserializer=worker_pb2.StageBlockResponse.FromString,
            )
            request = encode_stage_request(self.write_id, index, block, checksum(block))
            try:
                # A block's bytes on the wire: the deadline of a block read.
                await call(request, timeout=self._config.read_timeout_s, metadata=inject_metadata())
            except grpc.RpcError as exc:
                log.info("block_not_staged", path=self.path, block=index, error=str(exc.details()))
                return
            self._staged[index] = worker

        await asyncio.gather(
            *(one(first + n, start) for n, start in enumerate(range(0, len(data), self.block_size)))
        )

    # ---- the end of a write -----------------------------------------------------------

    async def publish(self, size: int) -> Inode:
        """Completes the upload and publishes the file; its inode. Its blocks (those that
        could be staged) are then cached where they were staged, and the master knows it."""
        await self._stop_keeping()
        if self._lost is not None:
            raise self._lost
        request = master_pb2.PublishWriteRequest(
            write_id=self.write_id,
            size=size,
            parts=[master_pb2.UploadedPart(number=p.number, etag=p.etag) for p in self._parts],
            etag=self._put_etag,
        )
        start = time.perf_counter()
        try:
            reply = await self._writes.view.call("PublishWrite", request, f"publish {self.path}")
        except BaseException:
            await self.abort()
            raise
        inode = Inode.from_proto(reply)
        published = time.perf_counter()
        await self._commit(inode)
        # Not remembered: the next stat learns where the committed blocks are (the master
        # has their workers' reports by now), which this answer does not say.
        self._writes.view.forget(inode.path)
        # Where a close's time goes: the store's completion and the namespace write, then
        # the staged blocks kept and reported (the part a reader's 0 GETs cost).
        log.info(
            "write_closed",
            path=self.path,
            size=size,
            publish_s=round(published - start, 3),
            commit_s=round(time.perf_counter() - published, 3),
        )
        return inode

    async def _commit(self, inode: Inode) -> None:
        if not self._staged or inode.block_size != self.block_size:
            return
        staged: dict[str, list[int]] = {}
        stagers: dict[str, WorkerRecord] = {}
        for index, worker in self._staged.items():
            if index < inode.block_count:
                staged.setdefault(worker.id, []).append(index)
                stagers[worker.id] = worker
        file = worker_pb2.ReadBlockRequest(
            file_id=inode.file_id,
            ufs_uri=inode.ufs_uri,
            etag=inode.etag,
            file_size=inode.size,
            block_size=inode.block_size,
            mount_path=inode.mount_path,
        )

        async def one(worker: WorkerRecord, indices: list[int]) -> None:
            call = self._writes.channels.get(worker.address).unary_unary(
                _COMMIT_BLOCKS,
                request_serializer=worker_pb2.CommitBlocksRequest.SerializeToString,
                response_deserializer=worker_pb2.CommitBlocksResponse.FromString,
            )
            request = worker_pb2.CommitBlocksRequest(
                write_id=self.write_id, file=file, indices=indices
            )
            try:
                reply = await call(
                    request,
                    timeout=self._config.write_commit_timeout_s,
                    metadata=inject_metadata(),
                )
            except grpc.RpcError as exc:
                error = error_from_rpc(exc, f"commit blocks on worker {worker.id}")
                log.info("written_blocks_not_cached", path=self.path, error=str(error))
                return
            if reply.missing:
                log.info("written_blocks_missing", path=self.path, missing=reply.missing)

        await asyncio.gather(*(one(stagers[w], indices) for w, indices in staged.items()))

    async def abort(self) -> None:
        """Drops the upload now (a write that failed leaves nothing behind). A master
        that cannot be told drops it after its timeout."""
        await self._stop_keeping()
        try:
            await self._writes.view.call(
                "AbortWrite", master_pb2.WriteRef(write_id=self.write_id), f"abort {self.path}"
            )
        except ReservoirError as exc:
            log.warning("write_abort_failed", path=self.path, error=str(exc))

    async def _stop_keeping(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
