"""The memory tier: immutable blocks within a byte capacity, least recently used out first."""

from __future__ import annotations

import mmap
from collections import OrderedDict
from collections.abc import Callable

BlockId = tuple[str, int]  # (file_id, index)
BlockData = bytes | mmap.mmap  # what a tier hands out: immutable block bytes


class MemoryTier:
    """LRU within a byte capacity. Subclasses change where a block's bytes live by
    overriding `_keep` and `_release`; the policy stays here."""

    name = "mem"

    def __init__(self, capacity_bytes: int, on_evict: Callable[[BlockId, int], None]) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._blocks: OrderedDict[BlockId, BlockData] = OrderedDict()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._blocks

    def get(self, block: BlockId) -> BlockData | None:
        data = self._blocks.get(block)
        if data is not None:
            self._blocks.move_to_end(block)
        return data

    def put(self, block: BlockId, data: bytes) -> bool:
        """Keeps `data`, evicting the least recently used blocks to make room.

        Returns False (and keeps nothing) when the block alone exceeds the capacity:
        the read is still served, just not cached.
        """
        if block in self._blocks:
            self._blocks.move_to_end(block)
            return True
        size = len(data)
        if size > self.capacity_bytes:
            return False
        while self.used_bytes + size > self.capacity_bytes and self._blocks:
            victim, old = self._blocks.popitem(last=False)
            self.used_bytes -= len(old)
            self._release(victim)
            self._on_evict(victim, len(old))
        self._blocks[block] = self._keep(block, data)
        self.used_bytes += size
        return True

    def _keep(self, block: BlockId, data: bytes) -> BlockData:
        """Stores a block's bytes; returns what `get` will hand out for it."""
        return data

    def _release(self, block: BlockId) -> None:
        """Frees what `_keep` stored for an evicted block."""

    def blocks(self) -> list[BlockId]:
        return list(self._blocks)
