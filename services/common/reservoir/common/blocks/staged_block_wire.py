"""The wire form of `StageBlockRequest` and `WritePartRequest` (the same fields 1-4, two
more varints for a part), built and read without protobuf on the payload.

A staged block is a checkpoint's bytes on their second trip (the first goes to the
store): protobuf would copy each block into a message, again into its encoding, and once
more out of the parsed message on the worker. Built by hand, the request is one `join`
of a small header and the caller's buffer (gRPC takes only `bytes`), and the worker reads
the payload as a view into the bytes gRPC handed it. The encoding is protobuf's own (the
same bytes `StageBlockRequest.SerializeToString` makes), so either side may still use
the generated class.
"""

from __future__ import annotations

from dataclasses import dataclass

from reservoir.common.blocks.block_file import Buffer
from reservoir.common.errors import InvalidArgument

# Tags: field number << 3 | wire type (0 varint, 2 length-delimited, 5 fixed32).
_WRITE_ID = 1 << 3 | 2
_INDEX = 2 << 3 | 0
_DATA = 3 << 3 | 2
_CRC = 4 << 3 | 5
_NUMBER = 5 << 3 | 0
_BLOCK_SIZE = 6 << 3 | 0


def varint(n: int) -> bytes:
    """`n` as a protobuf varint (an int64: a negative one is ten bytes)."""
    out = bytearray()
    n &= (1 << 64) - 1  # negative int64s are ten bytes, two's complement
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_stage_request(
    write_id: str, index: int, data: Buffer, crc: int, number: int = 0, block_size: int = 0
) -> bytes:
    """`StageBlockRequest(write_id, index, data, crc32c)` on the wire, copying `data` once;
    with `number`, `WritePartRequest(write_id, first_block=index, data, crc32c, number,
    block_size)`."""
    name = write_id.encode()
    payload = memoryview(data).cast("B")
    head = b"".join(
        (
            bytes((_WRITE_ID,)),
            varint(len(name)),
            name,
            bytes((_INDEX,)),
            varint(index),
            bytes((_DATA,)),
            varint(len(payload)),
        )
    )
    tail = b""
    if number:
        tail = bytes((_NUMBER,)) + varint(number) + bytes((_BLOCK_SIZE,)) + varint(block_size)
    return b"".join((head, payload, bytes((_CRC,)), crc.to_bytes(4, "little"), tail))


@dataclass(frozen=True, slots=True)
class StagedBlock:
    write_id: str
    index: int  # a part's: its first block's
    data: memoryview  # a view into the request's bytes: no copy
    crc32c: int
    number: int = 0  # a part's number in its upload (WritePartRequest); 0: one block
    block_size: int = 0  # how a part is cut into blocks


def _read_varint(raw: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(raw) or shift > 63:
            raise InvalidArgument("a staged block's request is truncated or malformed")
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def decode_stage_request(raw: bytes) -> StagedBlock:
    """The request in `raw` (any field order, as protobuf allows; unknown fields skipped);
    InvalidArgument for bytes that are not one."""
    view = memoryview(raw)
    write_id, index, crc, number, block_size = "", 0, 0, 0, 0
    data = view[0:0]
    at = 0
    while at < len(view):
        tag, at = _read_varint(view, at)
        kind = tag & 7
        if kind == 0:
            value, at = _read_varint(view, at)
            signed = value - (1 << 64) if value >= 1 << 63 else value
            if tag == _INDEX:
                index = signed
            elif tag == _NUMBER:
                number = signed
            elif tag == _BLOCK_SIZE:
                block_size = signed
        elif kind == 2:
            length, at = _read_varint(view, at)
            if at + length > len(view):
                raise InvalidArgument("a staged block's request is truncated")
            field = view[at : at + length]
            at += length
            if tag == _WRITE_ID:
                try:
                    write_id = bytes(field).decode()
                except UnicodeDecodeError as exc:
                    raise InvalidArgument("a staged block's write id is not UTF-8") from exc
            elif tag == _DATA:
                data = field
        elif kind == 5:
            if at + 4 > len(view):
                raise InvalidArgument("a staged block's request is truncated")
            if tag == _CRC:
                crc = int.from_bytes(view[at : at + 4], "little")
            at += 4
        elif kind == 1:
            at += 8
        else:
            raise InvalidArgument(f"a staged block's request has wire type {kind}")
    if at != len(view):
        raise InvalidArgument("a staged block's request is truncated")
    return StagedBlock(write_id, index, data, crc, number, block_size)
