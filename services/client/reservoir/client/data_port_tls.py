"""A blocking TLS connection to a worker's data port, with the socket I/O done here and
only the cipher in OpenSSL (`ssl.SSLObject` over memory buffers).

`SSLSocket.recv_into` costs two `recv` calls per 16 KiB record (OpenSSL reads a record's
header, then its body); here one `recv` takes whatever has arrived (up to 256 KiB, many
records) and OpenSSL decrypts them from memory: ~30 % more bytes per second for one
stream in a loopback microbenchmark (end to end, where the worker's side and other
readers share the CPU, the two measured alike: bench/README.md, secure_read_bench). It
offers what `DataPortReader` uses of a socket: sendall, recv_into, settimeout, close.
"""

from __future__ import annotations

import socket
import ssl
from typing import cast

from reservoir.common.blocks.data_protection import SEALED_ALPN

# What one recv may take: many TLS records, so one system call feeds many decryptions.
_RECEIVE_BYTES = 256 * 1024


class TlsConnection:
    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        server_hostname: str,
        session: ssl.SSLSession | None,
    ) -> None:
        """The client side of the handshake on connected `sock` (its timeout applies to
        each step); ssl.SSLError or OSError when it fails."""
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_hostname=server_hostname, session=session
        )
        self._raw = bytearray(_RECEIVE_BYTES)
        while not self._handshake_done():
            self._flush()
            if not self._fill():
                raise ConnectionError("closed by the worker during the TLS handshake")
        self._flush()

    def _handshake_done(self) -> bool:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    @property
    def offers_sealed_records(self) -> bool:
        """The handshake chose sealed records for what follows it (`data_port_sealed.py`)."""
        return self._tls.selected_alpn_protocol() == SEALED_ALPN

    @property
    def sock(self) -> socket.socket:
        return self._sock

    def leftover(self) -> bytes:
        """What the worker sent after TLS's last record: the start of what follows TLS."""
        return self._incoming.read()

    @property
    def session(self) -> ssl.SSLSession | None:
        return self._tls.session

    @property
    def session_reused(self) -> bool:
        return self._tls.session_reused

    def settimeout(self, seconds: float | None) -> None:
        self._sock.settimeout(seconds)

    def sendall(self, data: bytes | memoryview) -> None:
        self._tls.write(data)
        self._flush()

    def recv_into(self, view: memoryview) -> int:
        """Up to len(view) bytes; 0 when the worker closed the connection."""
        while True:
            try:
                # With a buffer, read returns the count (typeshed says bytes).
                n = cast(int, self._tls.read(len(view), view))  # type: ignore[arg-type]
            except ssl.SSLWantReadError:
                if not self._fill():
                    return 0
                continue
            except ssl.SSLZeroReturnError:
                return 0
            if self._outgoing.pending:  # e.g. the answer to a key update
                self._flush()
            return n

    def close(self) -> None:
        self._sock.close()

    def _flush(self) -> None:
        if self._outgoing.pending:
            self._sock.sendall(self._outgoing.read())

    def _fill(self) -> bool:
        """False at the end of the stream."""
        n = self._sock.recv_into(self._raw)
        if n == 0:
            return False
        self._incoming.write(memoryview(self._raw)[:n])
        return True
