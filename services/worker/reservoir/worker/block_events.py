"""What the tiered store tells its owner when blocks leave it (the worker service keeps
the report to the master and the stats)."""

from __future__ import annotations

from typing import Protocol

from .memory_tier import BlockId


class BlockEvents(Protocol):
    def block_gone(self, block: BlockId, size: int, tier: str) -> None:
        """`block` is no longer held by any tier."""

    def block_corrupt(self, block: BlockId, tier: str, error: str) -> None:
        """`block` failed its checksum in `tier` and was dropped."""
