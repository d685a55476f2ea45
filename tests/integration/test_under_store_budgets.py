"""Cluster-wide under-store budgets: a mount's `max_requests_per_s` holds for all workers
together, as the S3 server counts GETs; a 503 SlowDown storm halves the rate and no read
fails.

The issue's figure is 200 GETs/s in every 10 s window; here 60 GETs/s in 5 s windows, so
that a cold read of enough distinct blocks fits in ~20 s on a shared 2-core machine (the
split and the gates do not depend on the rate; bench/budget_bench.py measures 200).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli as _cli
from tests.conftest import new_mount_path

BLOCK = 4096
BLOCKS_PER_FILE = 16
LIMIT = 60  # GETs per second, all three workers together
WINDOW_S = 5.0


def _files(cluster: LocalCluster, bucket: str, count: int) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    data = {f"f{n:04d}.bin": os.urandom(BLOCK * BLOCKS_PER_FILE) for n in range(count)}
    for name, body in data.items():
        s3.put_object(Bucket=bucket, Key=f"d/{name}", Body=body)
    return data


@contextmanager
def _cold_readers(
    client: Client, root: str, files: dict[str, bytes], threads: int = 16
) -> Iterator[list[BaseException]]:
    """Threads reading distinct files (every block cold) until the block ends; yields
    the list their failures (and wrong bytes) land in."""
    names = iter(sorted(files))
    lock = threading.Lock()
    stop = threading.Event()
    failures: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            with lock:
                name = next(names, None)
            if name is None:
                return
            try:
                if client.read(f"{root}/{name}") != files[name]:
                    failures.append(AssertionError(f"{name}: wrong bytes"))
            except Exception as exc:
                failures.append(exc)

    workers = [threading.Thread(target=read, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    try:
        yield failures
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=60)


def _gets_per_s(cluster: LocalCluster, start: float, end: float) -> float:
    times = cluster.s3_get_times(since=start)
    return sum(1 for t in times if t < end) / (end - start)


def _mount(client: Client, cluster: LocalCluster, bucket: str) -> str:
    root = new_mount_path()
    client.mount(
        root,
        f"s3://{bucket}/d/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        max_requests_per_s=LIMIT,
    )
    client.ls(root)
    return root


def test_max_requests_per_s_holds_for_three_workers_together_in_every_window(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    # Enough cold blocks for 3 s of warm-up and 3 windows at the limit, with room.
    files = _files(cluster, bucket, count=96)
    root = _mount(client, cluster, bucket)
    with _cold_readers(client, root, files) as failures:
        time.sleep(3.0)  # every worker holds a lease split by demand
        start = time.time()
        time.sleep(3 * WINDOW_S + 0.5)
    rates = [
        _gets_per_s(cluster, start + i * WINDOW_S, start + (i + 1) * WINDOW_S) for i in range(3)
    ]
    assert not failures
    for rate in rates:
        assert 0.9 * LIMIT <= rate <= 1.1 * LIMIT, rates
    # All three workers fetched: the limit is split, not held by one.
    fetched = [s.ufs_gets for s in client.worker_stats()]
    assert len([n for n in fetched if n > 0]) == 3, fetched


def test_a_slowdown_storm_halves_the_get_rate_and_no_read_fails(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    files = _files(cluster, bucket, count=48)
    root = _mount(client, cluster, bucket)
    with _cold_readers(client, root, files) as failures:
        time.sleep(3.0)
        before = _gets_per_s(cluster, time.time() - 2.0, time.time())
        storm = time.time()
        # Fewer 503s than the GETs of the hold period: one halving per worker.
        cluster.s3_config(fail_gets=12)
        try:
            time.sleep(3.0)
        finally:
            cluster.s3_config(fail_gets=0)
        after = _gets_per_s(cluster, storm + 0.5, storm + 2.5)
    assert not failures, failures[:3]
    assert before >= 0.8 * LIMIT, before
    assert after <= 0.65 * LIMIT, (before, after)


def test_with_the_master_killed_the_workers_keep_their_last_shares_and_the_limit_holds(
    own_cluster: LocalCluster,
) -> None:
    s3 = own_cluster.s3_client()
    s3.create_bucket(Bucket="lapsed")
    with Client(own_cluster.master_address) as c:
        files = _files(own_cluster, "lapsed", count=64)
        root = _mount(c, own_cluster, "lapsed")
        with _cold_readers(c, root, files) as failures:
            time.sleep(3.0)  # both workers hold leases split by demand
            own_cluster.kill("master")
            time.sleep(1.0)
            start = time.time()
            time.sleep(WINDOW_S + 0.3)
        rate = _gets_per_s(own_cluster, start, start + WINDOW_S)
    assert not failures, failures[:3]
    # No master re-splits: the last shares add up to the limit, and hold it.
    assert 0.8 * LIMIT <= rate <= 1.1 * LIMIT, rate


def test_a_client_reading_the_store_itself_keeps_within_the_mounts_budget(
    own_cluster: LocalCluster,
) -> None:
    s3 = own_cluster.s3_client()
    s3.create_bucket(Bucket="direct")
    blocks = 24
    data = os.urandom(blocks * BLOCK)
    s3.put_object(Bucket="direct", Key="d/f.bin", Body=data)
    limit = 10
    with Client(own_cluster.master_address) as c:
        c.mount(
            "/d",
            "s3://direct/d/",
            endpoint_url=own_cluster.s3_endpoint,
            block_size=BLOCK,
            max_requests_per_s=limit,
        )
        c.ls("/d")
        own_cluster.kill("worker1")
        own_cluster.kill("worker2")  # no worker left: the client reads S3 itself
        start = time.time()
        assert c.read("/d/f.bin") == data
    times = sorted(own_cluster.s3_get_times(since=start))
    assert len(times) == blocks
    # The client holds at most the whole limit (an even share among the workers it
    # knows, none of them alive), plus a burst of two.
    assert (len(times) - 1 - 2) / (times[-1] - times[0]) <= limit * 1.1


def test_mount_flags_set_the_budgets_mounts_shows_and_a_negative_one_is_refused(
    cluster: LocalCluster, bucket: str
) -> None:
    root = new_mount_path()
    uri = f"s3://{bucket}/cli/"
    flags = ("--max-requests-per-second", "200", "--max-bytes-per-second", "2MiB")
    done = _cli(cluster, "--json", "mount", root, uri, "--endpoint-url", cluster.s3_endpoint,
                *flags, "--max-in-flight", "16")  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = next(
        m for m in json.loads(_cli(cluster, "--json", "mounts").stdout) if m["path"] == root
    )
    assert (shown["max_requests_per_s"], shown["max_bytes_per_s"], shown["max_in_flight"]) == (
        200,
        2 << 20,
        16,
    )
    bad = _cli(cluster, "mount", new_mount_path(), uri, "--endpoint-url", cluster.s3_endpoint,
               "--max-in-flight", "-1")  # fmt: skip
    assert bad.returncode == 1 and "max_in_flight must not be negative" in bad.stderr
