"""The shared-memory tier: blocks as files in a tmpfs directory (e.g. /dev/shm).

Same role and LRU policy as MemoryTier, but each block is a file, mapped read-only for
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
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from reservoir.common.models import shm_block_name

from .memory_tier import BlockData, BlockId


class ShmTier:
    name = "shm"

    def __init__(
        self, directory: str, capacity_bytes: int, on_evict: Callable[[BlockId, int], None]
    ) -> None:
        self.directory = Path(directory)
        # A restarted worker starts empty: the location table was told so (full report).
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._blocks: OrderedDict[BlockId, BlockData] = OrderedDict()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._blocks

    def _path(self, block: BlockId) -> Path:
        return self.directory / shm_block_name(*block)

    def get(self, block: BlockId) -> BlockData | None:
        data = self._blocks.get(block)
        if data is not None:
            self._blocks.move_to_end(block)
        return data

    def put(self, block: BlockId, data: bytes) -> bool:
        if block in self._blocks:
            self._blocks.move_to_end(block)
            return True
        size = len(data)
        if size > self.capacity_bytes:
            return False
        while self.used_bytes + size > self.capacity_bytes and self._blocks:
            victim, old = self._blocks.popitem(last=False)
            self.used_bytes -= len(old)
            self._path(victim).unlink(missing_ok=True)
            self._on_evict(victim, len(old))
        path = self._path(block)
        tmp = path.with_name("." + path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        if size == 0:
            self._blocks[block] = b""
        else:
            with open(path, "rb") as f:
                self._blocks[block] = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
        self.used_bytes += size
        return True

    def blocks(self) -> list[BlockId]:
        return list(self._blocks)
