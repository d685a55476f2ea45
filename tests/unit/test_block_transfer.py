"""The data port's frames: what a worker accepts as a request header (a block read, or the
token that must come first on a worker that checks tokens), the response header both
sides read, and the token check a data port shares with the gRPC interceptor."""

from __future__ import annotations

import struct

import pytest

from reservoir.common import worker_methods
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from reservoir.common.serving import auth


def test_a_request_header_announces_its_kind_and_body_length() -> None:
    frame = wire.encode_request(b"x" * 300)
    header = frame[: wire.REQUEST_HEADER.size]
    assert wire.RequestHeader.decode(header) == wire.RequestHeader(wire.READ, 300)
    assert frame[wire.REQUEST_HEADER.size :] == b"x" * 300


def test_a_read_frame_is_the_frame_of_before_tokens_existed() -> None:
    # Version 1's header had three reserved zero bytes where the kind now is: a plain
    # cluster's readers and workers of either age speak the same bytes.
    old = struct.pack("<4sB3xI", b"RSVB", 1, 5) + b"hello"
    assert wire.encode_request(b"hello") == old


def test_an_auth_frame_carries_the_token() -> None:
    frame = wire.encode_auth("rsv_secret")
    header = wire.RequestHeader.decode(frame[: wire.REQUEST_HEADER.size])
    assert header == wire.RequestHeader(wire.AUTH, len("rsv_secret"))
    assert frame[wire.REQUEST_HEADER.size :] == b"rsv_secret"


@pytest.mark.parametrize(
    ("header", "says"),
    [
        (struct.pack("<4sB3xI", b"HTTP", wire.VERSION, 10), "magic"),
        (struct.pack("<4sB3xI", wire.MAGIC, 9, 10), "version 9"),
        (struct.pack("<4sB3xI", wire.MAGIC, wire.VERSION, wire.MAX_REQUEST_BODY + 1), "exceeds"),
        (struct.pack("<4sBB2xI", wire.MAGIC, wire.VERSION, 7, 10), "kind 7"),
    ],
)
def test_a_header_that_is_not_a_request_is_invalid_argument(header: bytes, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        wire.RequestHeader.decode(header)


def test_a_response_header_round_trips() -> None:
    header = wire.ResponseHeader(status=5, crc32c=0xDEADBEEF, length=2**40)
    raw = header.encode()
    assert len(raw) == wire.RESPONSE_HEADER.size
    assert wire.ResponseHeader.decode(raw) == header


def _table(*entries: tuple[str, str]) -> auth.TokenTable:
    return auth.TokenTable.parse(f"{role} {auth.token_hash(token)}" for role, token in entries)


@pytest.mark.parametrize("role", auth.ROLES)
def test_every_role_that_may_read_a_block_may_read_it_from_a_data_port(role: str) -> None:
    table = _table((role, "rsv_good"))
    assert auth.authorize_token(table, auth.READ_BLOCK, "rsv_good").role == role


@pytest.mark.parametrize("token", ["", "rsv_unknown"])
def test_a_data_port_token_that_is_missing_or_unknown_is_unauthenticated(token: str) -> None:
    with pytest.raises(Unauthenticated):
        auth.authorize_token(_table(("reader", "rsv_good")), auth.READ_BLOCK, token)


def test_the_data_port_and_the_interceptor_decide_alike() -> None:
    table = _table(("reader", "rsv_reader"))
    metadata = [("authorization", "Bearer rsv_reader")]
    assert auth.authorize(table, auth.READ_BLOCK, metadata) == auth.authorize_token(
        table, auth.READ_BLOCK, "rsv_reader"
    )
    # A reader may not load: the same rule refuses it whichever way the token came.
    load = worker_methods.LOAD_BLOCKS
    with pytest.raises(PermissionDenied):
        auth.authorize_token(table, load, "rsv_reader")
    with pytest.raises(PermissionDenied):
        auth.authorize(table, load, metadata)
