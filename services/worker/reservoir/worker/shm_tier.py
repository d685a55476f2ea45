"""The shared-memory tier: blocks as files in a tmpfs directory (e.g. /dev/shm).

The memory tier's LRU policy, with each block kept as a file, mapped read-only for
serving over gRPC, that a client on the same host may read directly (short-circuit).
A block appears under its final name only once complete (write, then rename), and its
content never changes (the name is its content identity), so a reader sees the whole
block or no file. Eviction unlinks the file: a reader that already opened it still reads
the old, intact bytes.
"""

from __future__ import annotations

import mmap
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from reservoir.common.models import shm_block_name

from .memory_tier import BlockData, BlockId, MemoryTier


class ShmTier(MemoryTier):
    name = "shm"

    def __init__(
        self, directory: str, capacity_bytes: int, on_evict: Callable[[BlockId, int], None]
    ) -> None:
        super().__init__(capacity_bytes, on_evict)
        self.directory = Path(directory)
        # A restarted worker starts empty: the location table was told so (full report).
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, block: BlockId) -> Path:
        return self.directory / shm_block_name(*block)

    def _keep(self, block: BlockId, data: bytes) -> BlockData:
        path = self._path(block)
        tmp = path.with_name("." + path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        if not data:
            return b""  # an empty file cannot be mapped
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), len(data), prot=mmap.PROT_READ)

    def _release(self, block: BlockId) -> None:
        # The mapping is dropped with the last reference (a stream may still use it).
        self._path(block).unlink(missing_ok=True)
