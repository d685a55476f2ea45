"""A read of one block range as a worker gets it off the wire (gRPC or the data port):
the domain request `WorkerService.read` answers, and how it is checked against what it
claims before any work is done."""

from __future__ import annotations

from dataclasses import dataclass, fields

from reservoir.common.errors import InvalidArgument, OutOfRange
from reservoir.common.models import MAX_BLOCK_SIZE, file_id_for
from reservoir.common.paths import shown
from reservoir.v1 import worker_pb2

from .memory_tier import BlockId


@dataclass(frozen=True, slots=True)
class BlockRequest:
    file_id: str
    index: int
    offset: int
    length: int  # -1 = to the end of the block
    ufs_uri: str
    etag: str
    file_size: int
    block_size: int
    mount_path: str

    @property
    def block(self) -> BlockId:
        return (self.file_id, self.index)

    def validated(self) -> BlockRequest:
        """The request, checked against what it claims (once: the result is a
        `_ValidBlockRequest`, whose `validated` is itself)."""
        if not self.file_id or not self.ufs_uri or not self.mount_path:
            raise InvalidArgument("file_id, ufs_uri and mount_path are required")
        if self.block_size <= 0 or self.file_size < 0 or self.index < 0:
            raise InvalidArgument("block_size must be positive; file_size and index not negative")
        if self.block_size > MAX_BLOCK_SIZE:
            raise InvalidArgument(f"block_size must be at most {MAX_BLOCK_SIZE} bytes")
        _check_object_uri(self.ufs_uri)
        if self.file_id != file_id_for(self.ufs_uri, self.etag, self.file_size, self.block_size):
            raise InvalidArgument("file_id does not match (ufs_uri, etag, file_size, block_size)")
        if self.index > 0 and self.index * self.block_size >= self.file_size:
            raise OutOfRange(f"block {self.index} is past the end of the file")
        if self.offset < 0 or self.length < -1:
            raise InvalidArgument("offset must not be negative; length must be >= -1")
        return _ValidBlockRequest(**{f.name: getattr(self, f.name) for f in fields(self)})

    @property
    def block_length(self) -> int:
        return max(0, min(self.block_size, self.file_size - self.index * self.block_size))


@dataclass(frozen=True, slots=True)
class _ValidBlockRequest(BlockRequest):
    """A BlockRequest that passed `validated`."""

    def validated(self) -> BlockRequest:
        return self


def _check_object_uri(uri: str) -> None:
    """An object's URI names it as a Reservoir path would: no '.', '..' or empty segment
    after the bucket. An S3 client or HTTP layer may resolve '..', so
    `s3://bucket/mount/../../other` would read outside its mount; refused before any fetch."""
    scheme, sep, rest = uri.partition("://")
    if not sep or not scheme:
        raise InvalidArgument(f"ufs_uri is not a URI: {shown(uri)}")
    _, _, key = rest.partition("/")  # after the bucket (or the empty host of file:///)
    if "\x00" in key or any(part in ("", ".", "..") for part in key.split("/")):
        raise InvalidArgument(
            f"ufs_uri must name an object without '.', '..' or '//': {shown(uri)}"
        )


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
