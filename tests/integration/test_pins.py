"""Pin, TTL and free with real processes: one worker with a 1 MiB memory tier over a
4 MiB disk tier, 256 KiB blocks, one block per file, LRU eviction."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from reservoir.client import Client
from reservoir.common.errors import ResourceExhausted
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli as _cli
from tests.eventually import eventually

from ..conftest import LEASE_TTL_S

KiB = 1024
BLOCK = 256 * KiB
# Pinned blocks live on the disk tier: 4 MiB holds 15 block files (each has a header).
SETS = {"pinned": 4, "fill": 11, "churn": 60, "big": 16, "other": 3, "ttl": 2}


def _gets(cluster: LocalCluster) -> int:
    return cluster.s3_counts().get("GET", 0)


def _paths(name: str) -> list[str]:
    return [f"/p/{name}/f{i:02d}" for i in range(SETS[name])]


@pytest.fixture(scope="module")
def pin_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, dict[str, bytes]]]:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("pins"),
        workers=1,
        lease_ttl=LEASE_TTL_S,
        capacity="1MiB",
        disk_capacity="4MiB",
        # LRU keeps whatever came last: only the pins keep pinned blocks through churn
        # (the default policy resists one-off scans by itself).
        env={"RESERVOIR_WORKER_EVICTION": "lru", "RESERVOIR_WORKER_TTL_SWEEP_INTERVAL": "0.2"},
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="pins")
        files: dict[str, bytes] = {}
        for name in SETS:
            for path in _paths(name):
                files[path] = os.urandom(BLOCK)
                s3.put_object(Bucket="pins", Key=f"d/{path[3:]}", Body=files[path])
        with Client(cluster.master_address) as c:
            c.mount("/p", "s3://pins/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        yield cluster, files
    finally:
        cluster.down()


@contextmanager
def _pinned(c: Client, *paths: str) -> Iterator[None]:
    try:
        for path in paths:
            job = c.watch_job(c.pin(path).load_job_id)
            assert job.state == "completed", job.errors
        yield
    finally:
        for path in paths:
            c.unpin(path)


def _read_all(c: Client, files: dict[str, bytes], name: str) -> None:
    for path in _paths(name):
        assert c.read(path) == files[path]


def _reported_cached(c: Client, path: str, want: int, timeout_s: float = 10.0) -> int:
    """Cached bytes of `path`, once the worker's block reports (every 0.2 s) say `want`
    (or the time is up)."""
    with contextlib.suppress(AssertionError):  # the caller asserts on what it is
        eventually(lambda: c.report(path).cached_bytes == want, timeout_s=timeout_s)
    return c.report(path).cached_bytes


def test_pinned_files_survive_reading_three_times_the_cache_and_are_served_with_no_s3_get(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = pin_cluster
    with Client(cluster.master_address) as c, _pinned(c, "/p/pinned"):
        _read_all(c, files, "churn")  # 15 MiB through a 5 MiB cache
        gets = _gets(cluster)
        _read_all(c, files, "pinned")
        assert _gets(cluster) == gets
        (stats,) = c.worker_stats()
        assert stats.tiers[1].pinned_bytes >= SETS["pinned"] * BLOCK
        # The CLI shows pinned bytes per tier (workers -l) and in the cluster (report).
        (worker,) = json.loads(_cli(cluster, "--json", "workers", "-l").stdout)
        assert worker["tiers"][1]["pinned_bytes"] == stats.tiers[1].pinned_bytes
        report = json.loads(_cli(cluster, "--json", "report", "/p/pinned").stdout)
        assert report["tiers"]["disk"]["pinned_bytes"] == stats.tiers[1].pinned_bytes
        assert report["cached_bytes"] == SETS["pinned"] * BLOCK
        rules = [line.split() for line in _cli(cluster, "rules").stdout.splitlines()]
        assert rules[0][:4] == ["PATH", "PINNED", "FILES", "BYTES"]
        assert ["/p/pinned", "yes", "4", "1.0MiB"] in [row[:4] for row in rules[1:]]


def test_pinning_more_than_the_cache_holds_is_refused_with_resource_exhausted(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, _ = pin_cluster
    with Client(cluster.master_address) as c:
        with pytest.raises(ResourceExhausted, match=r"cannot pin /p/big .*does not fit"):
            c.pin("/p/big")
        # The 15 blocks the disk holds pinned; 3 more would fit in an empty cache.
        with (
            _pinned(c, "/p/fill", "/p/pinned"),
            pytest.raises(ResourceExhausted, match=r"3.8MiB pinned already"),
        ):
            c.pin("/p/other")
        assert c.cache_rules() == []
    refused = _cli(cluster, "pin", "/p/big")
    assert refused.returncode == 1 and "does not fit in the cache" in refused.stderr


def test_free_empties_a_path_and_the_next_read_fetches_from_s3_again(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = pin_cluster
    with Client(cluster.master_address) as c:
        c.free("/p")  # what earlier tests read: room for these without evicting
        _read_all(c, files, "other")
        gets = _gets(cluster)
        _read_all(c, files, "other")
        assert _gets(cluster) == gets
        want = SETS["other"] * BLOCK
        assert _reported_cached(c, "/p/other", want) == want
        freed = c.free("/p/other")
        assert (freed.freed_blocks, freed.pinned_files) == (SETS["other"], 0)
        report = c.report("/p/other")
        assert (report.cached_blocks, report.cached_bytes) == (0, 0)
        gets = _gets(cluster)
        _read_all(c, files, "other")
        assert _gets(cluster) - gets == SETS["other"]


def test_free_keeps_pinned_files(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = pin_cluster
    with Client(cluster.master_address) as c, _pinned(c, "/p/pinned"):
        assert c.free("/p").pinned_files == SETS["pinned"]
        gets = _gets(cluster)
        _read_all(c, files, "pinned")
        assert _gets(cluster) == gets


def test_with_the_cache_full_of_pinned_data_other_reads_are_served_and_pins_kept(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = pin_cluster
    with Client(cluster.master_address) as c, _pinned(c, "/p/pinned", "/p/fill"):
        _read_all(c, files, "churn")
        gets = _gets(cluster)
        _read_all(c, files, "pinned")
        _read_all(c, files, "fill")
        assert _gets(cluster) == gets
        (stats,) = c.worker_stats()
        assert stats.tiers[1].pinned_bytes == 15 * (BLOCK + 32)


def test_a_block_older_than_its_ttl_is_fetched_again_and_a_fresh_one_is_not(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = pin_cluster
    with Client(cluster.master_address) as c:
        c.free("/p")  # room for these without evicting
        c.set_ttl("/p/ttl", "2s")
        try:
            _read_all(c, files, "ttl")
            gets = _gets(cluster)
            _read_all(c, files, "ttl")
            assert _gets(cluster) == gets  # fresh: served from the cache
            time.sleep(2.5)  # time passes on purpose: past the 2 s TTL
            gets = _gets(cluster)
            _read_all(c, files, "ttl")
            assert _gets(cluster) - gets == SETS["ttl"]  # expired: fetched again
        finally:
            c.clear_ttl("/p/ttl")
        assert c.cache_rules() == []


def test_pins_survive_a_master_restart_and_a_worker_sigkill(
    pin_cluster: tuple[LocalCluster, dict[str, bytes]],
) -> None:
    cluster, files = pin_cluster
    with Client(cluster.master_address) as c:
        job = c.watch_job(c.pin("/p/pinned").load_job_id)
        assert job.state == "completed", job.errors
    try:
        cluster.kill("master")
        cluster.start_master()
        cluster.kill("worker1")
        cluster.start_worker(1)
        with Client(cluster.master_address) as c:
            assert [(r.path, r.pinned) for r in c.cache_rules()] == [("/p/pinned", True)]
            _read_all(c, files, "churn")
            gets = _gets(cluster)
            _read_all(c, files, "pinned")
            assert _gets(cluster) == gets
    finally:
        with Client(cluster.master_address) as c:
            c.unpin("/p/pinned")
