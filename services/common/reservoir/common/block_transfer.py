"""The block transfer protocol of a worker's data port: block ranges over plain TCP.

gRPC costs each side ~0.5 ms of CPU per call and tops out near 1 GB/s per stream in Python
on a 2-core machine; block bytes on a socket of their own cost ~50 us per request and
reach the loopback ceiling (~4 GB/s), received straight into the reader's buffer. So the
data port carries block bytes and nothing else; everything else (and every read the data
port cannot answer) stays on gRPC.

One request at a time per connection; a connection serves many in turn.

    request:  magic "RSVB" | version u8 | 3 reserved bytes | body length u32
              | body: a serialized `ReadBlockRequest`
    response: status u8 (0, or the error table's code value) | 3 reserved bytes
              | crc32c u32 (of the range; 0 on error) | length u64
              | `length` bytes: the range, or on error a UTF-8 message

All integers little-endian. A worker answers a well-framed request it cannot serve with an
error response and keeps the connection; a malformed frame gets an error response and the
connection is closed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import InvalidArgument

MAGIC = b"RSVB"
VERSION = 1
REQUEST_HEADER = struct.Struct("<4sB3xI")
RESPONSE_HEADER = struct.Struct("<B3xIQ")
# A ReadBlockRequest is a few hundred bytes (ids, the under-store URI, the mount path).
MAX_REQUEST_BODY = 64 * 1024
# Error messages are short; a longer "error" is a broken peer.
MAX_ERROR_MESSAGE = 64 * 1024


def encode_request(body: bytes) -> bytes:
    return REQUEST_HEADER.pack(MAGIC, VERSION, len(body)) + body


def request_body_length(header: bytes) -> int:
    """The body length a request header announces; InvalidArgument when it is not one."""
    magic, version, length = REQUEST_HEADER.unpack(header)
    if magic != MAGIC:
        raise InvalidArgument("not a block transfer request (bad magic)")
    if version != VERSION:
        raise InvalidArgument(f"block transfer version {version} is not supported (only {VERSION})")
    if length > MAX_REQUEST_BODY:
        raise InvalidArgument(f"request body of {length} bytes exceeds {MAX_REQUEST_BODY}")
    return int(length)


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
