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
`data_write_timeout_s` is closed. This module listens and opens each connection's
channel; a connection's requests are `data_port_connection.py`'s, who may read on it
`data_port_admission.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks.data_protection import Level
from reservoir.common.errors import InvalidArgument
from reservoir.common.serving.auth import TokenTable

from .data_port_admission import Admission
from .data_port_connection import Connection
from .data_port_metrics import DataPortMetrics
from .data_port_transport import ByteChannel, PlainChannel, TlsChannel
from .sealed_channel import SealedChannel
from .service import WorkerService

log = logs.get_logger(__name__)


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
        admission = Admission(channel, self._tokens, self._level)
        await Connection(channel, self._service, self._config, self._metrics, admission).serve()
