"""A worker frozen by SIGSTOP during warm reads: alive, its kernel still accepting
connections and requests, nothing answering. Hedged block reads give it up after the
first-byte budget and read elsewhere, by either route that waits on a worker: a data port
in the reader's thread, and gRPC on the client's event loop."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.eventually import eventually

BLOCK = 64 * 1024
FROZEN = "worker2"
PASSES = 3  # each reader thread reads the whole data set this many times while it is frozen


@pytest.fixture
def three_workers(tmp_path: Path) -> Iterator[LocalCluster]:
    # A long lease: the frozen worker stays a member while the readers run, so they keep
    # meeting it (again each time its penalty ends) rather than reading around a worker
    # that membership has already dropped.
    cluster = LocalCluster.up(tmp_path / "c", workers=3, lease_ttl=60)
    try:
        yield cluster
    finally:
        cluster.down()


def _dataset(cluster: LocalCluster) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="frozen")
    rng = random.Random(32)
    files = {f"f{i:02d}.bin": rng.randbytes(BLOCK * (i % 4) + 500 * i + 1) for i in range(36)}
    for name, data in files.items():
        s3.put_object(Bucket="frozen", Key=f"d/{name}", Body=data)
    return files


def _read_loop(client: Client, files: dict[str, bytes], seed: int) -> tuple[list[float], int]:
    """Every file PASSES times in a shuffled order: each read's seconds, and how many
    reads returned other bytes than the store holds."""
    names = list(files)
    rng = random.Random(seed)
    latencies: list[float] = []
    wrong = 0
    for _ in range(PASSES):
        rng.shuffle(names)
        for name in names:
            start = time.monotonic()
            data = client.read(f"/frozen/{name}")
            latencies.append(time.monotonic() - start)
            wrong += data != files[name]
    return latencies, wrong


def test_a_frozen_worker_costs_reads_at_most_a_hedge_never_the_read_deadline(
    three_workers: LocalCluster,
) -> None:
    cluster = three_workers
    files = _dataset(cluster)
    by_port = Client(config=cluster.client_config())  # data ports, in the reader's thread
    by_grpc = Client(config=cluster.client_config(data_port=False))  # the event loop's gRPC
    try:
        by_port.mount(
            "/frozen", "s3://frozen/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK
        )

        def holders() -> set[str]:
            ids: set[str] = set()
            for name in files:
                for workers in by_port.stat(
                    f"/frozen/{name}", with_locations=True
                ).locations.values():
                    ids.update(workers)
            return ids

        for client in (by_port, by_grpc):  # warm: every block cached, both clients know all
            for name, data in files.items():
                assert client.read(f"/frozen/{name}") == data
        eventually(lambda: FROZEN in holders())
        # Signalled here, not by `cluster.kill`, which waits for the process to end.
        frozen = cluster.processes[FROZEN].pid
        os.killpg(frozen, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(4) as pool:
                runs = [
                    pool.submit(_read_loop, client, files, seed)
                    for seed, client in enumerate([by_port, by_port, by_grpc, by_grpc])
                ]
                results = [run.result() for run in runs]  # a failed read raises here
        finally:
            os.killpg(frozen, signal.SIGCONT)
        latencies = [s for run_latencies, _ in results for s in run_latencies]
        assert len(latencies) == 4 * PASSES * len(files)
        assert sum(wrong for _, wrong in results) == 0
        # The bound: a frozen worker costs a read about the hedge ceiling (1 s),
        # where it cost the read deadline (60 s) before.
        assert max(latencies) < 2.0
        # Both routes met the frozen worker and hedged away from it.
        assert by_port.aio.hedge_stats.hedged >= 1
        assert by_grpc.aio.hedge_stats.hedged >= 1
    finally:
        by_port.close()
        by_grpc.close()
