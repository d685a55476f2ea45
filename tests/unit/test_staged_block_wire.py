import os

import pytest

from reservoir.common.blocks.staged_block_wire import decode_stage_request, encode_stage_request
from reservoir.common.errors import InvalidArgument
from reservoir.v1 import worker_pb2

WRITE_ID = "w-0123456789abcdef"


@pytest.mark.parametrize("size", [1, 127, 128, 16384, (4 << 20) + 3])
@pytest.mark.parametrize("index", [1, 300, 2**40])
def test_hand_built_stage_request_is_byte_for_byte_protobufs_encoding(
    size: int, index: int
) -> None:
    data = os.urandom(size)
    wire = encode_stage_request(WRITE_ID, index, memoryview(data), 0xFFFFFFFF)
    assert (
        wire
        == worker_pb2.StageBlockRequest(
            write_id=WRITE_ID, index=index, data=data, crc32c=0xFFFFFFFF
        ).SerializeToString()
    )
    staged = decode_stage_request(wire)
    assert (staged.write_id, staged.index, staged.crc32c) == (WRITE_ID, index, 0xFFFFFFFF)
    assert staged.data == data


@pytest.mark.parametrize("index", [0, -1, 5])
def test_default_and_negative_values_read_back_as_protobuf_reads_them(index: int) -> None:
    wire = encode_stage_request(WRITE_ID, index, b"", 0)
    parsed = worker_pb2.StageBlockRequest.FromString(wire)
    assert (parsed.write_id, parsed.index, parsed.data, parsed.crc32c) == (WRITE_ID, index, b"", 0)
    staged = decode_stage_request(wire)
    assert (staged.write_id, staged.index, bytes(staged.data), staged.crc32c) == (
        WRITE_ID,
        index,
        b"",
        0,
    )
    negative = worker_pb2.StageBlockRequest(write_id=WRITE_ID, index=index).SerializeToString()
    assert decode_stage_request(negative).index == index


def test_a_protobuf_built_request_decodes_with_the_payload_as_a_view_of_it() -> None:
    data = os.urandom(1 << 20)
    wire = worker_pb2.StageBlockRequest(
        write_id=WRITE_ID, index=7, data=data, crc32c=12345
    ).SerializeToString()
    staged = decode_stage_request(wire)
    assert (staged.write_id, staged.index, staged.crc32c) == (WRITE_ID, 7, 12345)
    assert staged.data == data
    assert staged.data.obj is wire  # no copy of the payload


@pytest.mark.parametrize("cut", [1, 3, 10])
def test_a_truncated_stage_request_is_refused(cut: int) -> None:
    wire = encode_stage_request(WRITE_ID, 3, b"0123456789abcdef", 9)
    with pytest.raises(InvalidArgument):
        decode_stage_request(wire[:-cut])


def test_a_hand_built_part_is_byte_for_byte_protobufs_write_part_request() -> None:
    data = os.urandom((2 << 20) + 5)
    wire = encode_stage_request(WRITE_ID, 8, data, 7, number=3, block_size=1 << 20)
    expected = worker_pb2.WritePartRequest(
        write_id=WRITE_ID, first_block=8, data=data, crc32c=7, number=3, block_size=1 << 20
    )
    assert wire == expected.SerializeToString()
    part = decode_stage_request(wire)
    assert (part.index, part.number, part.block_size, part.crc32c) == (8, 3, 1 << 20, 7)
    assert part.data == data
