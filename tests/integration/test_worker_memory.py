"""A worker's memory follows its capacity, epoch after epoch of churn."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster

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
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="churn")
        blob = os.urandom(2 * MiB)
        names = [f"f{i}" for i in range(100)]  # 200 MiB: 3x the capacity
        for i, name in enumerate(names):
            s3.put_object(Bucket="churn", Key=f"d/{name}", Body=blob[i:] + blob[:i])
        pid = cluster.processes["worker1"].pid
        peaks = []
        with Client(cluster.master_address) as c, ThreadPoolExecutor(8) as pool:
            c.mount("/churn", "s3://churn/d/", endpoint_url=cluster.s3_endpoint, block_size=MiB)
            paths = [f"/churn/{n}" for n in names]
            rng = random.Random(7)
            for _ in range(12):
                rng.shuffle(paths)
                sizes = list(pool.map(lambda p: len(c.read(p)), paths))
                assert sizes == [2 * MiB] * len(paths)
                peaks.append(_rss(pid))
            assert sum(s.evictions for s in c.worker_stats()) > 0
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
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="tiers")
        blob = os.urandom(2 * MiB)
        names = [f"f{i}" for i in range(24)]  # 48 MiB
        for i, name in enumerate(names):
            s3.put_object(Bucket="tiers", Key=f"d/{name}", Body=blob[i:] + blob[:i])
        pid = cluster.processes["worker1"].pid
        peaks = []
        with Client(cluster.master_address) as c, ThreadPoolExecutor(8) as pool:
            c.mount("/tiers", "s3://tiers/d/", endpoint_url=cluster.s3_endpoint, block_size=MiB)
            paths = [f"/tiers/{n}" for n in names]
            rng = random.Random(11)
            for _ in range(3):
                rng.shuffle(paths)
                sizes = list(pool.map(lambda p: len(c.read(p)), paths))
                assert sizes == [2 * MiB] * len(paths)
                peaks.append(_rss(pid))
            (stats,) = c.worker_stats()
            assert stats.tiers[1].hits > 0 and stats.tiers[1].blocks == 2 * len(names)
        assert max(peaks) <= memory + OVERHEAD, [p // MiB for p in peaks]
    finally:
        cluster.down()
