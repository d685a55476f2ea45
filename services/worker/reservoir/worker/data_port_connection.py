"""One connection of a worker's data port (`data_port.py`): requests read as they come
(up to `data_pipeline` ahead of the response being sent), the blocks they ask for looked
up or fetched at once, the responses sent in request order; who may read is the
connection's `Admission` (`data_port_admission.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry import propagate, trace

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.errors import (
    DataLoss,
    InvalidArgument,
    ReservoirError,
    Unauthenticated,
    code_value,
    status_for,
)
from reservoir.common.worker_methods import READ_BLOCK
from reservoir.v1 import worker_pb2

from .block_read import BlockRead, FileRead
from .data_port_admission import Admission
from .data_port_metrics import DataPortMetrics
from .data_port_transport import ByteChannel
from .read_request import BlockRequest, domain_request
from .read_trace import ReadTrace
from .service import WorkerService

log = logs.get_logger(__name__)
_tracer = trace.get_tracer("reservoir.worker")
# The operation is WorkerService's ReadBlock whichever way it came; the span says which.
_SPAN_NAME = READ_BLOCK
# The frames that admit a reader, each answered by an OK with the step's reply.
_ADMISSION: dict[int, Callable[[Admission, bytes], bytes]] = {
    wire.AUTH: Admission.token,
    wire.HELLO: Admission.hello,
    wire.PROOF: Admission.prove,
}


class _Closed(Exception):
    """The reader closed the connection between requests."""


@dataclass(slots=True)
class _Pending:
    """One request's answer to come, in the order requests arrived."""

    block: BlockRequest | None = None
    # Not started yet (the only request in hand), or started at once behind others.
    work: Coroutine[Any, Any, BlockRead] | asyncio.Future[BlockRead] | None = None
    error: ReservoirError | None = None
    close_after: bool = False
    # An AUTH, HELLO or PROOF frame accepted: an OK answers it, with `reply` as its body.
    accepted: bool = False
    reply: bytes = b""
    request: bytes = b""  # the READ's body: a sealed response's tag covers it
    # The whole block as a file of the shared-memory tier: sent by the channel's
    # send_file (sendfile in plain TCP).
    file: FileRead | None = None
    trace_context: dict[str, str] = field(default_factory=dict)
    received: float = field(default_factory=time.monotonic)

    def drop(self) -> None:
        if isinstance(self.work, asyncio.Future):
            self.work.cancel()
        elif self.work is not None:
            self.work.close()


