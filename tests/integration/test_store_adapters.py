"""Every under-store through every reader: a mount of each store (beside S3, which every
other test reads; gs:// and az:// on their emulators) read byte-exactly through fsspec, the PyTorch dataset and the FUSE
mount, the adapters a training job uses. They share one client read path; this proves the
stores reach it whole (change tokens, sizes, ranged reads) whatever the adapter asks."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.client.filesystem import ReservoirFileSystem
from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStoreSettings
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli
from tests.conftest import LEASE_TTL_S, new_mount_path

from ..emulators import AZURE_ENV, Azurite, FakeGcs
from ..http_files import HttpFiles
from ..webhdfs_server import WebHdfsServer
from .test_fuse import _force_unmount, _fuse_unusable

BLOCK = 64 * 1024


@dataclass
class Store:
    """A store's files as a test writes them, and how a mount names the store."""

    name: str
    uri: str
    put: Callable[[str, bytes], None]
    options: tuple[str, ...] = ("--credentials", "anonymous")


@pytest.fixture(scope="module")
def stores_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.up(
        tmp_path_factory.mktemp("stores-cluster"),
        workers=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_ALLOWED_SCHEMES": "s3,http,webhdfs,gs,az", **AZURE_ENV},
    )
    try:
        yield c
    finally:
        c.down()


def _in(directory: Path) -> Callable[[str, bytes], None]:
    def put(name: str, data: bytes) -> None:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return put


def _cloud(uri: str, endpoint: str, credentials: str) -> Store:
    """A bucket of a cloud store's emulator, written through the store itself."""
    ufs = open_under_store(uri, UnderStoreSettings(endpoint_url=endpoint, credentials=credentials))

    def put(name: str, data: bytes) -> None:
        ufs.put(name, data)

    options = ("--endpoint-url", endpoint, "--credentials", credentials)
    return Store(uri.split(":", 1)[0], uri, put, options)


@pytest.fixture(scope="module", params=["webhdfs", "http", "gs", "az"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    directory = tmp_path_factory.mktemp(request.param)
    prefix = uuid.uuid4().hex[:8]
    if request.param == "gs":
        gcs: FakeGcs = request.getfixturevalue("fake_gcs")
        yield _cloud(f"gs://{gcs.create_bucket()}/{prefix}/", gcs.endpoint, "anonymous")
        return
    if request.param == "az":
        # The SDK reads a block itself when no worker serves it: this process signs too.
        os.environ.update(AZURE_ENV)
        az: Azurite = request.getfixturevalue("azurite")
        yield _cloud(f"az://{az.create_container()}/{prefix}/", az.endpoint, "env")
        return
    if request.param == "webhdfs":
        hdfs = WebHdfsServer(directory)
        try:
            yield Store("webhdfs", hdfs.uri(f"{prefix}/"), _in(directory / prefix))
        finally:
            hdfs.stop()
        return
    served = HttpFiles(directory)
    try:
        yield Store("http", f"{served.url}{prefix}/", _in(directory / prefix))
    finally:
        served.stop()


def _files() -> dict[str, bytes]:
    rnd = random.Random(35)
    files = {f"train/x{i:02d}.bin": rnd.randbytes(rnd.randint(1, 3 * BLOCK)) for i in range(12)}
    files["train/large.bin"] = rnd.randbytes(9 * BLOCK + 5)
    files["train/empty.bin"] = b""
    return files


@pytest.fixture(scope="module")
def mounted(stores_cluster: LocalCluster, store: Store) -> tuple[str, dict[str, bytes]]:
    """The store's files mounted: the mount path and each file's path below it -> bytes."""
    files = _files()
    for name, data in files.items():
        store.put(name, data)
    root = new_mount_path()
    done = run_cli(
        stores_cluster, "mount", root, store.uri, "--block-size", "64KiB", *store.options
    )
    assert done.returncode == 0, done.stderr
    return root, files


def test_fsspec_reads_every_file_whole_and_in_ranges(
    stores_cluster: LocalCluster, mounted: tuple[str, dict[str, bytes]]
) -> None:
    root, files = mounted
    with Client(stores_cluster.master_address) as client:
        fs = ReservoirFileSystem(client=client, skip_instance_cache=True)
        for name, data in files.items():
            assert fs.cat_file(f"{root}/{name}") == data
        large = files["train/large.bin"]
        with fs.open(f"{root}/train/large.bin", "rb") as f:
            f.seek(BLOCK - 3)
            assert f.read(2 * BLOCK) == large[BLOCK - 3 : 3 * BLOCK - 3]


def test_the_torch_dataset_reads_every_file_byte_exact(
    stores_cluster: LocalCluster, mounted: tuple[str, dict[str, bytes]]
) -> None:
    torch_datasets = pytest.importorskip("reservoir.torch")
    root, files = mounted
    paths = sorted(f"{root}/{name}" for name in files)
    with Client(stores_cluster.master_address) as client:
        dataset = torch_datasets.ReservoirMapDataset.from_paths(paths, client=client)
        expected = {f"{root}/{name}": data for name, data in files.items()}
        assert dict(dataset[i] for i in range(len(dataset))) == expected  # one by one
        assert dict(dataset.__getitems__(range(len(dataset)))) == expected  # a batch


def test_the_fuse_mount_reads_every_file_byte_exact_and_lists_what_its_store_can(
    stores_cluster: LocalCluster,
    store: Store,
    mounted: tuple[str, dict[str, bytes]],
    tmp_path: Path,
) -> None:
    if (reason := _fuse_unusable()) is not None:
        pytest.skip(reason)
    root, files = mounted
    point = tmp_path / "mnt"
    point.mkdir()
    env = {**os.environ, "RESERVOIR_FUSE_RUN_DIR": str(tmp_path / "run")}
    cli = [sys.executable, "-m", "reservoir.cli.main", "--master", stores_cluster.master_address]
    done = subprocess.run(
        [*cli, "fuse", "-d", str(point), "--path", root],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    try:
        for name, data in files.items():
            assert (point / name).read_bytes() == data
        if store.name == "http":  # HTTP has no listing: "Operation not supported"
            with pytest.raises(OSError) as refused:
                os.listdir(point / "train")
            assert refused.value.errno == errno.EOPNOTSUPP
        else:
            assert sorted(os.listdir(point / "train")) == sorted(n[6:] for n in files)
    finally:
        subprocess.run([*cli, "fuse", "--unmount", str(point)], timeout=60, env=env, check=False)
        _force_unmount(point)
