"""Where a block being fetched is received: the memory it will live in, not a buffer it is
copied out of (`UnderStore.get_range_into`). One copy in (socket to block), the CRC32C
taken once over the block where it lies, and for the shared-memory tier, the first reader
served from the block file (sendfile): one copy out.

- `BytesLanding` (memory tier): a new `bytes` object, filled in place; the tier keeps it.
- `FileLanding` (shared-memory tier): the block file under a temporary name, its bytes
  mapped; the tier publishes it (header written, then renamed: readers see the whole
  block or no file) instead of writing a file of its own. Not kept (the tier was full):
  the temporary file goes, and the mapping serves the readers that wait for the fetch.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets

from reservoir.common.blocks.block_file import HEADER_SIZE, header
from reservoir.common.blocks.fresh_bytes import bytes_to_fill, finished_bytes


class BytesLanding:
    """A block received into a new `bytes` object (what the memory tier keeps)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self._result, self.buffer = bytes_to_fill(length)
        self._data: bytes | None = None

    def data(self) -> bytes | memoryview:
        """The block, once `buffer` is filled: the object itself, never copied."""
        if self._data is None:
            self._data = finished_bytes(self._result, self.buffer)
        return self._data

    def close(self) -> None:
        """Nothing to remove: an unused object is freed with its last reference (which a
        receive still under way holds, through its view)."""


class FileLanding:
    """A block received into its block file (shared-memory tier), mapped, under a
    temporary name until `publish`."""

    def __init__(self, directory: str, name: str, length: int) -> None:
        self.length = length
        self._temporary = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.landing")
        fd = os.open(self._temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, HEADER_SIZE + length)
            self._map = mmap.mmap(fd, HEADER_SIZE + length) if length else None
        except BaseException:
            os.close(fd)
            os.unlink(self._temporary)
            raise
        os.close(fd)
        whole = memoryview(self._map) if self._map is not None else memoryview(bytearray())
        self.buffer = whole[HEADER_SIZE:] if self._map is not None else whole
        self._published = False

    def data(self) -> bytes | memoryview:
        """The block's bytes where they lie (read-only: the file is the block's)."""
        return self.buffer.toreadonly()

    def holds(self, data: object) -> bool:
        """Whether `data` is this landing's block (handed out by `data`)."""
        return isinstance(data, memoryview) and data.obj is self.buffer.obj

    def publish(self, path: str, crc: int, offset: int) -> None:
        """The block file under its name `path`, its header written: readers may open it."""
        if self._map is not None:
            self._map[:HEADER_SIZE] = header(crc, self.length, offset)
        else:
            with open(self._temporary, "r+b") as file:
                file.write(header(crc, self.length, offset))
        os.chmod(self._temporary, 0o444)  # block files are read-only
        os.replace(self._temporary, path)
        self._published = True

    def close(self) -> None:
        """The temporary file goes unless published; the mapping stays while the bytes
        are read through it (an evicted block file's bytes stay for its readers too)."""
        if not self._published:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temporary)


BlockLanding = BytesLanding | FileLanding
