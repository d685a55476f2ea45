"""The blocking client: the asyncio client run on a private event loop thread."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from reservoir.common import config as cfg
from reservoir.common.errors import IsADirectory
from reservoir.common.models import CacheRule, Inode, Mount, WorkerRecord
from reservoir.v1 import master_pb2, worker_pb2

from .async_client import AsyncClient

T = TypeVar("T")


class Client:
    """Reservoir's SDK for ordinary (threaded) code.

    >>> with Client("127.0.0.1:19998") as rs:
    ...     data = rs.read("/datasets/train/part-0001")
    """

    def __init__(self, master: str | None = None, config: cfg.ClientConfig | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="reservoir-client", daemon=True
        )
        self._thread.start()
        self._async: AsyncClient = self._run(self._make(master, config))
        self.config = self._async.config

    @staticmethod
    async def _make(master: str | None, config: cfg.ClientConfig | None) -> AsyncClient:
        return AsyncClient(master, config)  # channels bind to the loop they are made on

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise ValueError("operation on a closed Reservoir client")  # as on a closed file
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._async.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def aio(self) -> AsyncClient:
        return self._async

    def mount(self, path: str, uri: str, **options: Any) -> Mount:
        return self._run(self._async.mount(path, uri, **options))

    def unmount(self, path: str) -> None:
        self._run(self._async.unmount(path))

    def mounts(self) -> list[Mount]:
        return self._run(self._async.mounts())

    def workers(self) -> list[WorkerRecord]:
        return self._run(self._async.workers())

    def worker_stats(self, *, reachable_only: bool = False) -> list[worker_pb2.WorkerStats]:
        return self._run(self._async.worker_stats(reachable_only=reachable_only))

    def stat(self, path: str, *, with_locations: bool = False) -> Inode:
        return self._run(self._async.stat(path, with_locations=with_locations))

    def stat_many(self, paths: Sequence[str], *, with_locations: bool = False) -> list[Inode]:
        """Stats of many paths in batched master calls (see AsyncClient.stat_many)."""
        return self._run(self._async.stat_many(paths, with_locations=with_locations))

    def refresh(self, path: str) -> Inode:
        """A file's inode as the under-store has it now, whatever the sync interval."""
        return self._run(self._async.refresh(path))

    def ls(self, path: str, *, with_locations: bool = False) -> list[Inode]:
        return self._run(self._async.ls(path, with_locations=with_locations))

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        if offset >= 0 and length >= -1:
            # Blocks on this host whose file is known: read in this thread, no loop hop.
            local = self._async.local_reads.read(path, offset, length)
            if local is not None:
                return _joined(local)
        return _joined(self._run(self._async.read_pieces(path, offset, length)))

    def _read_inode(self, inode: Inode, offset: int, length: int) -> list[bytes | memoryview]:
        local = self._async.local_reads.read_inode(inode, offset, length)
        if local is not None:
            return local
        return list(self._run(self._async._read_inode_pieces(inode, offset, length)))

    def read_many(self, paths: Sequence[str]) -> list[bytes]:
        return self._run(self._async.read_many(paths))

    def load_metadata(
        self,
        path: str,
        recursive: bool = True,
        progress: Callable[[master_pb2.LoadMetadataProgress], None] | None = None,
    ) -> master_pb2.LoadMetadataProgress:
        """Syncs the namespace below `path` into etcd; returns the final progress."""

        async def run() -> master_pb2.LoadMetadataProgress:
            last = master_pb2.LoadMetadataProgress()
            async for last in self._async.load_metadata(path, recursive):
                if progress is not None:
                    progress(last)
            return last

        return self._run(run())

    def report(self, path: str) -> master_pb2.ReportResponse:
        return self._run(self._async.report(path))

    def submit_load(self, path: str, **options: Any) -> master_pb2.Job:
        return self._run(self._async.submit_load(path, **options))

    def job(self, job_id: str) -> master_pb2.Job:
        return self._run(self._async.job(job_id))

    def watch_job(
        self, job_id: str, progress: Callable[[master_pb2.Job], None] | None = None
    ) -> master_pb2.Job:
        """Waits for the job to end, calling `progress` with each change; returns it."""

        async def run() -> master_pb2.Job:
            last = master_pb2.Job()
            async for last in self._async.watch_job(job_id):
                if progress is not None:
                    progress(last)
            return last

        return self._run(run())

    def cancel_job(self, job_id: str) -> master_pb2.Job:
        return self._run(self._async.cancel_job(job_id))

    def jobs(self) -> list[master_pb2.Job]:
        return self._run(self._async.jobs())

    def open(self, path: str, mode: str = "rb", buffering: int = -1) -> io.BufferedReader:
        """A read-only binary file object (seekable, readinto, usable with io wrappers)."""
        if mode not in ("r", "rb"):
            raise ValueError(f"unsupported mode {mode!r}: Reservoir files are read-only")
        raw = ReservoirFile(self, self.stat(path))
        return io.BufferedReader(raw, buffer_size=buffering if buffering > 0 else 1 << 20)

    # ---- cache rules: pin, TTL, free (see AsyncClient) -----------------------------------

    def pin(self, path: str) -> master_pb2.PinResponse:
        return self._run(self._async.pin(path))

    def unpin(self, path: str) -> CacheRule:
        return self._run(self._async.unpin(path))

    def set_ttl(self, path: str, ttl: float | str) -> CacheRule:
        return self._run(self._async.set_ttl(path, ttl))

    def clear_ttl(self, path: str) -> CacheRule:
        return self._run(self._async.clear_ttl(path))

    def cache_rules(self) -> list[CacheRule]:
        return self._run(self._async.cache_rules())

    def free(self, path: str) -> master_pb2.FreeResponse:
        return self._run(self._async.free(path))


