"""Per-mount quota, fair eviction and idle TTL with real processes: two workers with small
memory tiers in shared memory and LRU eviction (which alone lets a scan flush everything
else), 256 KiB blocks. The test process is on the workers' host, so its hits are
short-circuit reads of the block files, which the workers never hear of; its misses reach
a worker and are counted there."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster

from ..conftest import LEASE_TTL_S
from ..eventually import eventually

KiB = 1024
BLOCK = 256 * KiB
WORKERS = 2
CAPACITY = 2048 * KiB  # per worker: 8 blocks
CACHE = WORKERS * CAPACITY


@pytest.fixture(scope="module")
def quota_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("quotas"),
        workers=WORKERS,
        lease_ttl=LEASE_TTL_S,
        capacity="2MiB",
        shm=True,
        env={
            "RESERVOIR_WORKER_EVICTION": "lru",
            "RESERVOIR_WORKER_SHARE_INTERVAL": "0.5",
            "RESERVOIR_WORKER_IDLE_SWEEP_INTERVAL": "0.2",
        },
    )
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(autouse=True)
def _unmount_after(quota_cluster: LocalCluster) -> Iterator[None]:
    """Each test starts without the others' mounts or blocks: their quotas would reserve
    the cache, and their blocks count in the workers' used bytes."""
    yield
    with Client(quota_cluster.master_address) as c:
        for mount in c.mounts():
            c.free(mount.path)
            c.unmount(mount.path)


def _files(cluster: LocalCluster, bucket: str, count: int) -> dict[str, bytes]:
    """`count` one-block objects in a new bucket; their bytes by key."""
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    rng = random.Random(bucket)
    files = {f"f{i:03d}": rng.randbytes(BLOCK) for i in range(count)}
    for key, data in files.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    return files


def _misses(c: Client) -> int:
    return sum(s.misses for s in c.worker_stats())


def _settled_cached_bytes(c: Client, mounts: list[str]) -> dict[str, int]:
    """Each mount's cached bytes from the master's location table (`Report`), once the
    table holds what the workers hold (every report arrived)."""

    def settled() -> dict[str, int] | None:
        held = sum(s.used_bytes for s in c.worker_stats())
        cached = {m.path: c.report(m.path).cached_bytes for m in c.mounts()}
        assert sum(cached.values()) == held, (cached, held)
        return {m: cached[m] for m in mounts}

    return eventually(settled, what="the location table matching the workers")


def test_a_scan_of_another_mount_keeps_a_quota_mounts_working_set_cached(
    quota_cluster: LocalCluster,
) -> None:
    cluster = quota_cluster
    a_files = _files(cluster, "quota-a", 3)  # within A's share on any one worker (3 blocks)
    b_files = _files(cluster, "quota-b", 10 * CACHE // BLOCK)
    quota_a = CACHE * 4 // 10
    with Client(cluster.master_address) as c:
        endpoint = cluster.s3_endpoint
        c.mount(
            "/qa", "s3://quota-a/", endpoint_url=endpoint, block_size=BLOCK, quota_bytes=quota_a
        )
        c.mount("/qb", "s3://quota-b/", endpoint_url=endpoint, block_size=BLOCK)
        a_paths = [f"/qa/{k}" for k in a_files]
        assert c.read_many(a_paths) == list(a_files.values())  # warm
        b_keys = list(b_files)
        hits = reads = 0
        for start in range(0, len(b_keys), 16):  # 16 B blocks flush an LRU cache of 16
            chunk = b_keys[start : start + 16]
            assert c.read_many([f"/qb/{k}" for k in chunk]) == [b_files[k] for k in chunk]
            before = _misses(c)
            assert c.read_many(a_paths) == list(a_files.values())
            hits += len(a_paths) - (_misses(c) - before)
            reads += len(a_paths)
        assert hits / reads >= 0.95, (hits, reads)
        cached = _settled_cached_bytes(c, ["/qa", "/qb"])
        assert cached["/qa"] == len(a_files) * BLOCK <= quota_a + WORKERS * BLOCK
        assert cached["/qb"] <= CACHE


def test_a_mount_scanned_past_its_quota_keeps_within_it_plus_one_block_per_worker(
    quota_cluster: LocalCluster,
) -> None:
    cluster = quota_cluster
    files = _files(cluster, "quota-c", 24)
    quota = 1024 * KiB  # 4 blocks cluster-wide: 2 per worker
    with Client(cluster.master_address) as c:
        c.mount(
            "/qc",
            "s3://quota-c/",
            endpoint_url=cluster.s3_endpoint,
            block_size=BLOCK,
            quota_bytes=quota,
        )
        paths = [f"/qc/{k}" for k in files]
        assert c.read_many(paths) == list(files.values())
        assert c.read_many(paths) == list(files.values())  # served again, over quota or not
        cached = _settled_cached_bytes(c, ["/qc"])
        assert 0 < cached["/qc"] <= quota + WORKERS * BLOCK


def test_a_mount_not_read_for_its_idle_ttl_is_reclaimed_and_its_options_shown(
    quota_cluster: LocalCluster,
) -> None:
    cluster = quota_cluster
    files = _files(cluster, "quota-d", 4)
    mounted = subprocess.run(
        [
            sys.executable,
            "-m",
            "reservoir.cli.main",
            "--master",
            cluster.master_address,
            "--json",
            "mount",
            "/qd",
            "s3://quota-d/",
            "--endpoint-url",
            cluster.s3_endpoint,
            "--block-size",
            "256KiB",
            "--quota",
            "1MiB",
            "--priority",
            "high",
            "--idle-ttl",
            "2s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert mounted.returncode == 0, mounted.stderr
    shown = json.loads(mounted.stdout)
    assert (shown["quota_bytes"], shown["priority"], shown["idle_ttl_ms"]) == (
        1024 * KiB,
        "high",
        2000,
    )
    with Client(cluster.master_address) as c:
        assert c.read_many([f"/qd/{k}" for k in files]) == list(files.values())
        eventually(lambda: c.report("/qd").cached_bytes > 0, what="the blocks reported")
        eventually(
            lambda: c.report("/qd").cached_bytes == 0, what="the idle mount's blocks reclaimed"
        )


def test_a_mount_read_only_by_short_circuit_is_not_idle_and_is_reclaimed_once_left(
    quota_cluster: LocalCluster,
) -> None:
    cluster = quota_cluster
    files = _files(cluster, "quota-e", 4)
    mount = "/qe"
    with Client(cluster.master_address) as c:
        c.mount(
            mount,
            "s3://quota-e/",
            endpoint_url=cluster.s3_endpoint,
            block_size=BLOCK,
            idle_ttl_ms=2000,
        )
        paths = [f"{mount}/{k}" for k in files]
        assert c.read_many(paths) == list(files.values())
        eventually(lambda: c.report(mount).cached_bytes == len(files) * BLOCK, what="cached")
        gets = cluster.s3_counts().get("GET", 0)
        asked = sum(s.hits + s.misses for s in c.worker_stats())
        deadline = time.monotonic() + 8  # several TTLs, many idle sweeps
        while time.monotonic() < deadline:
            assert c.read_many(paths) == list(files.values())
            time.sleep(0.2)
        assert sum(s.hits + s.misses for s in c.worker_stats()) == asked  # all short-circuit
        assert cluster.s3_counts().get("GET", 0) == gets  # never reclaimed meanwhile
        eventually(lambda: c.report(mount).cached_bytes == 0, what="the idle mount reclaimed")
