"""Writing a file through Reservoir: write-through to the store, published on close.

`WriteSession` is one file being written (asyncio): the master opens a multipart upload
and records it (`BeginWrite`); each part goes once to a worker (`WritePart`: in parallel,
the worker chosen by placement), which stages its blocks and uploads it to the store with
the mount's credentials, so the writer holds none and sends each byte once. A part the
store failed, or whose worker died, is sent again to the next worker, within a bound; the
writer keeps it until then, in room taken from the client's `WriteBuffer` before the part
was copied (RESERVOIR_WRITE_BUFFER: a writer ahead of the workers waits for room). Closing completes the upload and publishes the file in one namespace write
(`PublishWrite`), then has each staging worker keep its blocks under the published file's
id where they are and report them to the master, so a read right after costs the store
nothing (readers go to a block's holders before its home). Until the publish, readers see
the previous version or nothing; a write that fails is aborted at once, and one whose
process died is aborted by the master when its keep-alives stop. A file whose size is
known and fits one part goes in one PUT instead (its ETag its MD5). With no worker at
all, parts go to the store from this process, with its own credentials.

The blocking file object over a session (`Client.open(path, "wb")`) is `ReservoirWriter`,
in reservoir_writer.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks.block_file import Buffer, checksum
from reservoir.common.blocks.staged_block_wire import decode_stage_request, encode_stage_request
from reservoir.common.errors import Conflict, InvalidArgument, ReservoirError, Unavailable
from reservoir.common.models import Inode, Mount, WorkerRecord
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.placement import block_key
from reservoir.common.rpc import unreachable
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.under_store import Part, StoreLimits, UnderStore
from reservoir.common.worker_calls import WorkerCalls
from reservoir.common.write_terms import WriteTerms
from reservoir.v1 import master_pb2

from . import sigterm_aborts
from .cluster_view import ClusterView
from .staged_commits import commit_staged
from .write_buffer import HeldBytes, WriteBuffer

log = logs.get_logger(__name__)

# The fewest parts any store takes in one upload (S3's); the worker that uploads a part
# checks it against its own store's limits.
MAX_PARTS = StoreLimits().max_parts

_T = TypeVar("_T")
NO_TERMS = WriteTerms()


@dataclass(frozen=True, slots=True)
class WirePart:
    """A part as it goes to a worker: its `WritePartRequest` on the wire, made by
    `WriteSession.wire_part` from the caller's bytes. It is the one copy a writer makes of
    them (held until the store has the part), and made in the caller's thread, so that
    copying and checksumming overlap the sending on the client's loop."""

    number: int  # 1-based
    first: int  # the index of its first block in the file
    size: int  # its payload's bytes
    request: bytes


