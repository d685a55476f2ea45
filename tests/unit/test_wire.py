import os

import pytest

from reservoir.client.grpc_blocks import chunk_payload
from reservoir.v1 import worker_pb2
from reservoir.worker.servicer import encode_chunk


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 1 << 20, (4 << 20) + 3])
def test_hand_built_chunk_is_valid_protobuf_and_slices_back_exactly(size: int) -> None:
    payload = os.urandom(size)
    wire = encode_chunk(memoryview(payload))
    assert worker_pb2.BlockChunk.FromString(wire).data == payload
    assert bytes(chunk_payload(wire)) == payload


def test_truncated_chunk_is_rejected() -> None:
    wire = encode_chunk(memoryview(b"abcdef"))
    with pytest.raises(ConnectionError):
        chunk_payload(wire[:-1])


def test_the_checksum_trailer_round_trips() -> None:
    from reservoir.worker.servicer import encode_crc

    assert chunk_payload(encode_crc(0xDEADBEEF)) == 0xDEADBEEF
    assert chunk_payload(encode_crc(0)) == 0


@pytest.mark.parametrize("size", [0, 1, 200, 40_000, (1 << 20) + 5])
def test_hand_built_small_read_reply_is_a_valid_block_payload(size: int) -> None:
    from reservoir.worker.servicer import encode_payload

    payload = os.urandom(size)
    reply = worker_pb2.BlockPayload.FromString(encode_payload(memoryview(payload), 0xFEEDF00D))
    assert reply.data == payload
    assert reply.HasField("crc32c") and reply.crc32c == 0xFEEDF00D
    assert reply.code == 0 and reply.position == 0
