"""Reads across hosts that are hosts: each worker runs in a network namespace of its own
with its own address (host_network.py), etcd, S3 and the master in the root namespace on
the bridge, and clients in the root namespace told which host they are on.

"Same host" is decided by host id (RESERVOIR_HOST, the `host` setting; the machine's host
name by default). Namespaces of one machine share its host name and its files, so by
default they are one host, which is right for short-circuit: each can read the others'
block files. Here each namespace gets an id of its own and stands for a machine of its
own; had the product decided by host name or 127.0.0.1, every worker would be "same
host". Proven: short-circuit only where a client and a worker share a host, data ports
(at each host's own address) across hosts, a reader preferring the replica on its host,
then in its zone, over the block's home, and reads that survive a host dropping off the
network.

One cluster for the module (the last test cuts a host's link); everything is stopped and
the namespaces removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import grpc
import pytest

from reservoir.client import Client
from reservoir.common import worker_methods
from reservoir.common.config import ClientConfig, SecuritySettings
from reservoir.common.models import block_request
from reservoir.v1 import worker_pb2
from tests.eventually import eventually
from tests.integration.host_network import HostNetwork, unavailable
from tests.integration.hosts_cluster import (
    WORKER_PORT,
    Processes,
    shm_root,
    start_hosts_cluster,
)

# Host -> zone of the worker on it.
ZONES = {"h1": "zone-a", "h2": "zone-a", "h3": "zone-b"}
FILES = 24  # over 3 workers: each holds some (all on one: (1/3)^23)
SIZE = 16 * 1024


@dataclass
class HostsCluster:
    net: HostNetwork
    master: str
    s3_endpoint: str
    mount: str
    files: dict[str, bytes]
    holder: dict[str, str] = field(default_factory=dict)  # path -> worker id holding it

    def client(self, host: str, zone: str = "", **settings: object) -> Client:
        config = ClientConfig(
            master=self.master,
            host=host,
            zone=zone,
            security=SecuritySettings(),
            **settings,  # type: ignore[arg-type]
        )
        return Client(config=config)

    def held_by(self, worker: str) -> list[str]:
        return sorted(p for p, w in self.holder.items() if w == worker)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostsCluster]:
    why = unavailable()
    if why:
        pytest.skip(f"workers on separate hosts need network namespaces: {why}")
    state = tmp_path_factory.mktemp("hosts")
    net = HostNetwork()
    processes = Processes(state)
    try:
        try:
            net.create(list(ZONES))
        except OSError as exc:
            pytest.skip(f"the hosts' network could not be wired here: {exc}")
        yield _start(net, processes, state)
    finally:
        processes.stop_all()
        net.remove()
        shutil.rmtree(shm_root(net), ignore_errors=True)


def _start(net: HostNetwork, processes: Processes, state: Path) -> HostsCluster:
    master, s3 = start_hosts_cluster(net, processes, state, ZONES)
    cluster = HostsCluster(net, master, s3, f"/hosts/{uuid.uuid4().hex[:8]}", {})
    _load_data(cluster)
    return cluster


def _load_data(cluster: HostsCluster) -> None:
    """FILES files in a bucket, mounted, each read once (so its home worker holds it), and
    which worker holds which, once the master knows."""
    s3 = boto3.client("s3", endpoint_url=cluster.s3_endpoint, region_name="us-east-1")
    bucket = f"hosts-{uuid.uuid4().hex[:8]}"
    eventually(lambda: s3.create_bucket(Bucket=bucket), what="bucket created")
    for n in range(FILES):
        body = os.urandom(SIZE)
        s3.put_object(Bucket=bucket, Key=f"f{n:02}", Body=body)
        cluster.files[f"{cluster.mount}/f{n:02}"] = body
    with cluster.client("setup-host") as c:
        workers = {f"w-{name}" for name in ZONES}
        eventually(lambda: {w.id for w in c.workers()} == workers, what="workers registered")
        c.mount(cluster.mount, f"s3://{bucket}/", endpoint_url=cluster.s3_endpoint)
        for path, body in cluster.files.items():
            assert c.read(path) == body
        paths = sorted(cluster.files)

        def located() -> dict[str, str]:
            inodes = c.stat_many(paths, with_locations=True)
            held = {p: i.locations.get(0, []) for p, i in zip(paths, inodes, strict=True)}
            return {p: h[0] for p, h in held.items() if h} if all(held.values()) else {}

        cluster.holder = eventually(located, what="every file's holder known")


def _served(c: Client) -> dict[str, int]:
    """Bytes each worker has sent to readers (short-circuit reads never reach it)."""
    return {s.worker_id: sum(s.bytes_served.values()) for s in c.worker_stats()}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {w: after[w] - before.get(w, 0) for w in after}


def _read_all(c: Client, paths: list[str], files: dict[str, bytes]) -> None:
    for path in paths:
        assert c.read(path) == files[path]


def test_a_client_reads_block_files_itself_only_from_the_worker_on_its_host(
    hosts: HostsCluster,
) -> None:
    paths = sorted(hosts.files)
    mine = hosts.held_by("w-h1")
    assert mine and len(mine) < len(paths)
    with hosts.client("h1") as c:
        _read_all(c, paths, hosts.files)  # learns the files and workers
        before, sc, dp = _served(c), c.aio.short_circuit_bytes, c.aio.data_port_bytes
        _read_all(c, paths, hosts.files)
        assert c.aio.short_circuit_bytes - sc == SIZE * len(mine)
        assert c.aio.data_port_bytes - dp == SIZE * (len(paths) - len(mine))
        served = _delta(before, _served(c))
    assert served["w-h1"] == 0  # never asked: its files were read on its host
    for worker in ("w-h2", "w-h3"):
        assert served[worker] == SIZE * len(hosts.held_by(worker))


def test_a_client_on_a_host_without_a_worker_reads_every_block_over_data_ports(
    hosts: HostsCluster,
) -> None:
    paths = sorted(hosts.files)
    with hosts.client("h9") as c:
        workers = c.workers()
        assert {w.data_address.rsplit(":", 1)[0] for w in workers} == {
            h.address for h in hosts.net.hosts.values()
        }
        _read_all(c, paths, hosts.files)
        before, dp = _served(c), c.aio.data_port_bytes
        _read_all(c, paths, hosts.files)
        assert c.aio.short_circuit_bytes == 0
        assert c.aio.data_port_bytes - dp == SIZE * len(paths)
        served = _delta(before, _served(c))
    for worker in ("w-h1", "w-h2", "w-h3"):
        assert served[worker] == SIZE * len(hosts.held_by(worker))


def _replicate(hosts: HostsCluster, path: str, worker_id: str) -> None:
    """Makes `worker_id` hold `path` too (its ReadBlock fetches a block it lacks)."""
    with hosts.client("setup-host") as c:
        inode = c.stat(path)
        worker = next(w for w in c.workers() if w.id == worker_id)
        with grpc.insecure_channel(worker.address) as ch:
            call = ch.unary_stream(
                worker_methods.READ_BLOCK,
                request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
                response_deserializer=worker_pb2.BlockChunk.FromString,
            )
            assert (
                b"".join(m.data for m in call(block_request(inode, 0), timeout=10))
                == (hosts.files[path])
            )
        eventually(
            lambda: worker_id in c.stat(path, with_locations=True).locations.get(0, []),
            what=f"{worker_id} listed as holding {path}",
        )


def test_a_client_reads_a_replica_on_its_own_host_rather_than_the_blocks_home(
    hosts: HostsCluster,
) -> None:
    path = hosts.held_by("w-h1")[1]
    _replicate(hosts, path, "w-h3")
    with hosts.client("h3", "zone-b") as c:
        assert c.read(path) == hosts.files[path]
        before, sc = _served(c), c.aio.short_circuit_bytes
        assert c.read(path) == hosts.files[path]
        assert c.aio.short_circuit_bytes - sc == SIZE
        assert sum(_delta(before, _served(c)).values()) == 0  # no worker asked


def test_a_client_reads_the_replica_in_its_zone(hosts: HostsCluster) -> None:
    path = hosts.held_by("w-h1")[0]
    _replicate(hosts, path, "w-h3")  # zone-b; w-h1 is in zone-a
    with hosts.client("h8", "zone-b") as c:
        assert c.read(path) == hosts.files[path]
        before = _served(c)
        assert c.read(path) == hosts.files[path]
        served = _delta(before, _served(c))
    assert served == {"w-h1": 0, "w-h2": 0, "w-h3": SIZE}


def test_reads_succeed_while_a_host_is_off_the_network(hosts: HostsCluster) -> None:
    only_there = hosts.held_by("w-h2")
    replicated = only_there[0]
    _replicate(hosts, replicated, "w-h3")
    with hosts.client("h9", read_timeout_s=2.0) as c:
        _read_all(c, sorted(hosts.files), hosts.files)  # knows every file and worker
        hosts.net.cut("h2")
        try:
            with pytest.raises(OSError):  # the cut is real: h2 cannot be reached
                socket.create_connection((hosts.net.hosts["h2"].address, WORKER_PORT), 0.5)
            # From the other replica, or fetched by another worker or from S3: the bytes.
            _read_all(c, only_there, hosts.files)
        finally:
            hosts.net.mend("h2")
