"""What the SDK returns about the cache's contents: how much of a path is cached
(`report`), what a `free` or a `pin` did, and each worker's counters (`worker_stats`),
as frozen dataclasses built from the cluster's replies."""

from __future__ import annotations

from dataclasses import dataclass, field

from reservoir.common.config import format_size
from reservoir.common.models import CacheRule
from reservoir.v1 import master_pb2, worker_pb2


@dataclass(frozen=True, slots=True)
class CacheReport:
    """The files and bytes below `path`, and how many of their blocks are cached."""

    path: str
    files: int = 0
    bytes: int = 0
    blocks: int = 0
    cached_blocks: int = 0
    cached_bytes: int = 0

    @classmethod
    def from_proto(cls, path: str, msg: master_pb2.ReportResponse) -> CacheReport:
        return cls(path, msg.files, msg.bytes, msg.blocks, msg.cached_blocks, msg.cached_bytes)

    @property
    def cached_fraction(self) -> float:
        """Cached bytes of all bytes, 0.0 to 1.0 (nothing to cache counts as all cached)."""
        return self.cached_bytes / self.bytes if self.bytes else 1.0

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.files} files, {format_size(self.bytes)}; cached"
            f" {format_size(self.cached_bytes)} ({100 * self.cached_fraction:.1f}%),"
            f" {self.cached_blocks}/{self.blocks} blocks"
        )


@dataclass(frozen=True, slots=True)
class FreeResult:
    """What `free(path)` evicted, over all workers; pinned files stay (unpin them first)."""

    path: str
    files: int = 0  # files below the path
    freed_blocks: int = 0
    freed_bytes: int = 0
    pinned_files: int = 0  # kept because they are pinned

    @classmethod
    def from_proto(cls, path: str, msg: master_pb2.FreeResponse) -> FreeResult:
        return cls(path, msg.files, msg.freed_blocks, msg.freed_bytes, msg.pinned_files)

    def __str__(self) -> str:
        kept = f"; {self.pinned_files} pinned files kept" if self.pinned_files else ""
        return (
            f"freed {format_size(self.freed_bytes)} ({self.freed_blocks} blocks)"
            f" of {self.path}{kept}"
        )


@dataclass(frozen=True, slots=True)
class PinResult:
    """A pin: its rule, and the load job bringing the pinned files into the cache (pass
    `load_job_id` to `watch_job` to wait for it)."""

    rule: CacheRule
    load_job_id: str

    @classmethod
    def from_proto(cls, msg: master_pb2.PinResponse) -> PinResult:
        return cls(CacheRule.from_proto(msg.rule), msg.load_job_id)

    def __str__(self) -> str:
        return (
            f"pinned {self.rule.path} ({self.rule.pinned_files} files,"
            f" {format_size(self.rule.pinned_bytes)}); loading in job {self.load_job_id}"
        )


@dataclass(frozen=True, slots=True)
class TierStats:
    """One cache tier of a worker ("mem", "shm" or "disk")."""

    name: str
    path: str = ""  # the directory of a shm or disk tier
    used_bytes: int = 0
    capacity_bytes: int = 0
    blocks: int = 0
    evictions: int = 0  # blocks this tier evicted (one evicted from memory may be on disk)
    hits: int = 0  # reads served from this tier
    in_service: bool = True  # False once an I/O error took a disk directory out
    pinned_bytes: int = 0  # bytes of pinned blocks here (never evicted)

    @classmethod
    def from_proto(cls, msg: worker_pb2.TierStats) -> TierStats:
        return cls(
            msg.name,
            msg.path,
            msg.used_bytes,
            msg.capacity_bytes,
            msg.blocks,
            msg.evictions,
            msg.hits,
            msg.in_service,
            msg.pinned_bytes,
        )


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """A worker's counters since it started. `used_bytes`, `capacity_bytes` and `blocks`
    are its top tier's (`tiers` has each, top first); `evictions` counts blocks that left
    the worker; `bytes_served` is bytes sent to readers by source: a tier's name, or
    "ufs" for blocks fetched from the under-store for the read."""

    worker_id: str
    hits: int = 0
    misses: int = 0
    bytes_from_cache: int = 0
    bytes_from_ufs: int = 0
    ufs_gets: int = 0
    evictions: int = 0
    used_bytes: int = 0
    capacity_bytes: int = 0
    blocks: int = 0
    corrupt_blocks: int = 0  # failed their checksum when read back: dropped, never served
    tiers: tuple[TierStats, ...] = ()
    disk_writes_skipped: int = 0  # not written to disk because the write queue was full
    bytes_served: dict[str, int] = field(default_factory=dict)
    ufs_errors: int = 0  # ranged GETs that failed after the store client's own retries

    @classmethod
    def from_proto(cls, msg: worker_pb2.WorkerStats) -> WorkerStats:
        return cls(
            worker_id=msg.worker_id,
            hits=msg.hits,
            misses=msg.misses,
            bytes_from_cache=msg.bytes_from_cache,
            bytes_from_ufs=msg.bytes_from_ufs,
            ufs_gets=msg.ufs_gets,
            evictions=msg.evictions,
            used_bytes=msg.used_bytes,
            capacity_bytes=msg.capacity_bytes,
            blocks=msg.blocks,
            corrupt_blocks=msg.corrupt_blocks,
            tiers=tuple(TierStats.from_proto(t) for t in msg.tiers),
            disk_writes_skipped=msg.disk_writes_skipped,
            bytes_served=dict(sorted(msg.bytes_served.items())),
            ufs_errors=msg.ufs_errors,
        )

    @property
    def hit_ratio(self) -> float | None:
        """Hits of all block reads; None before the first."""
        reads = self.hits + self.misses
        return self.hits / reads if reads else None
