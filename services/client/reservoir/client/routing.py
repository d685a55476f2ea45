"""Which workers to ask for a block, best first."""

from __future__ import annotations

from collections.abc import Sequence

from reservoir.common.models import WorkerRecord
from reservoir.common.placement import Candidate, block_key, rank


def locality(worker: WorkerRecord, host: str, zone: str) -> int:
    """0 = same host, 1 = same zone, 2 = anywhere."""
    if host and worker.host == host:
        return 0
    if zone and worker.zone == zone:
        return 1
    return 2


def candidates(
    file_id: str,
    index: int,
    workers: Sequence[WorkerRecord],
    holders: Sequence[str],
    host: str,
    zone: str,
) -> list[WorkerRecord]:
    """Replicas that hold the block (nearest first), then the block's homes in hash order.

    A block nobody holds goes to its first home, so the cache-aside fetch lands where
    every other client will look for it.
    """
    by_id = {w.id: w for w in workers}
    held = sorted((by_id[h] for h in holders if h in by_id), key=lambda w: locality(w, host, zone))
    homes = rank(
        block_key(file_id, index), [Candidate(w.id, float(w.capacity_bytes or 1)) for w in workers]
    )
    seen = {w.id for w in held}
    return held + [by_id[h] for h in homes if h not in seen]
