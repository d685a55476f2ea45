"""The block transfer protocol of a worker's data port: block ranges over TCP, or over
TLS on a cluster that runs TLS.

gRPC costs each side ~0.5 ms of CPU per call and tops out near 1 GB/s per stream in Python
on a 2-core machine; block bytes on a socket of their own cost ~50 us per request and
reach the loopback ceiling (~4 GB/s), received straight into the reader's buffer. So the
data port carries block bytes and nothing else; everything else (and every read the data
port cannot answer) stays on gRPC.

One request at a time per connection; a connection serves many in turn.

    request:  magic "RSVB" | version u8 | kind u8 | 2 reserved bytes | body length u32
              | body: kind 0 (READ): a serialized `ReadBlockRequest`
                      kind 1 (AUTH): the caller's bearer token, UTF-8
    response: status u8 (0, or the error table's code value) | 3 reserved bytes
              | crc32c u32 (of the range; 0 on error) | length u64
              | `length` bytes: the range, or on error a UTF-8 message

All integers little-endian. A worker answers a well-framed request it cannot serve with an
error response and keeps the connection; a malformed frame gets an error response and the
connection is closed.

The kind byte was a reserved zero before AUTH existed, so a READ frame is byte for byte what
it always was and a cluster without authentication speaks exactly the old protocol. A
worker that checks tokens (on a cluster with TLS and RESERVOIR_AUTH_TOKENS_FILE) wants an
AUTH frame first on every connection, its token allowed to call the worker's ReadBlock by
the same rules as gRPC (`reservoir.common.serving.auth`). It answers it with an empty OK response,
or with UNAUTHENTICATED / PERMISSION_DENIED and closes the connection; a READ before a
valid AUTH gets UNAUTHENTICATED and the connection is closed, before any byte of a block.
A reader may send its first READ right behind its AUTH (no round trip between). A worker
that checks no tokens answers an AUTH with OK and ignores the token.

On a secure cluster whose data protection level is `integrity` or `authentication`
(`data_protection.py`) the port is plain TCP and a reader proves its token without
sending it: HELLO (kind 2, a client nonce) answered by OK with the level and a server
nonce, then PROOF (kind 3, token id and HMAC) answered by OK or a refusal. With
`integrity` every READ response is then followed by a 16-byte tag.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from reservoir.common.errors import InvalidArgument

MAGIC = b"RSVB"
VERSION = 1
READ = 0
AUTH = 1
HELLO = 2
PROOF = 3
KINDS = (READ, AUTH, HELLO, PROOF)
REQUEST_HEADER = struct.Struct("<4sBB2xI")
RESPONSE_HEADER = struct.Struct("<B3xIQ")
# A ReadBlockRequest is a few hundred bytes (ids, the under-store URI, the mount path).
MAX_REQUEST_BODY = 64 * 1024
# Error messages are short; a longer "error" is a broken peer.
MAX_ERROR_MESSAGE = 64 * 1024


def encode_request(body: bytes) -> bytes:
    """A READ frame of a serialized `ReadBlockRequest`."""
    return REQUEST_HEADER.pack(MAGIC, VERSION, READ, len(body)) + body


def encode_auth(token: str) -> bytes:
    """An AUTH frame presenting `token`."""
    body = token.encode()
    return REQUEST_HEADER.pack(MAGIC, VERSION, AUTH, len(body)) + body


def encode_frame(kind: int, body: bytes) -> bytes:
    return REQUEST_HEADER.pack(MAGIC, VERSION, kind, len(body)) + body


@dataclass(frozen=True, slots=True)
class RequestHeader:
    kind: int
    length: int

    @classmethod
    def decode(cls, raw: bytes) -> RequestHeader:
        """The kind and body length a request header announces; InvalidArgument when it
        is not one."""
        magic, version, kind, length = REQUEST_HEADER.unpack(raw)
        if magic != MAGIC:
            raise InvalidArgument("not a block transfer request (bad magic)")
        if version != VERSION:
            raise InvalidArgument(
                f"block transfer version {version} is not supported (only {VERSION})"
            )
        if kind not in KINDS:
            raise InvalidArgument(f"block transfer request kind {kind} is not known")
        if length > MAX_REQUEST_BODY:
            raise InvalidArgument(f"request body of {length} bytes exceeds {MAX_REQUEST_BODY}")
        return cls(int(kind), int(length))


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    status: int
    crc32c: int
    length: int

    def encode(self) -> bytes:
        return RESPONSE_HEADER.pack(self.status, self.crc32c, self.length)

    @classmethod
    def decode(cls, raw: bytes | bytearray | memoryview) -> ResponseHeader:
        status, crc, length = RESPONSE_HEADER.unpack(raw)
        return cls(status, crc, length)
