"""How a worker's GetStats snapshot is rendered as Prometheus text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from reservoir.v1 import worker_pb2
from reservoir.worker.metrics import render

SECRET = "0123456789abcdef0123456789abcdef"


class _Fixed(Collector):
    def __init__(self, stats: worker_pb2.WorkerStats, shm_dir: str) -> None:
        self._stats, self._shm_dir = stats, shm_dir

    def collect(self):  # type: ignore[no-untyped-def]
        return render(self._stats, self._shm_dir)


def _text(stats: worker_pb2.WorkerStats, shm_dir: str = "") -> str:
    registry = CollectorRegistry()
    registry.register(_Fixed(stats, shm_dir))
    return generate_latest(registry).decode()


def test_every_source_and_tier_is_a_series_and_the_shm_tier_keeps_its_secret_directory() -> None:
    stats = worker_pb2.WorkerStats(
        worker_id="w1",
        hits=5,
        misses=2,
        bytes_served={"shm": 700, "ufs": 300},
        tiers=[
            worker_pb2.TierStats(name="shm", path=f"/dev/shm/r/{SECRET}", blocks=3, hits=4),
            worker_pb2.TierStats(name="disk", path="/data/d0", blocks=9, in_service=True),
        ],
    )
    text = _text(stats, shm_dir="/dev/shm/r")
    assert SECRET not in text  # /metrics has no token; the unlisted directory stays unknown
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    served = "reservoir_worker_served_bytes_total"
    assert samples[(served, (("source", "shm"),))] == 700
    assert samples[(served, (("source", "ufs"),))] == 300
    assert samples[(served, (("source", "disk"),))] == 0  # present before the first disk read
    assert samples[("reservoir_worker_hits_total", ())] == 5
    shm = (("path", "/dev/shm/r"), ("tier", "shm"))
    assert samples[("reservoir_worker_tier_blocks", shm)] == 3
    assert samples[("reservoir_worker_tier_hits_total", shm)] == 4
    disk = (("path", "/data/d0"), ("tier", "disk"))
    assert samples[("reservoir_worker_tier_in_service", disk)] == 1
    assert samples[("reservoir_worker_tier_in_service", shm)] == 0