class ReservoirFile(io.RawIOBase):
    """An unbuffered reader over one file. Keeps the last block it read, so small
    sequential reads cost one worker call per block rather than one per read."""

    def __init__(self, client: Client, inode: Inode) -> None:
        super().__init__()
        if inode.is_dir:
            raise IsADirectory(f"{inode.path}: is a directory")
        self._client = client
        self._inode = inode
        self._pos = 0
        self._block_index = -1
        self._block = b""
        self.name = inode.path

    @property
    def size(self) -> int:
        return self._inode.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self._pos + offset
        elif whence == io.SEEK_END:
            target = self._inode.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if target < 0:
            raise ValueError("negative seek position")
        self._pos = target
        return target

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), max(0, self._inode.size - self._pos))
        if want == 0:
            return 0
        block_size = self._inode.block_size
        index = self._pos // block_size
        if want >= block_size:
            if self._pos % block_size == 0:
                # Whole blocks: from this host's block files straight into the caller's
                # buffer when they are there (no intermediate copy at all).
                whole = (
                    want
                    if self._pos + want == self._inode.size
                    else want // block_size * block_size
                )
                if self._client._async.local_reads.read_blocks_into(
                    self._inode, index, view[:whole]
                ):
                    self._pos += whole
                    return whole
            # From the received buffers into the caller's: one copy.
            filled = 0
            for piece in self._client._read_inode(self._inode, self._pos, want):
                view[filled : filled + len(piece)] = piece
                filled += len(piece)
            self._pos += filled
            return filled
        if index != self._block_index:
            self._block = _joined(
                self._client._read_inode(self._inode, index * block_size, block_size)
            )
            self._block_index = index
        start = self._pos - index * block_size
        n = min(want, len(self._block) - start)
        view[:n] = self._block[start : start + n]
        self._pos += n
        return n

    def readall(self) -> bytes:
        data = _joined(self._client._read_inode(self._inode, self._pos, -1))
        self._pos += len(data)
        return data


def _joined(pieces: Sequence[bytes | memoryview]) -> bytes:
    """The pieces as one `bytes`; a single whole `bytes` piece is returned as it is."""
    if len(pieces) == 1 and type(pieces[0]) is bytes:
        return pieces[0]
    return b"".join(pieces)
