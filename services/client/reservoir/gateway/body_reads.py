"""Where a GetObject's body comes from: each piece of it read from the cache on one of
`read_threads` threads, the way the blocking client reads; a small one first from a
same-host worker's block file on the event loop (cheaper than the hop to a thread).

On a thread a piece is read by the client's thread path (`AsyncClient.thread_reads`),
asking same-host workers' data ports too: a same-host worker's block file if it holds the
block, else a worker's data port (the worker fetches a miss from the under-store, once),
straight into the bytes sent and checked against the block's checksum. Two costs leave the
event loop that way: copying and checking megabytes of a large object (the loop sends the
pieces before it meanwhile; the copy and the checksum release the GIL), and the gRPC call
per cold object, whose client side costs the gateway more CPU than the rest of the request
(a data-port round trip is a plain socket write and read, on the worker too).

What the thread path does not read (a worker that fails, an object no worker can serve,
the under-store) takes the client's full path on the loop (`AsyncClient.read_pieces`),
which fails over and decides the error, exactly as before. So does every piece until the
client knows the worker list (its first read), and every piece when `read_threads` is 0."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf

from reservoir.client.async_client import AsyncClient
from reservoir.common.config import GatewayConfig
from reservoir.common.models import Inode


class BodyReads:
    def __init__(self, config: GatewayConfig, client: AsyncClient) -> None:
        self._client = client
        self._reads = client.thread_reads.asking_same_host_ports()
        self._files = client.thread_reads.block_files_only()
        self._thread_bytes = config.thread_read_bytes
        self._threads = (
            cf.ThreadPoolExecutor(config.read_threads, thread_name_prefix="gateway-body")
            if config.read_threads > 0
            else None
        )

    async def piece(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        """Bytes [offset, offset+length) of the version of the object `inode` describes
        when the thread path reads it, else of the file at its path (as `read_pieces`)."""
        if length < self._thread_bytes and self._files.can_read():
            # Measured: for a warm small object the hop to a thread and back costs the
            # gateway more CPU than the rest of the request does.
            data = self._files.read_inode_bytes(inode, offset, length)
            if data is not None:
                return [memoryview(data)]
        if self._threads is not None and self._reads.can_read():
            loop = asyncio.get_running_loop()
            data = await loop.run_in_executor(
                self._threads, self._reads.read_inode_bytes, inode, offset, length
            )
            if data is not None:
                return [memoryview(data)]
        return await self._client.read_pieces(inode.path, offset, length)

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
