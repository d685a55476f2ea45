"""What load jobs moved into the cache, for Prometheus: blocks and bytes by outcome.

Counted as workers answer (a block is loaded when its worker confirms it holds it), so a
rate shows a job's throughput while it runs; the job records in etcd say where each job
stands, these say what every job of this master did since it started.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

LOADED = "loaded"
FAILED = "failed"


class LoadJobCounters:
    def __init__(self, registry: CollectorRegistry) -> None:
        blocks = Counter(
            "reservoir_master_load_job_blocks",
            "Blocks load jobs sent to workers, by outcome: loaded (the worker holds it) or "
            "failed. A replica is a block of its own.",
            ["outcome"],
            registry=registry,
        )
        data = Counter(
            "reservoir_master_load_job_bytes",
            "Bytes of the blocks load jobs sent to workers, by outcome (loaded, failed).",
            ["outcome"],
            registry=registry,
        )
        # Both outcomes from the start, so a rate of either begins at 0, not at its first.
        self._blocks = {o: blocks.labels(o) for o in (LOADED, FAILED)}
        self._bytes = {o: data.labels(o) for o in (LOADED, FAILED)}

    def count(self, outcome: str, length: int) -> None:
        """One block of `length` bytes that ended as `outcome` (LOADED or FAILED)."""
        self._blocks[outcome].inc()
        self._bytes[outcome].inc(length)
