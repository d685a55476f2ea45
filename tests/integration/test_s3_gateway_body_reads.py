"""How the gateway reads a body: each piece on a thread by the client's thread path (a
same-host worker's block file, else a worker's data port, which fetches a miss), what that
cannot read by the full path. A gateway reads a cold object through a worker's data port
(the worker fetches the miss), not over gRPC; one with short-circuit off (as on a host without workers) reads warm pieces from the data ports,
byte-exact, whole and by ranges."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path
from tests.eventually import eventually
from tests.gateway_process import running_gateway
from tests.integration.test_metrics import scrape

PIECE = 1 << 20
BODY = os.urandom(4 * (4 << 20) + 777)  # several blocks of the default size, many pieces


def _data_port_answers(cluster: LocalCluster) -> float:
    key = ("reservoir_worker_data_port_requests_total", (("code", "OK"),))
    return sum(
        scrape(cluster, name).get(key, 0.0)
        for name in cluster.processes
        if name.startswith("worker")
    )


def _mounted(cluster: LocalCluster) -> str:
    """A new mount of a new bucket holding `big.bin`: the gateway's key of it."""
    upstream = f"gwbody-{uuid.uuid4().hex[:10]}"
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=upstream)
    s3.put_object(Bucket=upstream, Key="big.bin", Body=BODY)
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{upstream}/", endpoint_url=cluster.s3_endpoint)
    return f"{root.removeprefix('/t/')}/big.bin"


def _boto3(url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id="any",
        aws_secret_access_key="any",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}),
    )


def test_a_cold_object_is_fetched_through_a_workers_data_port_not_grpc(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    env = {"RESERVOIR_GATEWAY_READ_PIECE": str(PIECE)}
    with running_gateway(cluster, tmp_path / "gateway.log", env) as url:
        gw = _boto3(url)
        # A first object makes the gateway know the workers (its very first read takes
        # the full path, which fetches the worker list).
        warm_up = _mounted(cluster)
        assert gw.get_object(Bucket="t", Key=warm_up)["Body"].read() == BODY
        key = _mounted(cluster)
        before = _data_port_answers(cluster)
        assert gw.get_object(Bucket="t", Key=key)["Body"].read() == BODY
        eventually(
            lambda: _data_port_answers(cluster) - before >= 17,
            timeout_s=10,
            what="a data-port answer (a fetched miss) for every piece of the cold object",
        )


@pytest.fixture(scope="module")
def remote_gateway(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, str]]:
    key = _mounted(cluster)
    env = {
        "RESERVOIR_SHORT_CIRCUIT": "false",
        "RESERVOIR_GATEWAY_READ_PIECE": str(PIECE),
    }
    log: Path = tmp_path_factory.mktemp("gateway-body") / "gateway.log"
    with running_gateway(cluster, log, env) as url:
        yield _boto3(url), key


def test_a_warm_large_body_comes_from_the_workers_data_ports_byte_exact(
    cluster: LocalCluster, remote_gateway: tuple[Any, str]
) -> None:
    gw, key = remote_gateway
    # The first read fetches the blocks into the workers (the full path: nothing is cached).
    assert gw.get_object(Bucket="t", Key=key)["Body"].read() == BODY
    before = _data_port_answers(cluster)
    assert gw.get_object(Bucket="t", Key=key)["Body"].read() == BODY
    first, last = PIECE - 5, 3 * PIECE + 9  # crosses pieces, not block-aligned
    ranged = gw.get_object(Bucket="t", Key=key, Range=f"bytes={first}-{last}")
    assert ranged["Body"].read() == BODY[first : last + 1]
    assert ranged["ContentRange"] == f"bytes {first}-{last}/{len(BODY)}"
    # One answer per piece (17 of the whole body's, 3 of the range's; none crosses a
    # block), each counted by its worker once its last byte is sent, which may be just
    # after the client has it.
    eventually(
        lambda: _data_port_answers(cluster) - before >= 17 + 3,
        timeout_s=10,
        what="a data-port answer for every piece",
    )
