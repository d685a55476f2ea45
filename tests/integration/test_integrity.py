"""Never wrong bytes: corrupted block files, hostile geometry, two geometries of one
object, and warm reads that outlive the master."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from reservoir.client import Client
from reservoir.common import config as cfg
from reservoir.common import worker_methods
from reservoir.common.blocks.block_file import HEADER_SIZE
from reservoir.common.models import block_request, file_id_for
from reservoir.local.cluster import LocalCluster
from reservoir.v1 import worker_pb2
from tests.conftest import block_files, channel, new_mount_path
from tests.eventually import eventually

BLOCK = 64 * 1024
_READ_BLOCK = worker_methods.READ_BLOCK


@pytest.fixture
def shm_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path / "c", workers=2, lease_ttl=3, shm=True)
    try:
        yield cluster
    finally:
        cluster.down()


def _client(cluster: LocalCluster, **settings: object) -> Client:
    return Client(config=cfg.ClientConfig(master=cluster.master_address, **settings))  # type: ignore[arg-type]


def _flip_three_bytes(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        for where in (HEADER_SIZE, HEADER_SIZE + (size - HEADER_SIZE) // 2, size - 1):
            f.seek(where)
            byte = f.read(1)
            f.seek(where)
            f.write(bytes([byte[0] ^ 0x5A]))


def _corrupt_every_block_file(cluster: LocalCluster) -> int:
    count = 0
    for worker in cluster.worker_names():
        for entry in block_files(cluster, worker):
            _flip_three_bytes(entry)
            count += 1
    return count


def _corrupt_total(c: Client) -> int:
    return sum(s.corrupt_blocks for s in c.worker_stats())


@pytest.mark.parametrize(
    "path_kind", ["short-circuit", "data-port", "grpc", "read_many", "cli-cat"]
)
def test_corrupted_block_files_are_never_served(
    shm_cluster: LocalCluster, tmp_path: Path, path_kind: str
) -> None:
    s3 = shm_cluster.s3_client()
    s3.create_bucket(Bucket="rot")
    big = os.urandom(3 * BLOCK + 123)
    small = os.urandom(5000)
    s3.put_object(Bucket="rot", Key="d/big.bin", Body=big)
    s3.put_object(Bucket="rot", Key="d/small.bin", Body=small)
    # A data port sends whole shared-memory blocks with sendfile, unread: the reader's
    # checksum catches the rot, and the full path has the worker drop and refetch.
    remote = path_kind in ("grpc", "data-port")
    with _client(shm_cluster, short_circuit=not remote, data_port=path_kind != "grpc") as c:
        c.mount("/rot", "s3://rot/d/", endpoint_url=shm_cluster.s3_endpoint, block_size=BLOCK)
        assert c.read("/rot/big.bin") == big and c.read("/rot/small.bin") == small
        assert _corrupt_every_block_file(shm_cluster) == 5
        before = sum(s.ufs_gets for s in c.worker_stats())
        if path_kind == "cli-cat":
            for name, data in (("big.bin", big), ("small.bin", small)):
                out = subprocess.run(
                    [sys.executable, "-m", "reservoir.cli.main", "--master"]
                    + [shm_cluster.master_address, "cat", f"/rot/{name}"],
                    capture_output=True,
                    timeout=60,
                )
                assert out.returncode == 0, out.stderr
                assert out.stdout == data
        elif path_kind == "read_many":
            assert c.read_many(["/rot/small.bin", "/rot/big.bin"]) == [small, big]
        else:
            assert c.read("/rot/big.bin") == big
            assert c.read("/rot/big.bin", BLOCK - 7, BLOCK + 20) == big[BLOCK - 7 : 2 * BLOCK + 13]
            assert c.read("/rot/small.bin") == small
        # Each corrupt block was dropped and fetched again, once.
        corrupt = _corrupt_total(c)
        assert corrupt >= 5
        assert sum(s.ufs_gets for s in c.worker_stats()) - before == corrupt
        # What was fetched again is whole, and served from cache from now on.
        assert c.read("/rot/big.bin") == big and c.read("/rot/small.bin") == small
        assert _corrupt_total(c) == corrupt


def _hostile(honest: worker_pb2.ReadBlockRequest, **changes: object) -> worker_pb2.ReadBlockRequest:
    request = worker_pb2.ReadBlockRequest()
    request.CopyFrom(honest)
    for name, value in changes.items():
        setattr(request, name, value)
    return request


def test_requests_with_hostile_geometry_are_refused_and_later_reads_stay_exact(
    cluster: LocalCluster, bucket: str
) -> None:
    data = os.urandom(3_670_021)
    cluster.s3_client().put_object(Bucket=bucket, Key="g/f.bin", Body=data)
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{bucket}/g/", endpoint_url=cluster.s3_endpoint)
        inode = c.stat(f"{root}/f.bin")
        gets_before = sum(s.ufs_gets for s in c.worker_stats())
        base = block_request(inode, 1)
        hostile = [
            # the real identity with another block size
            _hostile(base, block_size=4096),
            # a self-consistent identity with a block size the mount does not use
            _hostile(
                base,
                block_size=4096,
                file_id=file_id_for(inode.ufs_uri, inode.etag, inode.size, 4096),
            ),
            # a file size that would make the worker download far more than a block
            _hostile(
                base,
                index=0,
                block_size=1 << 40,
                file_size=1 << 41,
                file_id=file_id_for(inode.ufs_uri, inode.etag, 1 << 41, 1 << 40),
            ),
        ]
        for worker in c.workers():
            with channel(worker.address) as ch:
                call = ch.unary_stream(
                    _READ_BLOCK,
                    request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
                    response_deserializer=None,
                )
                for request in hostile:
                    with pytest.raises(grpc.RpcError) as caught:
                        list(call(request, timeout=10))
                    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert sum(s.ufs_gets for s in c.worker_stats()) == gets_before
        assert c.read(f"{root}/f.bin") == data
        assert c.read(f"{root}/f.bin", 4096, 10_000) == data[4096:14_096]


def test_one_prefix_mounted_twice_with_different_block_sizes_reads_exactly(
    cluster: LocalCluster, bucket: str
) -> None:
    data = os.urandom(2 * 1024 * 1024 + 512 * 1024)
    cluster.s3_client().put_object(Bucket=bucket, Key="two/f.bin", Body=data)
    a, b = new_mount_path(), new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(a, f"s3://{bucket}/two/", endpoint_url=cluster.s3_endpoint, block_size=1 << 20)
        c.mount(b, f"s3://{bucket}/two/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
        for _ in range(2):
            assert c.read(f"{a}/f.bin") == data
            assert c.read(f"{b}/f.bin") == data
            assert c.read_many([f"{a}/f.bin", f"{b}/f.bin"]) == [data, data]
            with c.open(f"{b}/f.bin") as f:
                f.seek(BLOCK * 3 + 5)
                assert f.read(1 << 20) == data[BLOCK * 3 + 5 : BLOCK * 3 + 5 + (1 << 20)]


def test_warm_reads_never_fail_while_the_master_is_dead(own_cluster: LocalCluster) -> None:
    s3 = own_cluster.s3_client()
    s3.create_bucket(Bucket="warm")
    files = {f"f{i}": os.urandom(BLOCK * (i % 3) + 777 * i + 1) for i in range(20)}
    for name, data in files.items():
        s3.put_object(Bucket="warm", Key=f"d/{name}", Body=data)
    # Short TTLs: within the test the client's file infos and worker list expire many
    # times over, as they would over hours of training with the defaults.
    with _client(own_cluster, file_info_ttl_s=1.0, workers_ttl_s=0.5, rpc_timeout_s=2.0) as c:
        c.mount("/w", "s3://warm/d/", endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        for name, data in files.items():
            assert c.read(f"/w/{name}") == data
        assert c.read_many([f"/w/{n}" for n in files]) == list(files.values())
        failures: list[str] = []
        reads = 0
        stop = threading.Event()

        def reader() -> None:
            nonlocal reads
            while not stop.is_set():
                for name, data in files.items():
                    try:
                        ok = c.read(f"/w/{name}") == data
                    except Exception as exc:
                        failures.append(f"{name}: {type(exc).__name__}: {exc}")
                        continue
                    if not ok:
                        failures.append(f"{name}: wrong bytes")
                    reads += 1

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        eventually(lambda: reads >= len(files), what="readers under way")
        own_cluster.kill("master")
        # Time passes on purpose: the client's file infos (1 s) and worker list (0.5 s)
        # expire many times over while the master stays dead; nothing to wait for.
        time.sleep(12.0)
        many = c.read_many([f"/w/{n}" for n in files])
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert failures == []
        assert many == list(files.values())
        assert reads > 100
