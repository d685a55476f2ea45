"""The rank-local sampler with real processes: three workers on one machine standing for
three hosts (each its own RESERVOIR_HOST), a warm data set spread over them by placement,
and one rank per host, each reading as a client of its host. Every sample the sampler
gives a rank as local is read without a byte from another host's worker (short-circuit
from its own host's block files, or its own worker); the job reads most of its bytes on
its own hosts, where DistributedSampler's split reads about a third."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DistributedSampler  # noqa: E402

from reservoir.client import Client  # noqa: E402
from reservoir.local.cluster import LocalCluster  # noqa: E402
from reservoir.local.worker_changes import add_worker  # noqa: E402
from reservoir.local.worker_roster import WorkerOptions  # noqa: E402
from reservoir.torch import DistributedCacheAwareSampler  # noqa: E402

from ..conftest import LEASE_TTL_S  # noqa: E402

pytestmark = pytest.mark.integration

HOSTS = ["h1", "h2", "h3"]
FILES = 90
SIZE = 8 * 1024


@pytest.fixture
def three_hosts(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path / "c", workers=0, shm=True, lease_ttl=LEASE_TTL_S)
    try:
        for host in HOSTS:
            add_worker(cluster, WorkerOptions(host=host))
        yield cluster
    finally:
        cluster.down()


def _warm(cluster: LocalCluster) -> list[str]:
    """FILES files mounted and read once (each lands on its home), and known located."""
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    for i in range(FILES):
        s3.put_object(Bucket=bucket, Key=f"f{i:03d}", Body=os.urandom(SIZE))
    paths = [f"/ranks/f{i:03d}" for i in range(FILES)]
    with Client(config=cluster.client_config(host="setup")) as c:
        deadline = time.monotonic() + 30
        while {w.host for w in c.workers()} != set(HOSTS):
            assert time.monotonic() < deadline, "workers not registered"
            time.sleep(0.2)
        c.mount("/ranks", f"s3://{bucket}/", endpoint_url=cluster.s3_endpoint)
        c.read_many(paths)
        while not all(i.locations.get(0) for i in c.stat_many(paths, with_locations=True)):
            assert time.monotonic() < deadline, "locations not reported"
            time.sleep(0.2)
    return paths


def _served_by_host(client: Client) -> dict[str, int]:
    hosts = {w.id: w.host for w in client.workers()}
    served: dict[str, int] = dict.fromkeys(HOSTS, 0)
    for stats in client.worker_stats():
        served[hosts[stats.worker_id]] += sum(stats.bytes_served.values())
    return served


def _remote_bytes(cluster: LocalCluster, paths: list[str], shares: list[list[int]]) -> int:
    """Bytes other hosts' workers served while each rank read its share as a client of
    its own host."""
    remote = 0
    for rank, share in enumerate(shares):
        with Client(config=cluster.client_config(host=HOSTS[rank])) as c:
            before = _served_by_host(c)
            c.read_many([paths[i] for i in share])
            after = _served_by_host(c)
        remote += sum(after[h] - before[h] for h in HOSTS if h != HOSTS[rank])
    return remote


def test_each_rank_reads_its_local_samples_on_its_own_host_and_most_bytes_stay_local(
    three_hosts: LocalCluster,
) -> None:
    paths = _warm(three_hosts)
    with Client(config=three_hosts.client_config(host="h1")) as c:
        samplers = [
            DistributedCacheAwareSampler(paths, 3, rank, hosts=HOSTS, client=c, seed=1)
            for rank in range(3)
        ]
        for s in samplers:
            s.set_epoch(0)
        shares = [list(s) for s in samplers]
        where = samplers[0].locate(paths)
    assert sorted(i for s in shares for i in s) == list(range(FILES))
    assert {len(s) for s in shares} == {FILES // 3}
    not_local = sum(1 for r, s in enumerate(shares) for i in s if HOSTS[r] not in where[i])
    assert samplers[0].local_fraction >= 0.6  # placement's spread over 3 hosts, 90 files

    local_remote = _remote_bytes(three_hosts, paths, shares)
    # Only what the sampler could not give a rank on its host came from another host.
    assert local_remote <= not_local * SIZE

    plain = []
    for rank in range(3):
        d = DistributedSampler(range(FILES), num_replicas=3, rank=rank, seed=1)  # type: ignore[arg-type]
        d.set_epoch(0)
        plain.append(list(d))
    plain_remote = _remote_bytes(three_hosts, paths, plain)
    assert plain_remote >= FILES * SIZE // 2  # about two thirds read across hosts
    assert local_remote < plain_remote
