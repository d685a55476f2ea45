"""Where a GetObject's body comes from: each piece of it read from the cache, the large
ones on threads of their own.

A piece of `thread_read_bytes` or more (a large object's) is read on one of `read_threads`
threads by the client's thread path (`AsyncClient.thread_reads`): a same-host worker's
block file, else a worker's data port, straight into the bytes sent, checked against the
block's checksum. On the event loop the same read would stop every other response while
megabytes are copied and checked; on a thread it runs while the loop sends the pieces
before it (the copy and the checksum release the GIL). A smaller piece is read on the
loop: a file of a few KB costs less to read than the hop to a thread does.

What the thread path cannot read (a block no worker holds yet, a worker that fails, the
under-store) takes the client's full path on the loop (`AsyncClient.read_pieces`), which
fetches misses once, fails over and decides the error, exactly as before."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf

from reservoir.client.async_client import AsyncClient
from reservoir.common.config import GatewayConfig
from reservoir.common.models import Inode


class BodyReads:
    def __init__(self, config: GatewayConfig, client: AsyncClient) -> None:
        self._client = client
        self._thread_bytes = config.thread_read_bytes
        self._threads = (
            cf.ThreadPoolExecutor(config.read_threads, thread_name_prefix="gateway-body")
            if config.read_threads > 0
            else None
        )

    async def piece(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        """Bytes [offset, offset+length) of the version of the object `inode` describes
        when the thread path reads it, else of the file at its path (as `read_pieces`)."""
        if self._threads is not None and length >= self._thread_bytes:
            loop = asyncio.get_running_loop()
            reads = self._client.thread_reads
            data = await loop.run_in_executor(
                self._threads, reads.read_inode_bytes, inode, offset, length
            )
            if data is not None:
                return [memoryview(data)]
        return await self._client.read_pieces(inode.path, offset, length)

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
