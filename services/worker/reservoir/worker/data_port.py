"""The worker's data port: block ranges over the block transfer protocol
(`reservoir.common.block_transfer`), beside the gRPC service.

Like the servicer it only translates: a framed `ReadBlockRequest` in, `WorkerService.block`
asked, the range and its CRC32C out, written from the held block with no copy in Python.
A bad request gets an error response with the error table's code; a malformed frame, an
idle connection past `data_idle_timeout_s` or a reader that stops taking bytes for
`data_write_timeout_s` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib

from google.protobuf.message import DecodeError

from reservoir.common import block_transfer as wire
from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import InvalidArgument, ReservoirError, code_value
from reservoir.v1 import worker_pb2

from .read_request import domain_request, range_crc, window
from .service import WorkerService

log = logs.get_logger(__name__)


class DataPort:
    def __init__(self, service: WorkerService, config: cfg.WorkerConfig) -> None:
        self._service = service
        self._config = config
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listens on `host:port` (port 0: any free one); returns the port."""
        self._server = await asyncio.start_server(
            self._serve, host, port, limit=wire.MAX_REQUEST_BODY + wire.REQUEST_HEADER.size
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self._config.data_max_connections:
            log.warning("data_port_connection_refused", limit=self._config.data_max_connections)
            writer.close()
            return
        self._connections.add(task)
        writer.transport.set_write_buffer_limits(high=self._config.chunk_size)
        try:
            while await self._answer_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the reader went away or stalled: nothing to answer
        finally:
            self._connections.discard(task)
            writer.close()

    async def _answer_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serves one request; False when the connection is to be closed."""
        try:
            header = await asyncio.wait_for(
                reader.readexactly(wire.REQUEST_HEADER.size), self._config.data_idle_timeout_s
            )
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return False  # closed between requests: the normal end
        try:
            length = wire.request_body_length(header)
        except InvalidArgument as exc:
            await self._send_error(writer, exc)
            return False
        body = await asyncio.wait_for(reader.readexactly(length), self._config.data_idle_timeout_s)
        try:
            try:
                request = worker_pb2.ReadBlockRequest.FromString(body)
            except DecodeError as exc:
                raise InvalidArgument("malformed ReadBlockRequest") from exc
            block = domain_request(request)
            data, crc, source = await self._service.block(block)
        except ReservoirError as exc:
            await self._send_error(writer, exc)
            return True
        start, end = window(block, len(data))
        view = memoryview(data)
        crc = range_crc(view, start, end, crc)
        writer.write(wire.ResponseHeader(0, crc, end - start).encode())
        # The held block is immutable `bytes`: the transport keeps it alive until written.
        writer.write(view[start:end])
        await asyncio.wait_for(writer.drain(), self._config.data_write_timeout_s)
        self._service.served(end - start, source)
        return True

    async def _send_error(self, writer: asyncio.StreamWriter, error: ReservoirError) -> None:
        message = (str(error) or type(error).__name__).encode()[: wire.MAX_ERROR_MESSAGE]
        writer.write(wire.ResponseHeader(code_value(error), 0, len(message)).encode() + message)
        await asyncio.wait_for(writer.drain(), self._config.data_write_timeout_s)
