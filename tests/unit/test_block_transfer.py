"""The data port's frames: what a worker accepts as a request header, and the response
header both sides read."""

from __future__ import annotations

import struct

import pytest

from reservoir.common import block_transfer as wire
from reservoir.common.errors import InvalidArgument


def test_a_request_header_announces_its_body_length() -> None:
    frame = wire.encode_request(b"x" * 300)
    header = frame[: wire.REQUEST_HEADER.size]
    assert wire.request_body_length(header) == 300
    assert frame[wire.REQUEST_HEADER.size :] == b"x" * 300


@pytest.mark.parametrize(
    ("header", "says"),
    [
        (struct.pack("<4sB3xI", b"HTTP", wire.VERSION, 10), "magic"),
        (struct.pack("<4sB3xI", wire.MAGIC, 9, 10), "version 9"),
        (struct.pack("<4sB3xI", wire.MAGIC, wire.VERSION, wire.MAX_REQUEST_BODY + 1), "exceeds"),
    ],
)
def test_a_header_that_is_not_a_request_is_invalid_argument(header: bytes, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        wire.request_body_length(header)


def test_a_response_header_round_trips() -> None:
    header = wire.ResponseHeader(status=5, crc32c=0xDEADBEEF, length=2**40)
    raw = header.encode()
    assert len(raw) == wire.RESPONSE_HEADER.size
    assert wire.ResponseHeader.decode(raw) == header
