"""Where a GetObject's body comes from, piece by piece: a same-host worker's block file
on the event loop; else, on one of `read_threads` threads, the client's thread path asking
workers' data ports (same-host ones too, which fetch a miss from the under-store once);
else the client's full asyncio path.

Measured (bench/README.md, the gateway's rows): the gRPC call per cold object cost the
gateway about 0.5 ms of its 1.1 ms CPU per object and the worker more than its data port
does; a data-port round trip is a plain socket write and read, on a thread because it
blocks. A block file already on this host is read on the loop: the hop to a thread and
back doubled the gateway's CPU per warm small object, and for 8 MiB pieces of warm large
objects it gained nothing measurable on two cores.

What neither reads (a worker that fails, an object no worker can serve, the under-store)
takes the full path (`AsyncClient.read_pieces`: gRPC, failover, the error the client
sees), exactly as before; so does every piece until the client knows the worker list (its
first read), and every piece not in a same-host file when `read_threads` is 0."""

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
        self._threads = (
            cf.ThreadPoolExecutor(config.read_threads, thread_name_prefix="gateway-body")
            if config.read_threads > 0
            else None
        )

    async def piece(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        """Bytes [offset, offset+length) of the version of the object `inode` describes
        when the thread path reads it, else of the file at its path (as `read_pieces`)."""
        if self._files.can_read():
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
