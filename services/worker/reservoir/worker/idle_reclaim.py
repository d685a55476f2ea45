"""Reclaims the blocks of mounts nobody reads: a mount with an idle TTL whose last read,
on any worker, is older than the TTL loses its blocks here.

"Read" means a reader asked (a load job is not a read), or, for blocks kept as files in
shared memory, that a same-host reader read a file directly: a short-circuit read the
worker never hears of, seen in the files' access times, which are checked (and re-armed)
before a mount is reclaimed; so a mount read that way only is kept, and an idle one is
reclaimed within two TTLs. Each worker publishes, per mount with an idle TTL, when it
last served it (one etcd key per mount and worker, written only when it changed); a
worker that has not served a mount for the TTL reads the mount's keys and reclaims only
when none is recent. A key is rewritten only when its read moved by a quarter of the
TTL, so etcd sees a few writes per mount and worker per TTL however busy the mount. A read of that prefix that fails reclaims nothing: an unknown
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

# A worker publishes its last read of a mount when it moved by TTL / this; the others
# count a published read that much later (so a mount read within its TTL is never idle).
_PUBLISH_STEPS = 4


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
        ttls = shares.idle_ttl_s()
        for mount in [m for m in self._published if m not in ttls]:
            await self._unpublish(mount)
        for mount, ttl_s in ttls.items():
            last = shares.last_read_s(mount)
            try:
                await self._publish(mount, last, ttl_s)
                if now - last < ttl_s or not shares.bytes_of(mount):
                    continue
                newest = max([last, *await self._read_elsewhere(mount, ttl_s)])
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

    async def _publish(self, mount: str, last_s: float, ttl_s: float) -> None:
        """Writes this worker's last read of `mount` once it moved by a quarter of the
        TTL: one etcd write per mount per quarter TTL at most, however busy the mount."""
        published = self._published.get(mount)
        if published is not None and last_s - published < ttl_s / _PUBLISH_STEPS:
            return
        await self._store.put(
            keyspace.mount_read_key(mount, self._worker_id), str(int(last_s * 1000)).encode()
        )
        self._published[mount] = last_s

    async def _unpublish(self, mount: str) -> None:
        """Deletes this worker's key of a mount that lost its idle TTL (or was removed)."""
        try:
            await self._store.delete(keyspace.mount_read_key(mount, self._worker_id))
        except ReservoirError as exc:
            log.warning("idle_unpublish_failed", mount=mount, error=str(exc))
            return
        del self._published[mount]

    async def _read_elsewhere(self, mount: str, ttl_s: float) -> list[float]:
        """When the other workers last read `mount`, as late as it may be: what they
        published, plus the quarter TTL their reads may have moved on since."""
        mine = keyspace.mount_read_key(mount, self._worker_id)
        pairs = await self._store.get_prefix(keyspace.mount_reads_prefix(mount))
        return [int(v) / 1000 + ttl_s / _PUBLISH_STEPS for k, v in pairs if k != mine]

    def reclaim(self, mount: str, blocks: list[BlockId], idle_s: float) -> None:
        gone = self._holder.evict(blocks)
        log.info(
            "idle_mount_reclaimed",
            mount=mount,
            idle_s=round(idle_s, 1),
            blocks=len(gone),
            bytes=sum(n for _, n in gone),
        )
