"""etcd out of space (its NOSPACE alarm): the master's errors and `reservoir health` say so
in words, with what to do, as RESOURCE_EXHAUSTED; and doing what they say brings it back."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from reservoir.client import Client
from reservoir.common.errors import ResourceExhausted
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.local.cluster import LocalCluster, etcd_binary
from reservoir.v1 import master_pb2, master_pb2_grpc
from tests.conftest import channel

QUOTA = 1024 * 1024  # etcd takes any quota; the database file alone is ~100 KiB
VALUE = b"x" * (256 * 1024)
LIMIT = 16 * QUOTA


@pytest.fixture(scope="module")
def small_etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A master (no workers) on an etcd whose quota is 1 MiB."""
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("etcd-space"),
        workers=0,
        etcd_flags=["--quota-backend-bytes", str(QUOTA)],
    )
    try:
        yield cluster
    finally:
        cluster.down()


def health(cluster: LocalCluster, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reservoir.cli.main", "health", *flags, cluster.master_address],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ,
    )


def etcdctl(cluster: LocalCluster, *args: str) -> str:
    creds = cluster.credentials
    scheme = "https" if creds else "http"
    tls = [f"--cacert={creds.ca}", f"--cert={creds.cert}", f"--key={creds.key}"] if creds else []
    port = cluster.processes["etcd"].port
    done = subprocess.run(
        [str(Path(etcd_binary()).with_name("etcdctl")), f"--endpoints={scheme}://127.0.0.1:{port}",
         *tls, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def fill(cluster: LocalCluster) -> str:
    """Writes to etcd until it refuses; the refusal's message."""

    async def main() -> str:
        store = open_metadata_store(cluster.metadata_url, 5, cluster.etcd_settings())
        try:
            for n in range(LIMIT // len(VALUE)):
                try:
                    await store.put(f"/fill/{n}".encode(), VALUE)
                except ResourceExhausted as exc:
                    return str(exc)
                # etcd weighs its database file, which grows when it commits (every 100 ms).
                await asyncio.sleep(0.15)
            raise AssertionError(f"etcd took {LIMIT} bytes under a {QUOTA}-byte quota")
        finally:
            await store.close()

    return asyncio.run(main())


def free_space(cluster: LocalCluster) -> None:
    """What the message says to do: drop the data, compact, defragment, disarm."""

    async def delete() -> None:
        store = open_metadata_store(cluster.metadata_url, 5, cluster.etcd_settings())
        try:
            await store.delete_prefix(b"/fill/")
        finally:
            await store.close()

    asyncio.run(delete())
    status = json.loads(etcdctl(cluster, "endpoint", "status", "-w", "json"))
    etcdctl(cluster, "compact", str(status[0]["Status"]["header"]["revision"]))
    etcdctl(cluster, "defrag")
    etcdctl(cluster, "alarm", "disarm")


def test_a_full_etcd_is_named_by_master_errors_and_health_until_space_is_freed(
    small_etcd_cluster: LocalCluster,
) -> None:
    cluster = small_etcd_cluster
    bucket = f"b-{uuid.uuid4().hex[:8]}"
    cluster.s3_client().create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/d/"
    assert health(cluster).returncode == 0

    refusal = fill(cluster)
    assert refusal.startswith("etcd is out of space: ")

    # A master call that writes: the status is RESOURCE_EXHAUSTED, the words say why.
    request = master_pb2.MountRequest(path="/full", uri=uri)
    request.options.endpoint_url = cluster.s3_endpoint
    with channel(cluster.master_address) as ch, pytest.raises(grpc.RpcError) as raw:
        master_pb2_grpc.MasterServiceStub(ch).Mount(request, timeout=30)
    assert raw.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert raw.value.details().startswith("etcd is out of space: ")
    assert "etcdctl alarm disarm" in raw.value.details()
    with Client(config=cluster.client_config()) as c:
        with pytest.raises(ResourceExhausted, match="^etcd is out of space: "):
            c.mount("/full", uri, endpoint_url=cluster.s3_endpoint)
        assert c.mounts() == []  # reads still work

    checked = health(cluster)
    assert checked.returncode == 1
    assert checked.stdout == ""
    [line] = checked.stderr.splitlines()
    assert f"{cluster.master_address}: RESOURCE_EXHAUSTED: etcd is out of space: " in line
    for advice in ("compact", "defrag", "alarm disarm", "--quota-backend-bytes"):
        assert advice in line
    # What probes run: the master itself still serves.
    probe = health(cluster, "--server-only")
    assert probe.returncode == 0 and probe.stdout.strip() == "SERVING", probe.stderr

    free_space(cluster)
    assert health(cluster).returncode == 0
    with Client(config=cluster.client_config()) as c:
        c.mount("/full", uri, endpoint_url=cluster.s3_endpoint)
        assert [m.path for m in c.mounts()] == ["/full"]


def test_health_reports_a_master_whose_etcd_is_down_within_its_own_deadline(
    small_etcd_cluster: LocalCluster,
) -> None:
    cluster = small_etcd_cluster
    cluster.stop("etcd")
    try:
        checked = health(cluster, "--timeout", "3")
        assert checked.returncode == 1
        [line] = checked.stderr.splitlines()
        assert line.startswith(f"{cluster.master_address}: UNAVAILABLE: "), line
        assert "etcd" in line or "metadata store" in line, line
        assert health(cluster, "--server-only").returncode == 0
    finally:
        cluster.restart_etcd()
