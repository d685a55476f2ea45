"""Which workers to ask for a block, best first."""

from __future__ import annotations

from collections.abc import Sequence

from reservoir.common.models import WorkerRecord
from reservoir.common.placement import Placement, block_key


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
    table: Placement,
    homes: int,
) -> list[WorkerRecord]:
    """Replicas that hold the block, nearest first (same host, same zone, the rest; among
    equals the block's homes first, in placement order), then its first `homes` homes
    that do not hold it, in placement order (`table`: the placement of `workers`).

    A block nobody holds (or whose holders are not known) goes to its first home, so the
    cache-aside fetch lands where every other client will look for it.
    """
    by_id = {w.id: w for w in workers}
    ranked = table.homes(block_key(file_id, index), homes + len(holders))
    if not holders:
        return [by_id[h] for h in ranked if h in by_id][:homes]
    rank = {h: r for r, h in enumerate(ranked)}
    far = len(ranked)  # a holder that is none of the block's first homes
    held = sorted(
        (by_id[h] for h in holders if h in by_id),
        key=lambda w: (locality(w, host, zone), rank.get(w.id, far)),
    )
    seen = {w.id for w in held}
    return held + [by_id[h] for h in ranked if h not in seen and h in by_id][:homes]
