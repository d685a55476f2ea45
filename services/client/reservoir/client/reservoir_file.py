"""A file object over one Reservoir file, for `Client.open`."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from reservoir.common.errors import IsADirectory
from reservoir.common.models import Inode

if TYPE_CHECKING:
    from .client import Client


class ReservoirFile(io.RawIOBase):
    """An unbuffered reader over one file. Keeps the last block it read, so small
    sequential reads cost one worker call per block rather than one per read."""

    def __init__(self, client: Client, inode: Inode) -> None:
        super().__init__()
        if inode.is_dir:
            raise IsADirectory(f"{inode.path}: is a directory")
        self._client = client
        self._inode = inode
        self._pos = 0
        self._block_index = -1
        self._block = b""
        self.name = inode.path

    @property
    def size(self) -> int:
        return self._inode.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        bases = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._inode.size}
        if whence not in bases:
            raise ValueError(f"invalid whence {whence}")
        target = bases[whence] + offset
        if target < 0:
            raise ValueError("negative seek position")
        self._pos = target
        return target

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), max(0, self._inode.size - self._pos))
        if want == 0:
            return 0
        block_size = self._inode.block_size
        index = self._pos // block_size
        if want >= block_size:
            # Straight into the caller's buffer when this thread can read every block of
            # it (this host's block files, workers' data ports): no intermediate copy.
            if self._client._thread_reads().read_into(self._inode, self._pos, view[:want]):
                self._pos += want
                return want
            # From the received buffers into the caller's: one copy.
            filled = 0
            for piece in self._client._read_inode(self._inode, self._pos, want):
                view[filled : filled + len(piece)] = piece
                filled += len(piece)
            self._pos += filled
            return filled
        if index != self._block_index:
            self._block = joined(
                self._client._read_inode(self._inode, index * block_size, block_size)
            )
            self._block_index = index
        start = self._pos - index * block_size
        n = min(want, len(self._block) - start)
        view[:n] = self._block[start : start + n]
        self._pos += n
        return n

    def readall(self) -> bytes:
        data = joined(self._client._read_inode(self._inode, self._pos, -1))
        self._pos += len(data)
        return data


def joined(pieces: Sequence[bytes | memoryview]) -> bytes:
    """The pieces as one `bytes`; a single whole `bytes` piece is returned as it is."""
    if len(pieces) == 1 and type(pieces[0]) is bytes:
        return pieces[0]
    return b"".join(pieces)
