"""What each tier of a worker holds, as reported in its stats."""

from __future__ import annotations

from dataclasses import dataclass

from .disk_tier import DiskTier
from .memory_tier import MemoryTier
from .shm_tier import ShmTier


@dataclass(frozen=True, slots=True)
class TierUsage:
    name: str
    path: str
    used_bytes: int
    capacity_bytes: int
    blocks: int
    evictions: int
    hits: int
    in_service: bool
    pinned_bytes: int


def tier_usage(memory: MemoryTier, disks: list[DiskTier]) -> list[TierUsage]:
    """Memory first, then the disk directories in configured order."""
    m = memory
    tiers = [
        TierUsage(
            m.name,
            str(m.directory) if isinstance(m, ShmTier) else "",
            m.used_bytes,
            m.capacity_bytes,
            len(m),
            m.evictions,
            m.hits,
            True,
            m.pinned_bytes(),
        )
    ]
    for d in disks:
        tiers.append(
            TierUsage(
                d.name,
                str(d.directory),
                d.used_bytes,
                d.capacity_bytes,
                len(d),
                d.evictions,
                d.hits,
                d.in_service,
                d.pinned_bytes(),
            )
        )
    return tiers
