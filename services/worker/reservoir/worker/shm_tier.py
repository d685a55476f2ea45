"""The shared-memory tier: blocks as files in a tmpfs directory (e.g. /dev/shm).

The memory tier's accounting and eviction policy, with each block kept as a block file (see
`reservoir.common.blocks.block_file`: a header with its length, offset and checksum, then the
bytes) that a client on the same host may read directly (short-circuit). A block appears
under its final name only once complete (write, then rename). The worker never trusts the
file: every read copies the bytes out and verifies them against the checksum it took
when the block landed, and a block that fails is dropped, never served. Eviction unlinks
the file: a reader that already opened it still reads the old, intact bytes.

On a cluster with authentication the files sit one level down, in a directory with an
unguessable name inside a directory others may traverse but not list (0711): a process on
the host reaches the blocks only through the name, which the master gives only to a caller
with a token (ListWorkers). Short-circuit stays local, and needs a token too.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reservoir.common.blocks.block_file import (
    HEADER_SIZE,
    header,
    read_block_file,
    write_block_file,
)
from reservoir.common.errors import DataLoss
from reservoir.common.models import shm_block_name

from .block_landing import BlockLanding, FileLanding
from .eviction import EvictionPolicy
from .memory_tier import BlockData, BlockFileRef, BlockId, HeldBlock, MemoryTier
from .spare_block_files import SpareBlockFiles


class ShmTier(MemoryTier):
    name = "shm"

    def __init__(
        self,
        directory: str,
        capacity_bytes: int,
        on_evict: Callable[[BlockId, int], None] | None,
        policy: EvictionPolicy | None = None,
        *,
        unlisted: bool = False,
        spare_bytes: int = 0,
    ) -> None:
        super().__init__(capacity_bytes, on_evict, policy)
        root = Path(directory)
        # A restarted worker starts empty: the location table was told so (full report).
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        self.directory = root
        if unlisted:
            root.chmod(0o711)
            self.directory = root / secrets.token_hex(16)
            self.directory.mkdir(mode=0o755)
        self.spares = SpareBlockFiles(self.directory, spare_bytes) if spare_bytes > 0 else None

    def preallocate(self, block_length: int) -> int:
        """Fills the spares with files for blocks of `block_length` (at start, off the
        event loop), never taking room the tier's capacity needs; returns how many were
        made."""
        if self.spares is None:
            return 0
        room = max(0, self.capacity_bytes - self.used_bytes)
        return self.spares.preallocate(HEADER_SIZE + block_length, room)

    def _path(self, block: BlockId) -> str:
        return str(self.directory / shm_block_name(*block))

    def _keep(self, block: BlockId, data: bytes | memoryview, crc: int, offset: int) -> Any:
        landing = self._landings.get(block)
        if isinstance(landing, FileLanding) and landing.holds(data):
            landing.publish(self._path(block), crc, offset)  # received in place: named
            return None
        # A written block (a checkpoint's) or one moved up from disk: into a spare's pages
        # when there is one of its size.
        spare = self.spares.take(HEADER_SIZE + len(data)) if self.spares and len(data) else None
        write_block_file(self._path(block), data, crc, offset, spare=spare[0] if spare else None)
        return None

    def _new_landing(self, block: BlockId, length: int) -> BlockLanding:
        return FileLanding(str(self.directory), shm_block_name(*block), length, self.spares)

    def _rekey(self, old: BlockId, new: BlockId, entry: HeldBlock, offset: int) -> Any:
        # The file gets the new offset in its header, then the new name: a reader finds
        # the block under its name whole or not at all (nobody reads a staged block).
        path = self._path(old)
        os.chmod(path, 0o644)  # block files are read-only (0444), to their owner too
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, header(entry.crc, entry.length, offset), 0)
        finally:
            os.close(fd)
            os.chmod(path, 0o444)
        os.replace(path, self._path(new))
        return None

    def _load(self, block: BlockId, entry: HeldBlock) -> BlockData:
        try:
            data, crc = read_block_file(self._path(block), entry.length, entry.offset)
        except FileNotFoundError as exc:
            raise DataLoss(f"block file of {block[0]}:{block[1]} is gone") from exc
        if crc != entry.crc:
            raise DataLoss(f"block file of {block[0]}:{block[1]} was rewritten")
        return data

    def file_of(self, block: BlockId) -> BlockFileRef | None:
        entry = self._blocks.get(block)
        if entry is None:
            return None
        self.policy.on_access(block)
        self.hits += 1
        return BlockFileRef(self._path(block), HEADER_SIZE, entry.length, entry.crc)

    def read_directly(self, block: BlockId) -> bool:
        # tmpfs keeps access times (relatime: a read moves atime only while it is not
        # after mtime), so atime past mtime means "read since reset"; putting atime back
        # to mtime (the owner may, on a read-only file) arms it for the next read.
        path = self._path(block)
        try:
            st = os.stat(path)
            read = st.st_atime_ns > st.st_mtime_ns
            if read:
                os.utime(path, ns=(st.st_mtime_ns, st.st_mtime_ns))
        except FileNotFoundError:
            return False
        return read

    def _release(self, block: BlockId) -> None:
        Path(self._path(block)).unlink(missing_ok=True)
