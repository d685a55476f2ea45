"""The memory tier: immutable blocks within a byte capacity, least recently used out first."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BlockId = tuple[str, int]  # (file_id, index); the file_id pins the block size too
BlockData = bytes  # what a tier hands out: immutable block bytes, private to this process


@dataclass(slots=True)
class HeldBlock:
    length: int
    crc: int  # CRC32C taken when the block landed
    offset: int  # of the block in its object
    held: Any  # what the tier keeps for the bytes (see `_keep`)


class MemoryTier:
    """LRU within a byte capacity. Subclasses change where a block's bytes live by
    overriding `_keep`, `_load` and `_release`; the policy stays here.

    A block is kept as the bytes it arrived in. The worker's allocator tuning (see
    common/malloc_tuning.py) gives every allocation of 256 KiB or more a mapping of its
    own, so a large block's memory goes back to the system the moment it is evicted (and
    the last reader lets go of it), and small ones share the heap instead of costing a
    mapping each (the kernel allows a process ~65k mappings).
    """

    name = "mem"

    def __init__(self, capacity_bytes: int, on_evict: Callable[[BlockId, int], None]) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._blocks: OrderedDict[BlockId, HeldBlock] = OrderedDict()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: BlockId) -> bool:
        return block in self._blocks

    def get(self, block: BlockId) -> tuple[BlockData, int] | None:
        """The block's bytes and checksum, or None when it is not held.

        Raises DataLoss when bytes read back fail their checksum (the caller drops them).
        """
        entry = self._blocks.get(block)
        if entry is None:
            return None
        self._blocks.move_to_end(block)
        return self._load(block, entry), entry.crc

    def put(self, block: BlockId, data: bytes, crc: int, offset: int) -> bool:
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
            self.used_bytes -= old.length
            self._release(victim)
            self._on_evict(victim, old.length)
        self._blocks[block] = HeldBlock(size, crc, offset, self._keep(block, data, crc, offset))
        self.used_bytes += size
        return True

    def drop(self, block: BlockId) -> bool:
        """Forgets a block (e.g. its bytes failed their checksum); False if not held."""
        entry = self._blocks.pop(block, None)
        if entry is None:
            return False
        self.used_bytes -= entry.length
        self._release(block)
        return True

    def _keep(self, block: BlockId, data: bytes, crc: int, offset: int) -> Any:
        """Stores a block's bytes; returns what `_load` gets back to find them."""
        return data

    def _load(self, block: BlockId, entry: HeldBlock) -> BlockData:
        """The bytes `_keep` stored."""
        return entry.held  # type: ignore[no-any-return]

    def _release(self, block: BlockId) -> None:
        """Frees what `_keep` stored for a block that leaves the tier."""

    def blocks(self) -> list[BlockId]:
        return list(self._blocks)