class Writes:
    """What the writes of one client share: the buffer their parts are held in until
    the store has them, its under-store clients and the threads that run boto3's
    blocking uploads (for a cluster with no worker only)."""

    def __init__(self, config: cfg.ClientConfig, view: ClusterView, calls: WorkerCalls) -> None:
        self.config = config
        self.view = view
        self.calls = calls
        self.buffer = WriteBuffer(config.write_buffer_bytes)
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
        session.start()
        return session

    async def direct_store(self, mount: Mount) -> UnderStore:
        """The mount's store as this process reaches it, with its own credentials: only
        for a cluster with no worker to upload through."""
        return await self.stores.open(mount)

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
        self._direct: UnderStore | None = None  # when no worker takes parts
        self._keeper: asyncio.Task[None] | None = None
        self._lost: ReservoirError | None = None
        self._slots = asyncio.Semaphore(self._config.write_concurrency)
        # Room taken in the client's write buffer and not yet given back: a part whose
        # sending was cancelled before it began gives its room back when the write ends.
        self._held: set[HeldBytes] = set()
        self._ended = False
        self.whole = whole
        self._put_etag = ""
        self.abort_on_signal_timeout_s = self._config.write_sigterm_abort_timeout_s
        if self._config.write_abort_on_sigterm:
            sigterm_aborts.watch(self, asyncio.get_running_loop())

    def start(self) -> None:
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

    async def hold(self, size: int) -> HeldBytes:
        """Room in the client's write buffer for a part of `size` bytes, taken before the
        part is copied out of the caller's bytes, so that copies wait too; pass it to
        `put_part`, which gives it back when the store has the part."""
        held = await self._writes.buffer.hold(size)
        if self._ended:  # aborted while this waited for room
            held.release()
            raise self._lost or Conflict(f"{self.path}: the write has ended")
        self._held.add(held)
        return held

    def _give_back(self, held: HeldBytes) -> None:
        held.release()
        self._held.discard(held)

    def _end(self) -> None:
        self._ended = True
        for held in self._held:
            held.release()
        self._held.clear()

    def wire_part(self, number: int, data: Buffer) -> WirePart:
        """Part `number` (1-based; every part but the last `part_size` long) of `data`,
        copied once into its request. Touches nothing that changes: any thread may call
        it, as the blocking writer does from the caller's."""
        first = (number - 1) * self.part_size // self.block_size
        request = encode_stage_request(
            self.write_id, first, data, checksum(data), number, self.block_size
        )
        return WirePart(number, first, len(memoryview(data).cast("B")), request)

    async def put_part(self, part: WirePart, held: HeldBytes | None = None) -> None:
        """Sends `part` to a worker, which stages its blocks and uploads it, at most
        `write_concurrency` parts at once; each is kept here until the store has it, in
        the room `held` (taken here when the caller took none)."""
        if held is None:
            held = await self.hold(part.size)
        try:
            if self._lost is not None:
                raise self._lost
            if part.number > MAX_PARTS:
                raise InvalidArgument(
                    f"{self.path}: more than {MAX_PARTS} parts (raise RESERVOIR_WRITE_PART_SIZE)"
                )
            async with self._slots:
                self._parts.append(await self._send(part))
        finally:
            self._give_back(held)

    async def put_whole(self, data: bytes) -> None:
        """The whole file in one PUT (a session begun with its size)."""
        assert self.whole is not None
        held = await self.hold(len(data))
        try:
            if self._lost is not None:
                raise self._lost
            self._put_etag = (await self._send(self.wire_part(1, data))).etag
        finally:
            self._give_back(held)

    async def _send(self, part: WirePart) -> Part:
        """The part to a worker, the first in placement order that answers (the healthy
        first); a store failure it reports is tried again, on the next worker, at most
        `write_part_retries` times. With no worker at all, to the store from here."""
        try:
            workers = await self._writes.view.workers(fresh=False)
        except ReservoirError:
            workers = []
        if not workers:
            data = bytes(decode_stage_request(part.request).data)
            return await self._upload_directly(part.number, data)
        number, first, request = part.number, part.first, part.request
        view = self._writes.view
        ranked = view.placement(workers).homes(block_key(self.write_id, first), len(workers))
        by_id = {w.id: w for w in workers}
        order = view.penalties.healthy_first([by_id[i] for i in ranked])
        attempts = self._config.write_part_retries + 1
        turn = 0
        for attempt in range(attempts):
            reply, worker = None, order[0]
            for _ in range(len(order)):  # past the workers that cannot be reached
                worker = order[turn % len(order)]
                turn += 1
                try:
                    reply = await self._writes.calls.write_part(worker, request)
                    break
                except ReservoirError as error:
                    if not unreachable(error):
                        if isinstance(error, Unavailable) and attempt < attempts - 1:
                            break  # the store failed it: once more, on the next worker
                        if isinstance(error, Unavailable):
                            raise Unavailable(
                                f"{self.path}: part {number} failed {attempts} times; the "
                                f"write is aborted ({error})"
                            ) from None
                        raise error from None
                    view.worker_failed(worker, error)
            else:
                raise Unavailable(f"{self.path}: part {number}: no worker could be reached")
            if reply is None:
                delay = min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.0)
                log.info("write_part_retry", path=self.path, part=number, worker=worker.id)
                await asyncio.sleep(delay)
                continue
            blocks = -(-part.size // self.block_size)
            if reply.staged == blocks:
                self._staged.update(dict.fromkeys(range(first, first + blocks), worker))
            return Part(number, reply.etag)
        raise AssertionError("unreachable")

    async def _upload_directly(self, number: int, data: bytes) -> Part:
        if self._direct is None:
            self._direct = await self._writes.direct_store(self.mount)
        store = self._direct
        if self.whole is not None:
            put = await self._retried("the object", store.put, self._key, data, self.whole)
            return Part(number, put.etag)
        return await self._retried(
            f"part {number}", store.upload_part, self._key, self._upload_id, number, data
        )

    async def put_all(self, data: bytes) -> None:
        """Every part of `data`; a part is copied out of it only once the write buffer
        has room for it, so the copies held at once stay within the buffer."""
        view = memoryview(data)
        size = self.part_size

        async def one(number: int, start: int) -> None:
            piece = view[start : start + size]
            held = await self.hold(len(piece))
            await self.put_part(self.wire_part(number, piece), held)

        parts = [
            asyncio.ensure_future(one(n + 1, s)) for n, s in enumerate(range(0, len(view), size))
        ]
        try:
            await asyncio.gather(*parts)
        except BaseException:
            for part in parts:  # the write fails as a whole: send nothing more
                part.cancel()
            await asyncio.gather(*parts, return_exceptions=True)
            raise

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

    # ---- the end of a write -----------------------------------------------------------

    async def publish(self, size: int) -> Inode:
        """Completes the upload and publishes the file; its inode. Its blocks (those that
        could be staged) are then cached where they were staged, and the master knows it."""
        await self._stop_keeping()
        self._end()
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
        sigterm_aborts.unwatch(self)  # published: nothing left to abort
        inode = Inode.from_proto(reply)
        published = time.perf_counter()
        await commit_staged(self._writes.calls, self.write_id, self._staged, self.block_size, inode)
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

    async def abort(self) -> None:
        """Drops the upload now (a write that failed leaves nothing behind). A master
        that cannot be told drops it after its timeout."""
        await self._stop_keeping()
        self._end()
        sigterm_aborts.unwatch(self)
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
