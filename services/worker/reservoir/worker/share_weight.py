"""This worker's weight in the cluster: its capacity over every live worker's, the
fraction of each mount's quota it keeps within (see mount_shares.py).

Blocks land on their homes by capacity-weighted placement, so a capacity-weighted split
of a quota is the split the mount's blocks arrive in; it needs no master, only the
registry placement reads. A read that fails keeps the weight last had (etcd restarting):
the shares still add up to the quota as long as membership does not change meanwhile.
After each refresh the blocks over a share are evicted: a quota lowered (the mount table
brought the change) or a weight shrunk by a worker that joined takes effect here, within
one interval, without a re-mount.
"""

from __future__ import annotations

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.metadata.worker_registry import WorkerRegistry

from .mount_shares import BlockHolder, MountShares

log = logs.get_logger(__name__)


def capacity_weight(worker_id: str, capacity_bytes: int, live: dict[str, int]) -> float:
    """`capacity_bytes` over the cluster's, `live` being each registered worker's capacity
    (this one counted even when not registered yet)."""
    total = sum(c for w, c in live.items() if w != worker_id) + capacity_bytes
    return capacity_bytes / total if total > 0 else 1.0


class ShareWeight:
    def __init__(
        self,
        registry: WorkerRegistry,
        shares: MountShares,
        holder: BlockHolder,
        worker_id: str,
        capacity_bytes: int,
    ) -> None:
        self._registry = registry
        self._shares = shares
        self._holder = holder
        self._worker_id = worker_id
        self._capacity = capacity_bytes

    async def refresh(self) -> None:
        """Reads the registry once (on failure the weight stays what it was), then evicts
        what is over a share. Skipped while no mount has a quota and a weight is known:
        a cluster without quotas pays no registry reads for them."""
        if self._shares.weight is not None and not self._shares.quotas:
            return
        try:
            live = await self._registry.live()
        except ReservoirError as exc:
            log.warning("share_weight_unread", worker=self._worker_id, error=str(exc))
        else:
            self._reweigh({w.id: w.capacity_bytes for w in live})
        excess = self._shares.excess()
        if excess:
            gone = self._holder.evict(excess)
            log.info("blocks_over_share_evicted", blocks=len(gone), bytes=sum(n for _, n in gone))

    def _reweigh(self, live: dict[str, int]) -> None:
        weight = capacity_weight(self._worker_id, self._capacity, live)
        if weight != self._shares.weight:
            log.info("share_weight_changed", worker=self._worker_id, weight=round(weight, 4))
        self._shares.weight = weight
