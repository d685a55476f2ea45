"""The worker's data port: block ranges over the block transfer protocol
(`reservoir.common.blocks.block_transfer`), beside the gRPC service.

Like the servicer it only translates: a framed `ReadBlockRequest` in, `WorkerService.read`
asked (or `read_file`, for a whole block held as a file), the range and its CRC32C out. The
bytes go over a `ByteChannel` (`data_port_transport.py`): plain TCP, where the held block
is sent from where it lies (a view, or `sendfile` of its block file), or, on a cluster that
runs TLS, TLS with this worker's certificate, which agrees the keys of the records that
carry the bytes after it (`sealed_channel.py`); this module does not know which. A worker that checks tokens
(RESERVOIR_AUTH_TOKENS_FILE) serves a connection nothing before an AUTH frame whose token
may call ReadBlock (`reservoir.common.serving.auth`: the gRPC interceptor's check, not a copy).
On a secure cluster whose data protection level is `integrity` or `authentication`
(`reservoir.common.blocks.data_protection`), the port is plain TCP, the reader proves its
token without sending it (HELLO, PROOF), and with `integrity` each response is sealed.
A reader may pipeline requests: they are read as they come (up to `data_pipeline` ahead
of the response being sent), the blocks they ask for are looked up or fetched at once
(misses from the under-store in parallel), and the responses go out in request order. A
bad request gets an error response with the error table's code; a malformed frame, a
connection idle past `data_idle_timeout_s`, or a reader that takes no bytes for
`data_write_timeout_s` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import socket
import ssl
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry import propagate, trace

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks import data_protection as protection
from reservoir.common.blocks.data_protection import Level, ResponseSeal
from reservoir.common.errors import (
    DataLoss,
    InvalidArgument,
    ReservoirError,
    Unauthenticated,
    code_value,
    status_for,
)
from reservoir.common.serving.auth import TokenTable, authorize_principal, authorize_token
from reservoir.common.worker_methods import READ_BLOCK
from reservoir.v1 import worker_pb2

from .block_read import BlockRead, FileRead
from .data_port_metrics import DataPortMetrics
from .data_port_transport import ByteChannel, PlainChannel, TlsChannel
from .read_request import BlockRequest, domain_request
from .read_trace import ReadTrace
from .sealed_channel import SealedChannel
from .sealed_responses import SealedResponses
from .service import WorkerService

log = logs.get_logger(__name__)
_tracer = trace.get_tracer("reservoir.worker")
# The operation is WorkerService's ReadBlock whichever way it came; the span says which.
_SPAN_NAME = READ_BLOCK


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


class DataPort:
    def __init__(
        self,
        service: WorkerService,
        config: cfg.WorkerConfig,
        metrics: DataPortMetrics,
        tls: ssl.SSLContext | None = None,
        tokens: TokenTable | None = None,
        level: Level | None = None,
    ) -> None:
        """`tls`: the port speaks TLS with this context; `tokens`: every connection must
        present one of them (AUTH, or a proof) before it is served; `level`: the data
        protection level of a secure cluster (below privacy: plain TCP and proofs)."""
        if level in (Level.INTEGRITY, Level.AUTHENTICATION) and (tls is not None or not tokens):
            raise InvalidArgument(
                f"RESERVOIR_DATA_PROTECTION={level}: a data port in clear with token proofs "
                "needs RESERVOIR_AUTH_TOKENS_FILE (and serves no TLS)"
            )
        self._service = service
        self._config = config
        self._metrics = metrics
        self._tls = tls
        self._tokens = tokens
        self._level = level
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
        idle, write = self._config.data_idle_timeout_s, self._config.data_write_timeout_s
        channel: ByteChannel
        if self._tls is None:
            channel = PlainChannel(sock, idle, write)
        else:
            try:
                tls = await TlsChannel.open(sock, self._tls, idle, write)
                channel = tls
                if tls.offers_sealed_records:
                    async with asyncio.timeout(idle):
                        channel = await SealedChannel.agree(tls)
            except (ssl.SSLError, OSError, TimeoutError) as exc:
                # Not TLS, or not with our CA: the reader gets a TLS alert at most.
                log.debug("data_port_handshake_failed", error=str(exc))
                sock.close()
                return
        await _Connection(
            channel, self._service, self._config, self._metrics, self._tokens, self._level
        ).serve()


class _Connection:
    def __init__(
        self,
        channel: ByteChannel,
        service: WorkerService,
        config: cfg.WorkerConfig,
        metrics: DataPortMetrics,
        tokens: TokenTable | None,
        level: Level | None = None,
    ) -> None:
        self._channel = channel
        self._service = service
        self._config = config
        self._metrics = metrics
        self._tokens = tokens
        self._authenticated = tokens is None
        # Proofs instead of tokens, on a port in clear; sealed responses once proven.
        self._proofs: Level | None = level if level is not Level.PRIVACY else None
        self._nonces: tuple[bytes, bytes] | None = None
        self._sealed: SealedResponses | None = None
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
        if header.kind == wire.AUTH:
            token = await self._receive(header.length, between_requests=False)
            if self._proofs is not None:
                in_clear = InvalidArgument(
                    "this data port is in clear: prove a token (HELLO, PROOF), never send it"
                )
                return _Pending(error=in_clear, close_after=True)
            return self._authenticate(token)
        if header.kind == wire.HELLO:
            return self._hello(await self._receive(header.length, between_requests=False))
        if header.kind == wire.PROOF:
            return self._prove(await self._receive(header.length, between_requests=False))
        if not self._authenticated:
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

    def _hello(self, client_nonce: bytes) -> _Pending:
        if self._proofs is None:
            refusal = InvalidArgument("this data port takes no HELLO (TLS, or no tokens)")
            return _Pending(error=refusal, close_after=True)
        if len(client_nonce) != protection.NONCE_BYTES or self._nonces is not None:
            return _Pending(error=InvalidArgument("a malformed or second HELLO"), close_after=True)
        server_nonce = os.urandom(protection.NONCE_BYTES)
        self._nonces = (client_nonce, server_nonce)
        return _Pending(accepted=True, reply=bytes([self._proofs.code]) + server_nonce)

    def _prove(self, body: bytes) -> _Pending:
        if self._proofs is None or self._nonces is None or self._tokens is None:
            return _Pending(error=InvalidArgument("a PROOF before its HELLO"), close_after=True)
        if len(body) != protection.TOKEN_ID_BYTES + protection.PROOF_BYTES:
            return _Pending(error=InvalidArgument("a malformed PROOF"), close_after=True)
        entry = self._tokens.entry(body[: protection.TOKEN_ID_BYTES])
        expected = protection.proof(entry[0], *self._nonces) if entry is not None else b""
        if entry is None or not hmac.compare_digest(expected, body[protection.TOKEN_ID_BYTES :]):
            refusal = Unauthenticated(
                "the token proof was refused: this cluster's tokens file does not list the "
                "token (a token of another cluster, mistyped, or revoked?)"
            )
            return _Pending(error=refusal, close_after=True)
        try:
            authorize_principal(entry[1], READ_BLOCK)
        except ReservoirError as exc:
            return _Pending(error=exc, close_after=True)
        self._authenticated = True
        if self._proofs is Level.INTEGRITY:
            seal = ResponseSeal(protection.session_key(entry[0], *self._nonces))
            self._sealed = SealedResponses(self._channel, seal)
        return _Pending(accepted=True)

    def _authenticate(self, token: bytes) -> _Pending:
        if self._tokens is None:
            return _Pending(accepted=True)  # no tokens checked here: nothing to prove
        try:
            authorize_token(self._tokens, READ_BLOCK, token.decode(errors="replace"))
        except ReservoirError as exc:
            return _Pending(error=exc, close_after=True)
        self._authenticated = True
        return _Pending(accepted=True)

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
        if self._sealed is not None:
            with self._dropped_if_corrupt(item):
                await self._sealed.send_view(item.request, header, view, read.crc)
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
            if self._sealed is not None:
                with self._dropped_if_corrupt(item):
                    await self._sealed.send_file(
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
        tag = self._sealed.tag(item.request, header, message) if self._sealed else b""
        await self._send(header + message + tag)
        return str(status_for(error).name)
