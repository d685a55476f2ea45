"""A read of one block range as a worker gets it, from gRPC or the data port: the domain
request, the window of the block it asks for, and that window's checksum."""

from __future__ import annotations

from reservoir.common.block_file import checksum
from reservoir.v1 import worker_pb2

from .service import BlockRequest


def domain_request(request: worker_pb2.ReadBlockRequest) -> BlockRequest:
    return BlockRequest(
        file_id=request.file_id,
        index=request.index,
        offset=request.offset,
        length=request.length,
        ufs_uri=request.ufs_uri,
        etag=request.etag,
        file_size=request.file_size,
        block_size=request.block_size,
        mount_path=request.mount_path,
    ).validated()


def window(request: BlockRequest, block_length: int) -> tuple[int, int]:
    start = min(request.offset, block_length)
    end = block_length if request.length < 0 else min(block_length, start + request.length)
    return start, end


def range_crc(view: memoryview, start: int, end: int, block_crc: int) -> int:
    return block_crc if (start, end) == (0, len(view)) else checksum(view[start:end])
