"""A worker's memory follows its capacity, epoch after epoch of churn."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import worker_pb2

MiB = 1 << 20
CAPACITY = 64 * MiB
# What a worker may hold beyond its capacity: the interpreter and libraries (~53 MiB idle),
# in-flight under-store bodies and outgoing messages. The README states the same bound.
OVERHEAD = 128 * MiB


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_worker_rss_stays_within_capacity_plus_overhead_over_12_shuffled_epochs(
    tmp_path: Path,
) -> None:
    # LRU: every miss is kept and evicts another block, the most churn a worker sees.
    cluster = LocalCluster.up(
        tmp_path / "c",
        workers=1,
        lease_ttl=3,
        capacity="64MiB",
        env={"RESERVOIR_WORKER_EVICTION": "lru"},
    )
    try:
        peaks, stats = _epochs(cluster, "churn", files=100, epochs=12, seed=7)  # 3x capacity
        assert sum(s.evictions for s in stats) > 0
        assert max(peaks) <= CAPACITY + OVERHEAD, [p // MiB for p in peaks]
    finally:
        cluster.down()


def test_worker_rss_stays_within_the_memory_tier_plus_overhead_with_the_disk_tier_in_use(
    tmp_path: Path,
) -> None:
    # Three times the memory tier, within the disk tier: every epoch after the first is
    # read back from disk through memory (promotions, spills, write-behind queue).
    memory = 16 * MiB
    cluster = LocalCluster.up(
        tmp_path / "c",
        workers=1,
        lease_ttl=3,
        capacity="16MiB",
        disk_capacity="64MiB",
        env={"RESERVOIR_WORKER_EVICTION": "lru"},
    )
    try:
        peaks, (stats,) = _epochs(cluster, "tiers", files=24, epochs=3, seed=11)  # 48 MiB
        assert stats.tiers[1].hits > 0 and stats.tiers[1].blocks == 2 * 24
        assert max(peaks) <= memory + OVERHEAD, [p // MiB for p in peaks]
    finally:
        cluster.down()


def _epochs(
    cluster: LocalCluster, bucket: str, *, files: int, epochs: int, seed: int
) -> tuple[list[int], list[worker_pb2.WorkerStats]]:
    """Uploads `files` objects of 2 MiB, reads them all in `epochs` shuffled epochs (8
    threads, 1 MiB blocks, bytes counted); the worker's RSS after each, and its stats."""
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    blob = os.urandom(2 * MiB)
    names = [f"f{i}" for i in range(files)]
    for i, name in enumerate(names):
        s3.put_object(Bucket=bucket, Key=f"d/{name}", Body=blob[i:] + blob[:i])
    pid = cluster.processes["worker1"].pid
    peaks = []
    with Client(cluster.master_address) as c, ThreadPoolExecutor(8) as pool:
        c.mount(f"/{bucket}", f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint, block_size=MiB)
        paths = [f"/{bucket}/{n}" for n in names]
        rng = random.Random(seed)
        for _ in range(epochs):
            rng.shuffle(paths)
            sizes = list(pool.map(lambda p: len(c.read(p)), paths))
            assert sizes == [2 * MiB] * len(paths)
            peaks.append(_rss(pid))
        return peaks, c.worker_stats()
