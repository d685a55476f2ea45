"""A blocking connection to a data port in clear that wants a token proof: a secure
cluster whose data protection level is `integrity` or `authentication`
(`reservoir.common.blocks.data_protection`, where the exchange is described).

`ProvenConnection.open` proves the token (HELLO, PROOF: one round trip each, once per
connection, which the reader's pool keeps) and, at `integrity`, holds the seal that checks
every response: the reader notes each request it sends (`sent`) and checks each response
against the oldest one (`check`), so a tampered, reordered or replayed response is caught.
It offers what `DataPortReader` uses of a socket: sendall, recv_into, settimeout, close.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections import deque

from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks import data_protection as protection
from reservoir.common.blocks.data_protection import Level, ResponseSeal, ResponseTag


class ProofRefused(Exception):
    """The worker answers, but not to us: the proof, or the level it asks, failed."""


class ProvenConnection:
    def __init__(self, sock: socket.socket, seal: ResponseSeal | None) -> None:
        self._sock = sock
        self.seal = seal
        self._requests: deque[bytes] = deque()

    @classmethod
    def open(
        cls, sock: socket.socket, token: str, level: Level, deadline: float
    ) -> ProvenConnection:
        """The proof on connected `sock`, by `deadline`; ProofRefused when the worker
        refuses it (or speaks another level than its record says), OSError or
        TimeoutError when the connection fails."""
        if not token:
            raise ProofRefused("the data port wants a token proof and this client has no token")
        digest = hashlib.sha256(token.encode()).digest()
        client_nonce = os.urandom(protection.NONCE_BYTES)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(wire.encode_frame(wire.HELLO, client_nonce))
        reply = _response(sock, "HELLO")
        if len(reply) != 1 + protection.NONCE_BYTES or reply[0] != level.code:
            raise ProofRefused(f"the data port does not speak the {level} level its record says")
        server_nonce = reply[1:]
        evidence = protection.proof(digest, client_nonce, server_nonce)
        sock.sendall(wire.encode_frame(wire.PROOF, protection.token_id(digest) + evidence))
        _response(sock, "PROOF")
        seal = None
        if level is Level.INTEGRITY:
            seal = ResponseSeal(protection.session_key(digest, client_nonce, server_nonce))
        return cls(sock, seal)

    def sent(self, request: bytes) -> None:
        """A READ request's body, sent: its response's tag covers it."""
        if self.seal is not None:
            self._requests.append(request)

    def begin(self, header: bytes) -> ResponseTag:
        """The tag of the response (its `header` received) to the oldest request not
        answered yet, to feed its body as it arrives."""
        assert self.seal is not None
        request = self._requests.popleft() if self._requests else b""
        return self.seal.begin(request, header)

    def settimeout(self, seconds: float | None) -> None:
        self._sock.settimeout(seconds)

    def sendall(self, data: bytes | memoryview) -> None:
        self._sock.sendall(data)

    def recv_into(self, view: memoryview) -> int:
        return self._sock.recv_into(view)

    def close(self) -> None:
        self._sock.close()


def _response(sock: socket.socket, what: str) -> bytes:
    """The body of the worker's answer to a HELLO or PROOF; ProofRefused for a refusal."""
    header = wire.ResponseHeader.decode(_exactly(sock, wire.RESPONSE_HEADER.size))
    if header.length > wire.MAX_ERROR_MESSAGE:
        raise ConnectionError(f"an answer of {header.length} bytes to {what}")
    body = _exactly(sock, header.length)
    if header.status != 0:
        message = body.decode(errors="replace")
        raise ProofRefused(f"the data port refused the {what} (status {header.status}): {message}")
    return body


def _exactly(sock: socket.socket, n: int) -> bytes:
    buffer = bytearray(n)
    view = memoryview(buffer)
    filled = 0
    while filled < n:
        got = sock.recv_into(view[filled:])
        if got == 0:
            raise ConnectionError("closed by the worker during the token proof")
        filled += got
    return bytes(buffer)
