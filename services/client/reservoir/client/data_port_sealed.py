"""A reader's `privacy` data port connection once TLS has agreed its keys: records sealed
with AES-GCM on the bare TCP connection (`reservoir.common.blocks.sealed_records`, where
the format and the reasons are).

A record is received whole into this connection's buffer and opened straight into the
caller's buffer when it has room for it (a block's bytes: the one copy is the decryption's
own), else into a buffer of its own that the next calls take from (a response header, an
error). It offers what `DataPortReader` uses of a socket: sendall, recv_into, settimeout,
close.
"""

from __future__ import annotations

import socket
import ssl

from reservoir.common.blocks.sealed_records import (
    KEY_BYTES,
    LENGTH,
    MAX_PLAINTEXT,
    TAG_BYTES,
    RecordOpener,
    RecordSealer,
    new_key,
)

from .data_port_tls import TlsConnection


class SealedConnection:
    def __init__(
        self,
        sock: socket.socket,
        opener: RecordOpener,
        sealer: RecordSealer,
        pending: bytes,
        session: ssl.SSLSession | None,
        session_reused: bool,
    ) -> None:
        self._sock = sock
        self._opener = opener
        self._sealer = sealer
        self._pending = memoryview(pending)  # bytes that came with TLS's last record
        self._record = bytearray()  # one record's ciphertext, grown to the largest seen
        self._plain = memoryview(b"")  # opened, not taken yet
        self.session = session
        self.session_reused = session_reused

    @classmethod
    def agree(cls, tls: TlsConnection) -> SealedConnection:
        """Our key, then the worker's, exchanged inside `tls` (whose handshake selected
        sealed records), and the connection that speaks records from then on."""
        mine = new_key()
        tls.sendall(mine)
        theirs = bytearray(KEY_BYTES)
        view, filled = memoryview(theirs), 0
        while filled < KEY_BYTES:
            got = tls.recv_into(view[filled:])
            if got == 0:
                raise ConnectionError("closed by the worker before the record keys were agreed")
            filled += got
        return cls(
            tls.sock,
            RecordOpener(bytes(theirs)),
            RecordSealer(mine),
            tls.leftover(),
            tls.session,
            tls.session_reused,
        )

    def settimeout(self, seconds: float | None) -> None:
        self._sock.settimeout(seconds)

    def sendall(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        records = [
            self._sealer.seal(view[start : start + MAX_PLAINTEXT])
            for start in range(0, len(view), MAX_PLAINTEXT)
        ]
        self._sock.sendall(b"".join(records) if len(records) != 1 else records[0])

    def recv_into(self, view: memoryview) -> int:
        """Up to len(view) bytes; 0 when the worker closed the connection between records.
        RecordRefused (a ConnectionError) when a record does not open."""
        if self._plain:
            return self._take(view)
        header = bytearray(LENGTH.size)
        if not self._fill(memoryview(header), at_boundary=True):
            return 0
        size = self._opener.body_size(header)
        if len(self._record) < size:
            self._record = bytearray(size)
        body = memoryview(self._record)[:size]
        self._fill(body, at_boundary=False)
        if len(view) >= size - TAG_BYTES:  # room for all of it: opened into the reader's buffer
            return self._opener.open_into(bytes(header), body, view)
        plain = memoryview(bytearray(size))
        self._plain = plain[: self._opener.open_into(bytes(header), body, plain)]
        return self._take(view)

    def close(self) -> None:
        self._sock.close()

    def _take(self, view: memoryview) -> int:
        n = min(len(view), len(self._plain))
        view[:n] = self._plain[:n]
        self._plain = self._plain[n:]
        return n

    def _fill(self, view: memoryview, *, at_boundary: bool) -> bool:
        filled = 0
        if self._pending:
            filled = min(len(view), len(self._pending))
            view[:filled] = self._pending[:filled]
            self._pending = self._pending[filled:]
        while filled < len(view):
            got = self._sock.recv_into(view[filled:])
            if got == 0:
                if at_boundary and filled == 0:
                    return False
                raise ConnectionError(f"closed inside a sealed record ({filled} bytes)")
            filled += got
        return True
