"""A worker's Prometheus metrics: the GetStats snapshot (`worker_stats`) rendered at every
scrape, so `/metrics` and `reservoir workers -l` read the same counters."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reservoir.v1 import worker_pb2

from .counters import UFS
from .service import WorkerService
from .stats import worker_stats

PREFIX = "reservoir_worker_"
Family = CounterMetricFamily | GaugeMetricFamily

# WorkerStats field -> (metric name, help). Counters get `_total` when rendered.
_COUNTERS = {
    "hits": ("hits", "Blocks served from a tier or from a fetch already in flight."),
    "misses": ("misses", "Blocks fetched from the under-store (S3)."),
    "bytes_from_ufs": ("ufs_fetched_bytes", "Bytes fetched from the under-store (S3)."),
    "ufs_gets": ("ufs_requests", "Ranged GETs sent to the under-store (S3)."),
    "ufs_errors": ("ufs_errors", "Ranged GETs to the under-store (S3) that failed."),
    "evictions": ("evictions", "Blocks that left the worker (no tier holds them any more)."),
    "corrupt_blocks": ("corrupt_blocks", "Blocks that failed their checksum; never served."),
    "disk_writes_skipped": (
        "disk_writes_skipped",
        "Blocks not written to disk because the write queue was full.",
    ),
}
_TIER_GAUGES = {
    "used_bytes": ("tier_used_bytes", "Bytes of blocks the tier holds."),
    "capacity_bytes": ("tier_capacity_bytes", "Bytes of blocks the tier may hold."),
    "blocks": ("tier_blocks", "Blocks the tier holds."),
    "pinned_bytes": ("tier_pinned_bytes", "Bytes of pinned blocks in the tier."),
}
_TIER_COUNTERS = {
    "hits": ("tier_hits", "Reads served from the tier."),
    "evictions": ("tier_evictions", "Blocks the tier evicted (one may still be below it)."),
}


class WorkerMetrics(Collector):
    def __init__(self, service: WorkerService) -> None:
        self._service = service

    def collect(self) -> Iterator[Family]:
        yield from render(worker_stats(self._service), self._service.config.shm_dir)


def render(stats: worker_pb2.WorkerStats, shm_dir: str = "") -> Iterator[Family]:
    """The families of one snapshot. `/metrics` has no token, so a shm tier is labelled
    with its configured directory, never the unguessable one its blocks sit in on a
    cluster with authentication (see shm_tier.py; GetStats, which needs a token, shows it)."""
    info = GaugeMetricFamily(PREFIX + "info", "This worker's id.", labels=["worker_id"])
    info.add_metric([stats.worker_id], 1)
    yield info
    for field, (name, text) in _COUNTERS.items():
        yield CounterMetricFamily(PREFIX + name, text, value=getattr(stats, field))
    served = CounterMetricFamily(
        PREFIX + "served_bytes",
        "Bytes sent to readers by source: a tier (mem, shm, disk) or ufs (fetched for the "
        "read). Short-circuit reads never reach the worker.",
        labels=["source"],
    )
    # Every source this worker has, even before its first read, so rates start at once.
    sources = {t.name: 0 for t in stats.tiers} | {UFS: 0} | dict(stats.bytes_served)
    for source, n in sorted(sources.items()):
        served.add_metric([source], n)
    yield served
    labels = ["tier", "path"]
    tiers = [([t.name, shm_dir if t.name == "shm" else t.path], t) for t in stats.tiers]
    for field, (name, text) in _TIER_GAUGES.items():
        gauge = GaugeMetricFamily(PREFIX + name, text, labels=labels)
        for where, t in tiers:
            gauge.add_metric(where, getattr(t, field))
        yield gauge
    for field, (name, text) in _TIER_COUNTERS.items():
        counter = CounterMetricFamily(PREFIX + name, text, labels=labels)
        for where, t in tiers:
            counter.add_metric(where, getattr(t, field))
        yield counter
    up = GaugeMetricFamily(
        PREFIX + "tier_in_service", "1 while the tier is in service.", labels=labels
    )
    for where, t in tiers:
        up.add_metric(where, 1 if t.in_service else 0)
    yield up
