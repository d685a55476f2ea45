"""gs:// and az:// mounts on a real cluster, against fake-gcs-server and Azurite: listed,
loaded, read byte-exact through the CLI, the SDK and fsspec, cached by the workers, and
seen afresh once an object changes. The cluster's servers take the Azure account from
their environment (`--credentials env`), as a deployment's would."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
import pytest

from reservoir.client import Client, discovery
from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings
from reservoir.local.cluster import LocalCluster
from tests.cli_runs import run_cli
from tests.conftest import LEASE_TTL_S, new_mount_path

from ..emulators import AZURE_ENV, Azurite, FakeGcs


@pytest.fixture(scope="module")
def cloud_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster whose operator allows gs:// and az:// mounts, its servers holding the
    Azure dev account's key in their environment."""
    # The SDK reads a block itself when no worker serves it: this process needs them too.
    os.environ.update(AZURE_ENV)
    c = LocalCluster.up(
        tmp_path_factory.mktemp("cloud-cluster"),
        workers=2,
        lease_ttl=LEASE_TTL_S,
        env={"RESERVOIR_ALLOWED_SCHEMES": "s3,gs,az", **AZURE_ENV},
    )
    try:
        yield c
    finally:
        c.down()


@dataclass
class Bucket:
    """One bucket (container) of a cloud emulator, mounted: `store` writes behind the
    cluster's back, as another program would."""

    root: str
    store: UnderStore
    uri: str
    endpoint: str
    credentials: str


def _mount(cluster: LocalCluster, uri: str, endpoint: str, credentials: str) -> str:
    root = new_mount_path()
    done = run_cli(
        cluster, "mount", root, uri, "--endpoint-url", endpoint, "--credentials", credentials,
        "--block-size", "64KiB", "--metadata-sync", "always",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


@pytest.fixture(params=["gs", "az"])
def bucket(request: pytest.FixtureRequest, cloud_cluster: LocalCluster) -> Bucket:
    if request.param == "gs":
        gcs: FakeGcs = request.getfixturevalue("fake_gcs")
        uri = f"gs://{gcs.create_bucket()}/data/"
        endpoint, credentials = gcs.endpoint, "anonymous"
    else:
        az: Azurite = request.getfixturevalue("azurite")
        uri = f"az://{az.create_container()}/data/"
        endpoint, credentials = az.endpoint, "env"
    settings = UnderStoreSettings(endpoint_url=endpoint, credentials=credentials)
    store = open_under_store(uri, settings)
    store.put("hello.txt", b"hello from the cloud\n")
    store.put("dir/nested.bin", b"n" * 10)
    return Bucket(
        _mount(cloud_cluster, uri, endpoint, credentials), store, uri, endpoint, credentials
    )


def test_a_cloud_mount_lists_and_reads_byte_exact_through_the_cli_and_the_sdk(
    cloud_cluster: LocalCluster, bucket: Bucket
) -> None:
    payload = os.urandom(300_000)  # five 64 KiB blocks
    bucket.store.put("a.bin", payload)
    listed = run_cli(cloud_cluster, "ls", bucket.root)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["a.bin", "dir/", "hello.txt"]
    cat = run_cli(cloud_cluster, "cat", f"{bucket.root}/hello.txt")
    assert cat.stdout == "hello from the cloud\n", cat.stderr
    with Client(cloud_cluster.master_address) as client:
        assert client.read(f"{bucket.root}/a.bin") == payload
        assert client.read(f"{bucket.root}/dir/nested.bin") == b"n" * 10
    with fsspec.open(
        f"reservoir://{bucket.root}/a.bin", "rb", master=cloud_cluster.master_address
    ) as f:
        assert f.read() == payload


def test_load_caches_a_cloud_mount_and_a_changed_object_is_read_afresh(
    cloud_cluster: LocalCluster, bucket: Bucket
) -> None:
    first = os.urandom(200_000)
    bucket.store.put("shard.bin", first)
    done = run_cli(cloud_cluster, "--json", "load", bucket.root, "--wait")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "completed"
    with Client(cloud_cluster.master_address) as client:
        assert client.read(f"{bucket.root}/shard.bin") == first
    changed = os.urandom(150_000)
    bucket.store.put("shard.bin", changed)
    with Client(cloud_cluster.master_address) as client:
        assert client.read(f"{bucket.root}/shard.bin") == changed
    cat = run_cli(cloud_cluster, "cat", f"{bucket.root}/hello.txt")
    assert cat.stdout == "hello from the cloud\n"


def test_a_file_saved_in_parts_through_a_writable_mount_lands_whole_in_the_store(
    cloud_cluster: LocalCluster, bucket: Bucket
) -> None:
    config = discovery.client_config(cloud_cluster.master_address)
    with Client(config=dataclasses.replace(config, write_part_size=5 << 20)) as writer:
        root = new_mount_path()
        writer.mount(
            root, bucket.uri, endpoint_url=bucket.endpoint, credentials=bucket.credentials,
            block_size=1 << 20, writable=True,
        )  # fmt: skip
        data = os.urandom(11 * (1 << 20) + 7)  # three parts, each uploaded by a worker
        with writer.open(f"{root}/run/model.pt", "wb") as f:
            f.write(data)
            with pytest.raises(FileNotFoundError):
                bucket.store.head("run/model.pt")  # published on close only
        assert bucket.store.get_range("run/model.pt", 0, len(data) + 1) == data
        assert writer.read(f"{root}/run/model.pt") == data
        # No upload left behind, nor shown.
        assert bucket.store.keys_below("run/") == ["run/model.pt"]
        assert bucket.store.open_uploads("run/model.pt") == []
        assert sorted(e.path for e in writer.ls(root)) == [
            f"{root}/dir", f"{root}/hello.txt", f"{root}/run",
        ]  # fmt: skip
