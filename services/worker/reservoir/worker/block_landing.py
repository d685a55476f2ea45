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

from .spare_block_files import SpareBlockFiles

_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux


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
    temporary name until `publish`; in a spare file's pages when `spares` has one, and
    given to them when not published (spare_block_files.py)."""

    def __init__(
        self, directory: str, name: str, length: int, spares: SpareBlockFiles | None = None
    ) -> None:
        self.length = length
        self._spares = spares
        self._temporary = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.landing")
        size = HEADER_SIZE + length
        spare = spares.take(size) if spares is not None and length else None
        if spare is not None:
            os.rename(spare[0], self._temporary)
            fd = os.open(self._temporary, os.O_RDWR)
        else:
            fd = os.open(self._temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if spare is None or spare[1] != size:
                os.ftruncate(fd, size)
            # A spare's pages are there: mapping them all at once saves a fault per page.
            flags = mmap.MAP_SHARED | (_MAP_POPULATE if spare is not None else 0)
            self._map = mmap.mmap(fd, size, flags=flags) if length else None
        except BaseException:
            os.close(fd)
            os.unlink(self._temporary)
            raise
        os.close(fd)
        self._whole = memoryview(self._map) if self._map is not None else memoryview(bytearray())
        self.buffer = self._whole[HEADER_SIZE:] if self._map is not None else self._whole
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
        """Unless published, the temporary file goes to the spares or away; the mapping
        stays while the bytes are read through it (an evicted block file's bytes stay for
        its readers too)."""
        if self._published:
            return
        spares, size = self._spares, HEADER_SIZE + self.length
        if spares is not None and self._map is not None and spares.retire(size, self._release):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._temporary)

    def _release(self) -> str | None:
        """The temporary file's path once the mapping is closed; None while a view of it
        (a waiter sending the block) remains."""
        try:
            self.buffer.release()
            self._whole.release()
            self._map.close()  # type: ignore[union-attr]  # retired only with a mapping
        except BufferError:
            return None
        return self._temporary


BlockLanding = BytesLanding | FileLanding
