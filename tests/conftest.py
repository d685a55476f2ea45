"""Fixtures that start real components as separate processes on 127.0.0.1.

`RESERVOIR_TEST_SECURE=1` runs the same tests against secure clusters: every cluster a test
starts gets TLS and token authentication (one CA and token set shared by the run), and this
process presents the admin token, as an operator's tools would.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from reservoir.client import Client
from reservoir.common.config import SecuritySettings
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport
from reservoir.local import pki
from reservoir.local.cluster import DEV_CREDENTIALS, LocalCluster
from tests.emulators import azurite, fake_gcs

# The cloud stores' emulators, one process each for the whole session (the contract suite
# and the cloud mount tests share them).
__all__ = ["azurite", "fake_gcs"]

LEASE_TTL_S = 3
SECURE = os.environ.get("RESERVOIR_TEST_SECURE", "") not in ("", "0")

# The client's direct-S3 fallback and the workers read the dev credentials from the env.
os.environ.update(DEV_CREDENTIALS)


def _secure_everything() -> None:
    """Every LocalCluster.up of this run starts a secure cluster with shared credentials."""
    creds = pki.create(
        Path(tempfile.mkdtemp(prefix="reservoir-test-pki-")), [f"worker{n}" for n in range(1, 7)]
    )
    os.environ["RESERVOIR_TLS_CA"] = str(creds.ca)
    os.environ["RESERVOIR_TOKEN_FILE"] = str(creds.token("admin"))
    plain_up = LocalCluster.up.__func__  # type: ignore[attr-defined]

    def secure_up(cls: type[LocalCluster], *args: object, **kwargs: object) -> LocalCluster:
        kwargs.update(secure=True, credentials=creds.directory)
        return plain_up(cls, *args, **kwargs)  # type: ignore[no-any-return]

    LocalCluster.up = classmethod(secure_up)  # type: ignore[method-assign, assignment]


if SECURE:
    _secure_everything()


# Every test under these starts real processes (etcd, an S3 server, master, workers), so
# `pytest -m "not integration"` is the fast tier: unit tests only, no sockets to servers.
_PROCESS_TESTS = ("integration", "contract")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.relative_to(here).parts[0] in _PROCESS_TESTS:
            item.add_marker(pytest.mark.integration)


def own_cluster_env() -> dict[str, str]:
    """The environment for a CLI that starts and uses a cluster of its own state dir: it
    finds the master and, for a --secure one, the CA and token in cluster.json."""
    mine = ("RESERVOIR_MASTER", "RESERVOIR_TLS_CA", "RESERVOIR_TOKEN", "RESERVOIR_TOKEN_FILE")
    return {k: v for k, v in os.environ.items() if k not in mine}


def block_files(cluster: LocalCluster, worker: str) -> list[Path]:
    """The block files a worker keeps in shared memory (one level down, in an unlisted
    directory, on a secure cluster)."""
    root = cluster.shm_root / worker
    return [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]


def channel(address: str) -> grpc.Channel:
    """A blocking channel to a server of a test cluster, secure when the run is."""
    return Transport(SecuritySettings.from_env(), CHANNEL_OPTIONS).sync_channel(address)


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
