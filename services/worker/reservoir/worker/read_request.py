"""A read of one block range as a worker gets it off the wire (gRPC or the data port),
translated into the domain request `WorkerService.read` validates and answers."""

from __future__ import annotations

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
    )
