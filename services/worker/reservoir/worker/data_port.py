"""The worker's data port: block ranges over the block transfer protocol
(`reservoir.common.block_transfer`), beside the gRPC service.

Like the servicer it only translates: a framed `ReadBlockRequest` in, `WorkerService.block`
asked, the range and its CRC32C out. Plain non-blocking sockets on the event loop, so the
held block is sent from where it lies (`sock_sendall` of a view: no copy in Python, none
into a transport buffer). A bad request gets an error response with the error table's
code; a malformed frame, a connection idle past `data_idle_timeout_s`, or a reader that
takes no bytes for `data_write_timeout_s` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from google.protobuf.message import DecodeError

from reservoir.common import block_transfer as wire
from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import InvalidArgument, ReservoirError, code_value
from reservoir.v1 import worker_pb2

from .read_request import domain_request, range_crc, window
from .service import WorkerService

log = logs.get_logger(__name__)


class _Closed(Exception):
    """The reader closed the connection between requests."""


class DataPort:
    def __init__(self, service: WorkerService, config: cfg.WorkerConfig) -> None:
        self._service = service
        self._config = config
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listens on `host:port` (port 0: any free one); returns the port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(socket.SOMAXCONN)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept())
        return int(listener.getsockname()[1])

    async def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def _accept(self) -> None:
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # e.g. out of descriptors: keep serving the others
                log.warning("data_port_accept_failed", error=str(exc))
                await asyncio.sleep(0.1)
                continue
            if len(self._connections) >= self._config.data_max_connections:
                log.warning("data_port_connection_refused", limit=self._config.data_max_connections)
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(self._serve(sock))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, sock: socket.socket) -> None:
        try:
            while await self._answer_one(sock):
                pass
        except (_Closed, ConnectionError, TimeoutError):
            pass  # the reader went away or stalled: nothing to answer
        except OSError as exc:
            log.debug("data_port_connection_failed", error=str(exc))
        finally:
            sock.close()

    async def _answer_one(self, sock: socket.socket) -> bool:
        """Serves one request; False when the connection is to be closed."""
        header = await self._receive(sock, wire.REQUEST_HEADER.size, between_requests=True)
        try:
            length = wire.request_body_length(header)
        except InvalidArgument as exc:
            await self._send_error(sock, exc)
            return False
        body = await self._receive(sock, length, between_requests=False)
        try:
            try:
                request = worker_pb2.ReadBlockRequest.FromString(body)
            except DecodeError as exc:
                raise InvalidArgument("malformed ReadBlockRequest") from exc
            block = domain_request(request)
            data, crc, source = await self._service.block(block)
        except ReservoirError as exc:
            await self._send_error(sock, exc)
            return True
        start, end = window(block, len(data))
        view = memoryview(data)
        crc = range_crc(view, start, end, crc)
        await self._send(sock, wire.ResponseHeader(0, crc, end - start).encode())
        await self._send(sock, view[start:end])
        self._service.served(end - start, source)
        return True

    async def _receive(self, sock: socket.socket, n: int, *, between_requests: bool) -> bytes:
        loop = asyncio.get_running_loop()
        buffer = bytearray(n)
        view = memoryview(buffer)
        filled = 0
        while filled < n:
            got = await asyncio.wait_for(
                loop.sock_recv_into(sock, view[filled:]), self._config.data_idle_timeout_s
            )
            if got == 0:
                if between_requests and filled == 0:
                    raise _Closed
                raise ConnectionError(f"closed after {filled} of {n} bytes")
            filled += got
        return bytes(buffer)

    async def _send(self, sock: socket.socket, data: bytes | memoryview) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_sendall(sock, data), self._config.data_write_timeout_s)

    async def _send_error(self, sock: socket.socket, error: ReservoirError) -> None:
        message = (str(error) or type(error).__name__).encode()[: wire.MAX_ERROR_MESSAGE]
        await self._send(
            sock, wire.ResponseHeader(code_value(error), 0, len(message)).encode() + message
        )