class Connection:
    def __init__(
        self,
        channel: ByteChannel,
        service: WorkerService,
        config: cfg.WorkerConfig,
        metrics: DataPortMetrics,
        admission: Admission,
    ) -> None:
        self._channel = channel
        self._service = service
        self._config = config
        self._metrics = metrics
        self._admission = admission
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue(max(1, config.data_pipeline))
        self._outstanding = 0  # requests read whose response is not sent yet
        # Spans are recorded only with an SDK tracer provider (traces exported).
        self._recording = not isinstance(
            trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
        )

    async def serve(self) -> None:
        reader = asyncio.create_task(self._read_requests())
        try:
            await self._write_responses()
        except (ConnectionError, TimeoutError):
            pass  # the reader went away or stalled: nothing more to answer
        except OSError as exc:
            log.debug("data_port_connection_failed", error=str(exc))
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            while not self._queue.empty():
                item = self._queue.get_nowait()
                if item is not None:
                    item.drop()
            self._channel.close()

    async def _read_requests(self) -> None:
        try:
            while True:
                item = await self._next_request()
                await self._queue.put(item)
                if item.close_after:
                    return
        except (_Closed, ConnectionError, TimeoutError, OSError):
            pass  # no more requests: the ones in hand are still answered
        await self._queue.put(None)

    async def _next_request(self) -> _Pending:
        raw = await self._receive(wire.REQUEST_HEADER.size, between_requests=True)
        try:
            header = wire.RequestHeader.decode(raw)
        except InvalidArgument as exc:
            return _Pending(error=exc, close_after=True)
        if header.kind in _ADMISSION:
            body = await self._receive(header.length, between_requests=False)
            try:
                reply = _ADMISSION[header.kind](self._admission, body)
            except ReservoirError as exc:
                return _Pending(error=exc, close_after=True)
            return _Pending(accepted=True, reply=reply)
        if not self._admission.admitted:
            # Not even its body is read: nothing of this connection is served.
            refusal = Unauthenticated("a valid token is required first (AUTH, or a proof)")
            return _Pending(error=refusal, close_after=True)
        body = await self._receive(header.length, between_requests=False)
        try:
            try:
                request = worker_pb2.ReadBlockRequest.FromString(body)
            except DecodeError as exc:
                raise InvalidArgument("malformed ReadBlockRequest") from exc
            block = domain_request(request).validated()
            file = self._service.read_file(block)
        except ReservoirError as exc:
            return _Pending(error=exc, request=body)
        context = dict(request.trace_context)
        self._outstanding += 1
        if file is not None:
            return _Pending(block=block, file=file, trace_context=context, request=body)
        work: Coroutine[Any, Any, BlockRead] | asyncio.Future[BlockRead] = self._service.read(block)
        if self._outstanding > 1:
            # Behind other responses: look it up (or fetch it) now, not when its turn comes.
            work = asyncio.ensure_future(work)
        return _Pending(block=block, work=work, trace_context=context, request=body)

    async def _write_responses(self) -> None:
        while (item := await self._queue.get()) is not None:
            try:
                await self._respond(item)
            finally:
                if item.block is not None:
                    self._outstanding -= 1
            if item.close_after:
                return

    async def _respond(self, item: _Pending) -> None:
        if item.accepted:
            await self._send(wire.ResponseHeader(0, 0, len(item.reply)).encode() + item.reply)
            return
        with self._span(item.trace_context):
            code = await self._answer(item)
        self._metrics.answered(code, time.monotonic() - item.received)

    def _span(self, trace_context: dict[str, str]) -> contextlib.AbstractContextManager[Any]:
        if not trace_context and not self._recording:
            # No trace to continue and no span to record: a no-op span costs ~10 us.
            return contextlib.nullcontext()
        parent = propagate.extract(trace_context) if trace_context else None
        return _tracer.start_as_current_span(
            _SPAN_NAME,
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes={"reservoir.transport": "data_port"},
        )

    async def _answer(self, item: _Pending) -> str:
        """Sends the response; returns its status code's name."""
        span_reads = ReadTrace(self._service.worker_id)  # this request's span
        if item.file is not None and item.block is not None:
            if await self._send_file(item.file, item):
                self._service.served(item.file.source, item.file.ref.length, span_reads)
                return "OK"
            # Evicted between the lookup and now: read the usual way (from a lower tier,
            # or fetched again).
            item.work = self._service.read(item.block)
        if item.error is not None or item.work is None:
            return await self._send_error(item.error or InvalidArgument("no request"), item)
        try:
            read = await item.work
        except ReservoirError as exc:
            return await self._send_error(exc, item)
        # Counted by the read; put on the span here, as a pipelined read ran before the
        # span of its response began.
        span_reads.add(read.source, read.length)
        header = wire.ResponseHeader(0, read.crc, read.length).encode()
        view = read.view()
        if self._admission.sealed is not None:
            with self._dropped_if_corrupt(item):
                await self._admission.sealed.send_view(item.request, header, view, read.crc)
            return "OK"
        await self._send(header, more=read.length > 0)
        await self._send(view)
        return "OK"

    async def _send_file(self, file: FileRead, item: _Pending) -> bool:
        """The block file's bytes, by sendfile (no copy through this process); False when
        the file is gone (evicted) before it could be opened."""
        fd = file.open()
        if fd is None:
            return False
        try:
            ref = file.ref
            header = wire.ResponseHeader(0, ref.crc, ref.length).encode()
            if self._admission.sealed is not None:
                with self._dropped_if_corrupt(item):
                    await self._admission.sealed.send_file(
                        item.request, header, fd, ref.offset, ref.length, ref.crc
                    )
                return True
            await self._send(header, more=ref.length > 0)
            await self._channel.send_file(fd, ref.offset, ref.length)
        finally:
            os.close(fd)
        return True

    @contextlib.contextmanager
    def _dropped_if_corrupt(self, item: _Pending) -> Iterator[None]:
        """A block found changed while it was sealed is dropped (the next read fetches it
        again) and the connection closed: its response may be half sent."""
        try:
            yield
        except DataLoss as exc:
            if item.block is not None:
                self._service.store.drop_corrupt(item.block.block, str(exc))
            raise ConnectionError(f"block changed since it landed: {exc}") from exc

    async def _receive(self, n: int, *, between_requests: bool) -> bytes:
        buffer = bytearray(n)
        view = memoryview(buffer)
        filled = 0
        while filled < n:
            got = await self._channel.receive_into(view[filled:])
            if got == 0:
                if between_requests and filled == 0:
                    raise _Closed
                raise ConnectionError(f"closed after {filled} of {n} bytes")
            filled += got
        return bytes(buffer)

    async def _send(self, data: bytes | memoryview, *, more: bool = False) -> None:
        """All of `data`; `more`: bytes follow at once (a header before its body)."""
        await self._channel.send(data, more=more)

    async def _send_error(self, error: ReservoirError, item: _Pending) -> str:
        message = (str(error) or type(error).__name__).encode()[: wire.MAX_ERROR_MESSAGE]
        header = wire.ResponseHeader(code_value(error), 0, len(message)).encode()
        tag = (
            self._admission.sealed.tag(item.request, header, message)
            if self._admission.sealed
            else b""
        )
        await self._send(header + message + tag)
        return str(status_for(error).name)
