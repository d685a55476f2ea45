"""Reclaims the blocks of mounts nobody reads: a mount with an idle TTL whose last read,
on any worker, is older than the TTL loses its blocks here.

"Read" means a reader asked (a load job is not a read), or, for blocks kept as files in
shared memory, that a same-host reader read a file directly: a short-circuit read the
worker never hears of, seen in the files' access times, which are checked (and re-armed)
before a mount is reclaimed; so a mount read that way only is kept, and an idle one is
reclaimed within two TTLs. Each worker publishes, per mount with an idle TTL, when it
last served it (one etcd key per mount and worker, written only when it changed); a
worker that has not served a mount for the TTL reads the mount's keys and reclaims only
when none is recent. A read of that prefix that fails reclaims nothing: an unknown
answer never drops a working set. Reclaim drops the blocks' entries and leaves disk
files to background unlinks (TieredStore.evict), so it never stalls on bytes.
"""

from __future__ import annotations

import time

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import MetadataStore

from .memory_tier import BlockId, Pins
from .mount_shares import BlockHolder, MountShares

log = logs.get_logger(__name__)


class IdleReclaim:
    def __init__(
        self,
        shares: MountShares,
        holder: BlockHolder,
        pins: Pins,
        store: MetadataStore,
        worker_id: str,
    ) -> None:
        self._shares = shares
        self._holder = holder
        self._pins = pins
        self._store = store
        self._worker_id = worker_id
        self._published: dict[str, float] = {}

    async def sweep(self, now_s: float | None = None) -> None:
        """Publishes this worker's last reads, then reclaims what is idle cluster-wide."""
        now = time.time() if now_s is None else now_s
        shares = self._shares
        for mount, ttl_s in shares.idle_ttl_s().items():
            last = shares.last_read_s(mount)
            try:
                if last > self._published.get(mount, 0.0):
                    await self._store.put(
                        keyspace.mount_read_key(mount, self._worker_id),
                        str(int(last * 1000)).encode(),
                    )
                    self._published[mount] = last
                if now - last < ttl_s or not shares.bytes_of(mount):
                    continue
                newest = max(
                    [last]
                    + [
                        int(v) / 1000
                        for _, v in await self._store.get_prefix(keyspace.mount_reads_prefix(mount))
                    ]
                )
            except ReservoirError as exc:
                log.warning("idle_check_failed", mount=mount, error=str(exc))
                continue
            if now - newest < ttl_s:
                continue
            blocks = [b for b in shares.blocks_of(mount) if not self._pins.pinned(b)]
            # Every file asked (each is re-armed), not just until the first read one.
            if sum(self._holder.read_directly(b) for b in blocks):
                shares.read_at(mount, now)  # published at the next sweep
                continue
            self.reclaim(mount, blocks, now - newest)

    def reclaim(self, mount: str, blocks: list[BlockId], idle_s: float) -> None:
        gone = self._holder.evict(blocks)
        log.info(
            "idle_mount_reclaimed",
            mount=mount,
            idle_s=round(idle_s, 1),
            blocks=len(gone),
            bytes=sum(n for _, n in gone),
        )
