"""Kill and restart parts of a real cluster; readers keep getting correct bytes."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from reservoir.client import Client
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.local.cluster import LocalCluster
from tests.conftest import LEASE_TTL_S
from tests.eventually import eventually

BLOCK = 64 * 1024


def _dataset(cluster: LocalCluster, count: int = 12) -> dict[str, bytes]:
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket="faults")
    files = {f"f{i}.bin": os.urandom(BLOCK * (i % 4) + 1000 * i) for i in range(count)}
    for name, data in files.items():
        s3.put_object(Bucket="faults", Key=f"d/{name}", Body=data)
    return files


def test_sigkill_of_one_worker_keeps_reads_correct(own_cluster: LocalCluster) -> None:
    files = _dataset(own_cluster)
    with Client(own_cluster.master_address) as c:
        c.mount("/f", "s3://faults/d/", endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        for name, data in files.items():
            assert c.read(f"/f/{name}") == data
        own_cluster.kill("worker1")
        for name, data in files.items():
            assert c.read(f"/f/{name}") == data
        # ...and from a new client that does not know yet that worker1 died.
    with Client(own_cluster.master_address) as fresh:
        for name, data in files.items():
            assert fresh.read(f"/f/{name}") == data


def test_reads_fall_back_to_s3_when_every_worker_is_dead(own_cluster: LocalCluster) -> None:
    files = _dataset(own_cluster, count=4)
    with Client(own_cluster.master_address) as c:
        c.mount("/f", "s3://faults/d/", endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        c.ls("/f")
        own_cluster.kill("worker1")
        own_cluster.kill("worker2")
        for name, data in files.items():
            assert c.read(f"/f/{name}") == data


def test_dead_worker_leaves_workers_and_location_table_within_lease_ttl(
    own_cluster: LocalCluster,
) -> None:
    files = _dataset(own_cluster)
    with Client(own_cluster.master_address) as c:
        c.mount("/f", "s3://faults/d/", endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        for name in files:
            c.read(f"/f/{name}")

        def holders() -> set[str]:
            ids: set[str] = set()
            for name in files:
                for workers in c.stat(f"/f/{name}", with_locations=True).locations.values():
                    ids.update(workers)
            return ids

        eventually(lambda: holders() == {"worker1", "worker2"})
        own_cluster.kill("worker1")
        killed = time.monotonic()
        eventually(lambda: "worker1" not in {w.id for w in c.workers()})
        # The lease is what removes a dead worker: gone within its TTL (and a poll).
        assert time.monotonic() - killed <= LEASE_TTL_S + 2
        eventually(lambda: holders() == {"worker2"})


def _stored_locations(cluster: LocalCluster) -> int:
    """How many (block, worker) locations the master has written to etcd."""

    async def main() -> int:
        store = open_metadata_store(cluster.metadata_url, 2.0, cluster.etcd_settings())
        try:
            return sum(len(json.loads(v)) for _, v in await store.get_prefix(keyspace.LOCATIONS))
        finally:
            await store.close()

    return asyncio.run(asyncio.wait_for(main(), 10))


def test_master_restart_keeps_mounts_namespace_and_block_locations(
    own_cluster: LocalCluster,
) -> None:
    files = _dataset(own_cluster)
    with Client(own_cluster.master_address) as c:
        c.mount("/f", "s3://faults/d/", endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        listing = [e.path for e in c.ls("/f")]
        for name in files:
            c.read(f"/f/{name}")
        eventually(lambda: c.report("/f").cached_blocks == c.report("/f").blocks)
        before = {n: c.stat(f"/f/{n}", with_locations=True).locations for n in files}
        held = sum(len(ws) for locations in before.values() for ws in locations.values())
        # The master writes locations to etcd in batches: all of them there before it dies.
        eventually(lambda: _stored_locations(own_cluster) == held, what="locations in etcd")
    own_cluster.kill("master")
    own_cluster.start_master()
    with Client(own_cluster.master_address) as c:
        assert [m.path for m in c.mounts()] == ["/f"]
        assert [e.path for e in c.ls("/f")] == listing
        heads = own_cluster.s3_counts().get("HEAD", 0)
        after = {n: c.stat(f"/f/{n}", with_locations=True).locations for n in files}
        assert own_cluster.s3_counts().get("HEAD", 0) == heads  # inodes came from etcd
        assert after == before
        gets = own_cluster.s3_counts().get("GET", 0)
        for name, data in files.items():
            assert c.read(f"/f/{name}") == data
        assert own_cluster.s3_counts().get("GET", 0) == gets


def test_worker_rejoins_after_etcd_restart(own_cluster: LocalCluster) -> None:
    own_cluster.stop("etcd")
    own_cluster.restart_etcd()
    with Client(own_cluster.master_address) as c:

        def both_registered() -> bool:
            try:
                return {w.id for w in c.workers()} == {"worker1", "worker2"}
            except ConnectionError:  # the master's own etcd client may still be reconnecting
                return False

        eventually(both_registered)


def test_locations_a_killed_master_never_wrote_are_back_within_5s_of_its_restart(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster.up(
        tmp_path / "c",
        workers=2,
        lease_ttl=LEASE_TTL_S,
        # The master writes locations to etcd only at shutdown; the workers' periodic full
        # report (60 s) is far away: only the new master's epoch brings them back.
        env={"RESERVOIR_LOCATION_FLUSH_INTERVAL": "3600"},
    )
    try:
        files = _dataset(cluster, count=8)
        with Client(cluster.master_address) as c:
            c.mount("/f", "s3://faults/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
            for name in files:
                c.read(f"/f/{name}")
            eventually(lambda: c.report("/f").cached_blocks == c.report("/f").blocks)
            before = {n: c.stat(f"/f/{n}", with_locations=True).locations for n in files}
        cluster.kill("master")  # SIGKILL: nothing was flushed
        cluster.start_master()
        with Client(cluster.master_address) as c:
            eventually(lambda: c.report("/f").cached_blocks == c.report("/f").blocks)
            after = {n: c.stat(f"/f/{n}", with_locations=True).locations for n in files}
        assert after == before
    finally:
        cluster.down()
