"""Same-host clients read blocks from the workers' shared-memory files."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common import config as cfg
from reservoir.local.cluster import LocalCluster
from tests.conftest import block_files

BLOCK = 64 * 1024


@pytest.fixture
def shm_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(
        tmp_path / "c", workers=2, lease_ttl=3, shm=True, capacity=str(6 * BLOCK)
    )
    try:
        yield cluster
    finally:
        cluster.down()
    assert not cluster.shm_root.exists()


def _client(cluster: LocalCluster, short_circuit: bool = True) -> Client:
    return Client(
        config=cfg.ClientConfig(master=cluster.master_address, short_circuit=short_circuit)
    )


def test_second_read_comes_from_the_workers_files_not_the_network(
    shm_cluster: LocalCluster,
) -> None:
    s3 = shm_cluster.s3_client()
    s3.create_bucket(Bucket="shm")
    data = os.urandom(3 * BLOCK + 17)
    s3.put_object(Bucket="shm", Key="d/x.bin", Body=data)
    with _client(shm_cluster) as c:
        c.mount("/s", "s3://shm/d/", endpoint_url=shm_cluster.s3_endpoint, block_size=BLOCK)
        assert c.read("/s/x.bin") == data  # cold: over gRPC, the workers fetch and keep
        served = sum(s.bytes_from_cache for s in c.worker_stats())
        assert c.aio.short_circuit_bytes == 0
        assert c.read("/s/x.bin") == data
        assert c.read("/s/x.bin", BLOCK - 5, BLOCK + 10) == data[BLOCK - 5 : 2 * BLOCK + 5]
        with c.open("/s/x.bin") as f:
            f.seek(BLOCK + 1)
            assert f.read() == data[BLOCK + 1 :]
        assert c.read_many(["/s/x.bin"]) == [data]
        assert c.aio.short_circuit_bytes >= 2 * len(data)
        assert sum(s.bytes_from_cache for s in c.worker_stats()) == served


def test_evicted_blocks_fall_back_to_grpc_with_correct_bytes(shm_cluster: LocalCluster) -> None:
    s3 = shm_cluster.s3_client()
    s3.create_bucket(Bucket="evict")
    files = {f"f{i}": os.urandom(4 * BLOCK) for i in range(5)}  # 20 blocks > 12 of capacity
    for name, data in files.items():
        s3.put_object(Bucket="evict", Key=f"d/{name}", Body=data)
    with _client(shm_cluster) as c:
        c.mount("/e", "s3://evict/d/", endpoint_url=shm_cluster.s3_endpoint, block_size=BLOCK)
        for _ in range(3):
            for name, data in files.items():
                assert c.read(f"/e/{name}") == data
        assert sum(s.evictions for s in c.worker_stats()) > 0
        held = sum(len(block_files(shm_cluster, w)) for w in ("worker1", "worker2"))
        assert held <= 12


def test_short_circuit_can_be_turned_off(shm_cluster: LocalCluster) -> None:
    s3 = shm_cluster.s3_client()
    s3.create_bucket(Bucket="off")
    s3.put_object(Bucket="off", Key="d/y", Body=b"y" * 1000)
    with _client(shm_cluster, short_circuit=False) as c:
        c.mount("/o", "s3://off/d/", endpoint_url=shm_cluster.s3_endpoint)
        for _ in range(2):
            assert c.read("/o/y") == b"y" * 1000
        assert c.aio.short_circuit_bytes == 0


def test_warm_same_host_reads_do_not_wait_for_the_clients_event_loop(
    shm_cluster: LocalCluster,
) -> None:
    """A warm read of blocks on this host runs in the caller's thread: with the client's
    event loop thread held busy, `read`, `readinto` of whole blocks and `read()` of a file
    object still return the right bytes."""
    s3 = shm_cluster.s3_client()
    s3.create_bucket(Bucket="direct")
    data = os.urandom(3 * BLOCK + 100)
    s3.put_object(Bucket="direct", Key="d/x.bin", Body=data)
    with _client(shm_cluster) as c:
        c.mount("/x", "s3://direct/d/", endpoint_url=shm_cluster.s3_endpoint, block_size=BLOCK)
        assert c.read("/x/x.bin") == data  # cold: through the loop and the workers
        handle = c.open("/x/x.bin")
        release = threading.Event()
        c._runtime.loop.call_soon_threadsafe(release.wait, 30)  # the loop thread is blocked now
        try:
            results: dict[str, bytes] = {}

            def reads() -> None:
                results["read"] = c.read("/x/x.bin")
                results["range"] = c.read("/x/x.bin", BLOCK - 1, BLOCK + 2)
                buffer = bytearray(2 * BLOCK)
                raw = handle.raw
                raw.seek(BLOCK)
                filled = raw.readinto(buffer)
                results["readinto"] = bytes(buffer[:filled])
                raw.seek(0)
                results["file"] = handle.read()

            reader = threading.Thread(target=reads, daemon=True)
            reader.start()
            reader.join(timeout=20)
            assert not reader.is_alive(), "a warm local read waited for the event loop"
        finally:
            release.set()
        assert results["read"] == data
        assert results["range"] == data[BLOCK - 1 : 2 * BLOCK + 1]
        assert results["readinto"] == data[BLOCK : 3 * BLOCK]
        assert results["file"] == data
        handle.close()
