"""What a worker counts, in one place.

`reservoir workers -l` (the GetStats RPC) and `/metrics` are two renderings of the same
snapshot (`worker_stats` in stats.py), built from these counters and the tiers' own
(`TierUsage`); nothing is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where the bytes of a read came from: a tier's name (`mem`, `shm`, `disk`), or `ufs`
# for a block this read fetched from the under-store (S3). Reads a client made straight
# from a worker's shm files (short-circuit) never reach the worker and are not counted.
UFS = "ufs"


@dataclass
class WorkerCounters:
    # Blocks served from a tier, or by joining a fetch already in flight (no GET of their own).
    hits: int = 0
    # Blocks fetched from the under-store.
    misses: int = 0
    # Bytes those fetches brought in (whole blocks).
    bytes_from_ufs: int = 0
    # Ranged GETs to the under-store, and those that failed (after the store's own retries).
    ufs_gets: int = 0
    ufs_errors: int = 0
    # Blocks that left the worker (no tier holds them any more).
    evictions: int = 0
    # Blocks whose bytes failed their checksum when read back; dropped, never served.
    corrupt_blocks: int = 0
    # Bytes sent to readers, by source (a tier's name, or UFS).
    bytes_served: dict[str, int] = field(default_factory=dict)

    def served(self, source: str, nbytes: int) -> None:
        self.bytes_served[source] = self.bytes_served.get(source, 0) + nbytes

    @property
    def bytes_from_cache(self) -> int:
        """Bytes sent to readers from any tier."""
        return sum(n for source, n in self.bytes_served.items() if source != UFS)
