"""Fixtures that start real components as separate processes on 127.0.0.1."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster

LEASE_TTL_S = 3

# The client's direct-S3 fallback and the workers read the dev credentials from the env.
os.environ.update(DEV_CREDENTIALS)


def _up(tmp: Path, workers: int, **kwargs: object) -> LocalCluster:
    return LocalCluster.up(tmp, workers=workers, lease_ttl=LEASE_TTL_S, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A shared cluster (etcd, S3, master, 3 workers) for tests that do not break it."""
    c = _up(tmp_path_factory.mktemp("cluster"), workers=3)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of one's own (2 workers) for tests that kill or restart parts of it."""
    c = _up(tmp_path / "cluster", workers=2)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def bucket(cluster: LocalCluster) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    cluster.s3_client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster.master_address) as c:
        yield c


def new_mount_path() -> str:
    return f"/t/{uuid.uuid4().hex[:10]}"
