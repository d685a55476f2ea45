"""A worker's counters as one `WorkerStats` message: what GetStats (`reservoir workers -l`)
answers and what `/metrics` renders (metrics.py), so the two always agree."""

from __future__ import annotations

from reservoir.v1 import worker_pb2

from .service import WorkerService


def worker_stats(service: WorkerService) -> worker_pb2.WorkerStats:
    c = service.counters
    store = service.store
    top = store.memory
    return worker_pb2.WorkerStats(
        worker_id=service.worker_id,
        hits=c.hits,
        misses=c.misses,
        bytes_from_cache=c.bytes_from_cache,
        bytes_from_ufs=c.bytes_from_ufs,
        ufs_gets=c.ufs_gets,
        ufs_errors=c.ufs_errors,
        evictions=c.evictions,
        used_bytes=top.used_bytes,
        capacity_bytes=top.capacity_bytes,
        blocks=len(top),
        corrupt_blocks=c.corrupt_blocks,
        tiers=[
            worker_pb2.TierStats(
                name=t.name,
                path=t.path,
                used_bytes=t.used_bytes,
                capacity_bytes=t.capacity_bytes,
                blocks=t.blocks,
                evictions=t.evictions,
                hits=t.hits,
                in_service=t.in_service,
                pinned_bytes=t.pinned_bytes,
            )
            for t in store.usage()
        ],
        disk_writes_skipped=store.disk_writes_skipped,
        bytes_served=c.bytes_served,
    )
